"""ArcFace-convention chips as insightface cuts them: for the sample model (face_onnx: an
embedder on the ArcFace 112x112 template, BGR, (x - 127) / 128), insightface's
`utils/face_align.py` `norm_crop` (skimage's SimilarityTransform, i.e. Umeyama with scale,
onto `arcface_dst`, then cv2.warpAffine with a black border), written here in numpy and OpenCV,
is computed at the five points the server answered; its chip through the same embedder
(onnxruntime, in the test) is our embedding at cosine >= 0.9999 on every face of the sample
photos (measured 1.000000: our similarity estimate and warp are theirs)."""

from __future__ import annotations

import cv2
import numpy as np
import onnxruntime
import pytest

from face_client import infer, pixel_tensors

pytestmark = pytest.mark.engines("onnx")

MODEL = "face_onnx"
# insightface's arcface_dst (utils/face_align.py) for a 112x112 chip.
ARCFACE_DST = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
                        [41.5493, 92.3655], [70.7299, 92.2041]], dtype=np.float32)


def umeyama(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """skimage.transform._geometric._umeyama(src, dst, estimate_scale=True): the 2x3 similarity
    that maps src onto dst in the least-squares sense."""
    num, dim = src.shape
    src_mean, dst_mean = src.mean(axis=0), dst.mean(axis=0)
    src_demean, dst_demean = src - src_mean, dst - dst_mean
    a = dst_demean.T @ src_demean / num
    d = np.ones((dim,), dtype=np.float64)
    if np.linalg.det(a) < 0:
        d[dim - 1] = -1
    t = np.eye(dim + 1, dtype=np.float64)
    u, s, v = np.linalg.svd(a)
    rank = np.linalg.matrix_rank(a)
    assert rank == dim, "degenerate points"
    t[:dim, :dim] = u @ np.diag(d) @ v
    scale = 1.0 / src_demean.var(axis=0).sum() * (s @ d)
    t[:dim, dim] = dst_mean - scale * (t[:dim, :dim] @ src_mean.T)
    t[:dim, :dim] *= scale
    return t[:2]


def norm_crop(bgr: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
    """insightface's norm_crop(img, landmark, image_size=112)."""
    m = umeyama(landmarks.astype(np.float64), ARCFACE_DST.astype(np.float64))
    return cv2.warpAffine(bgr, m, (112, 112), borderValue=0.0)


@pytest.fixture(scope="module")
def sample(start_module_server):
    return start_module_server(model=MODEL)


@pytest.fixture(scope="module")
def embedder(sample):
    return onnxruntime.InferenceSession(str(sample.model_dir / "1" / "fr_feature.onnx"),
                                        providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("photo", ["obama.jpg", "obama2.jpg", "obama3.jpg", "biden.jpg",
                                   "group5.jpg"])
def test_chips_are_insightfaces_norm_crop(sample, embedder, photos, photo):
    bgr = cv2.imread(str(photos.path(photo)))
    [doc] = infer(sample.http(), pixel_tensors([np.ascontiguousarray(bgr[:, :, ::-1])]), MODEL,
                  parameters={"return_embeddings": True})
    assert doc["faces"], doc
    for face in doc["faces"]:
        points = np.array(face["landmarks"], np.float32)
        assert points.shape == (5, 2), points.shape
        chip = norm_crop(bgr, points).astype(np.float32)  # BGR, as the model expects
        blob = ((chip - 127.0) / 128.0).transpose(2, 0, 1)[np.newaxis]
        theirs = embedder.run(None, {embedder.get_inputs()[0].name: blob})[0].ravel()
        ours = np.array(face["embedding"], np.float32)
        cos = float(theirs @ ours / np.linalg.norm(theirs) / np.linalg.norm(ours))
        print(photo, face["box"], f"cosine {cos:.6f}")
        assert cos >= 0.9999, (photo, face["box"], cos)  # measured 1.000000
