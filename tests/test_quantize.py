"""int8 copies (scripts/quantize.py, `model_precision`), through the real server: a quantization
that fails its check writes nothing and says which figure failed; an int8 copy beside a model is
served in its place with `model_precision: int8`, names the sample photos as the float models do,
and is another embedder to the gallery (faces enrolled with the float models are kept, not
matched)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from environment import REPO_ROOT
from face_client import encoded_tensors, infer, infer_encoded, names
from triton_server import set_parameter

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import quantize  # noqa: E402

pytestmark = pytest.mark.engines("onnx")

PHOTOS = ("obama2.jpg", "obama3.jpg", "biden.jpg", "group5.jpg")


def test_a_copy_that_fails_its_check_writes_nothing(suite_env, tmp_path):
    """The sample embedder's int8 copy: its embeddings' cosine to the float ones stays under
    0.99 on real faces (docs/engines.md), so the script prints its figures, names the one that
    failed, and writes no file."""
    out = tmp_path / "fr_feature.int8.onnx"
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "quantize.py"),
         str(suite_env.onnx_models / "fr_feature.onnx"), str(out), "--role", "embedder"],
        capture_output=True, text=True, timeout=600, cwd=REPO_ROOT / "scripts")
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "held-apart photos:" in done.stdout and "embedding cosine >=" in done.stdout, text
    assert "the check failed, nothing written" in done.stderr, text
    assert "embedding cosine 0.9" in done.stderr and "(at least 0.99)" in done.stderr, text
    assert not out.exists()


def test_int8_copies_are_served_in_place_and_are_another_embedder(start_server, photos):
    server = start_server()
    client = server.http()
    [ack] = infer_encoded(client, [photos.bytes("obama3.jpg")], enroll="barack")
    assert ack["enrolled"]["added"], ack
    float_docs = [infer_encoded(client, [photos.bytes(p)])[0] for p in PHOTOS]
    assert names(float_docs[1]) == ["barack"], float_docs[1]
    # An int8 copy of the landmark model, made from what the float pipeline saw (unchecked:
    # this test is about serving a copy, not about passing the check).
    seen = [quantize.Seen(photos.path(p), "", d["faces"]) for p, d in zip(PHOTOS, float_docs)]
    version = server.model_dir / "1"
    base = quantize.engine_form((version / "fr_landmark.onnx").resolve(),
                                server.root / "fr_landmark.engine.onnx")
    quantize.quantize(base, version / "fr_landmark.int8.onnx", quantize.landmark_inputs(seen, base))
    server.stop()
    config = server.model_dir / "config.pbtxt"
    config.write_text(set_parameter(config.read_text(), "model_precision", "int8"))
    server.start()
    log = server.log_text()
    assert "landmarks fr_landmark.int8.onnx" in log and "detector fr_detect.onnx" in log, log
    assert "1 enrolled faces in the gallery store were made by another embedder" in log, log
    client = server.http()
    int8_docs = [infer_encoded(client, [photos.bytes(p)])[0] for p in PHOTOS]
    expected = [names(d) for d in float_docs]
    expected[1] = ["obama"]  # barack was enrolled by the float models: kept, not matched
    assert [names(d) for d in int8_docs] == expected, int8_docs
    [batch] = [infer(client, encoded_tensors([photos.bytes(p) for p in PHOTOS]))]
    assert [names(d) for d in batch] == expected, batch
