"""scripts/model_check.py, as a user runs it on a detector and an embedder: on the sample pair
(with its landmark model) and on the BlazeFace pair it names the family and the settings, finds
the sample photos' faces and recommends a match_threshold that separates them; on a file that is
no model, or a pair the backend cannot serve, it says why and exits 1."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from environment import REPO_ROOT

pytestmark = pytest.mark.engines("onnx")

SCRIPT = REPO_ROOT / "scripts" / "model_check.py"


def run(suite_env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)


def figures(out: str) -> tuple[float, float, float]:
    """The farthest same-person pair, the closest different-people pair, the threshold."""
    same = re.search(r"same person: +[\d.]+ - ([\d.]+)", out)
    other = re.search(r"different people: +([\d.]+) -", out)
    threshold = re.search(r"== match_threshold ([\d.]+):", out)
    assert same and other and threshold, out
    return float(same.group(1)), float(other.group(1)), float(threshold.group(1))


@pytest.mark.parametrize("pair", ["sample", "blazeface"])
def test_a_threshold_that_separates_the_sample_photos(suite_env, pair):
    models = suite_env.onnx_models
    if pair == "sample":
        done = run(suite_env, models / "fr_detect.onnx", models / "fr_feature.onnx",
                   "--landmark-model", models / "fr_landmark.onnx")
        family = "ultraface"
    else:
        done = run(suite_env, models / "face_detection_front_128x128_barracuda.onnx",
                   models / "fr_feature.onnx")
        family = "blazeface"
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert f"{family} detector" in out, out
    for photo in ("obama.jpg", "obama2.jpg", "obama3.jpg", "biden.jpg"):
        assert f"{photo} (" in out and f"{photo} ({photo[:5]}): 1 face(s)" in out, out
    same, other, threshold = figures(out)
    assert same < threshold < other, out
    # The config it prints serves the pair as read, with the threshold.
    assert f'key: "detector_family" value: {{ string_value: "{family}" }}' in out, out
    assert f'key: "match_threshold" value: {{ string_value: "{threshold}" }}' in out, out


def test_what_it_cannot_read_is_said_with_exit_status_1(suite_env, photos):
    models = suite_env.onnx_models
    done = run(suite_env, photos.path("obama.jpg"), models / "fr_feature.onnx")
    assert done.returncode == 1 and "not an ONNX model" in done.stderr, done.stderr
    # A pair the backend cannot serve: UltraFace without a landmark model.
    done = run(suite_env, models / "fr_detect.onnx", models / "fr_feature.onnx")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot serve the pair" in done.stderr and "landmark_model" in done.stderr, done.stderr
