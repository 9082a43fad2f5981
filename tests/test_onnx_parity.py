"""tract, the ONNX engine's runtime, against onnxruntime: each of the three sample models of
model_repository/face_onnx run by both on the same real input, outputs within 1e-4.

tract runs through examples/onnx_run (`cargo build --release --examples`), which loads a model
the way the engine does (cleaned, typed, optimized, planned: engine::onnx::run_model). The inputs come
from real photos, pre-processed as the engine does (src/engine/onnx/, docs/engines.md
"ONNX engine"), each stage fed by the previous stage's onnxruntime outputs:

- detector: the photo resized to the model's 320x240, RGB, (x - 127) / 128, NCHW;
- landmark model: the grey crop of the detector's best box, resized to 64x64, / 256;
- embedder: the face aligned onto the ArcFace 112x112 reference points by the 5-point similarity
  transform (least squares) from the 68 landmarks, BGR, (x - 127) / 128.

Here the image work is Pillow and numpy, not the engine's own resize and warp, so the tensors are close to
the engine's rather than bit-identical; both runtimes get exactly the same tensor. The output of
each comparison (max |tract - onnxruntime|) is printed and recorded as a test property.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from PIL import Image


TOLERANCE = 1e-4
# The sample models (tests/environment.py ONNX_MODEL_FILES) by role.
MODELS = {
    "detector": "fr_detect.onnx", "landmarks": "fr_landmark.onnx", "embedder": "fr_feature.onnx"
}
PHOTOS = ("obama2.jpg", "biden.jpg")
# src/pipeline/align.rs ARCFACE_112: eye centres, nose tip, mouth corners in a 112x112 chip.
ARCFACE_112 = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
     [41.5493, 92.3655], [70.7299, 92.2041]]
)
DETECTOR_THRESHOLD = 0.7  # model_repository/face_onnx detector_threshold


@pytest.fixture(scope="module")
def onnx_run(example) -> Path:
    return example("onnx_run")


@pytest.fixture(scope="module")
def sessions(suite_env) -> dict[str, onnxruntime.InferenceSession]:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return {
        role: onnxruntime.InferenceSession(
            str(suite_env.onnx_models / file), options, providers=["CPUExecutionProvider"]
        )
        for role, file in MODELS.items()
    }


def run_onnxruntime(session: onnxruntime.InferenceSession, tensor: np.ndarray) -> list[np.ndarray]:
    return session.run(None, {session.get_inputs()[0].name: tensor})


def run_tract(binary: Path, model: Path, tensor: np.ndarray, workdir: Path) -> list[np.ndarray]:
    """examples/onnx_run on one input: every output, in the model's output order."""
    source = workdir / "input.f32"
    tensor.astype("<f4").tofile(source)
    prefix = workdir / "out"
    shape = ",".join(str(d) for d in tensor.shape)
    done = subprocess.run(
        [str(binary), str(model), str(source), shape, str(prefix)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, f"onnx_run failed ({done.returncode}): {done.stderr}"
    outputs = []
    while (prefix.parent / f"out.{len(outputs)}.f32").is_file():
        k = len(outputs)
        dims = (prefix.parent / f"out.{k}.shape").read_text().strip()
        values = np.fromfile(prefix.parent / f"out.{k}.f32", dtype="<f4")
        outputs.append(values.reshape([int(d) for d in dims.split(",")] if dims else []))
    return outputs


# ---- the engine's pre-processing, in numpy ---------------------------------------------------

def nchw(pixels: np.ndarray, mean: float, scale: float) -> np.ndarray:
    """uint8 [H, W, C] -> float32 [1, C, H, W] of (value - mean) * scale."""
    return ((pixels.astype(np.float32) - mean) * scale).transpose(2, 0, 1)[np.newaxis].copy()


def detector_input(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    resized = Image.fromarray(rgb).resize(size, Image.BILINEAR)
    return nchw(np.asarray(resized), 127.0, 1.0 / 128.0)


def best_box(scores: np.ndarray, boxes: np.ndarray, width: int, height: int) -> np.ndarray:
    """The highest-scoring face box in pixels [left, top, right, bottom]."""
    face = scores[0, :, 1]
    best = int(np.argmax(face))
    assert face[best] >= DETECTOR_THRESHOLD, f"no face found (best score {face[best]:.3f})"
    return boxes[0, best] * np.array([width, height, width, height])


def crop_rect(box: np.ndarray, width: int, height: int) -> tuple[int, int, int, int]:
    """The box clamped into the image as the engine does: integer (x, y, w, h)."""
    left = min(max(box[0], 0.0), width - 1.0)
    top = min(max(box[1], 0.0), height - 1.0)
    right = min(max(box[2], left + 1.0), float(width))
    bottom = min(max(box[3], top + 1.0), float(height))
    return int(left), int(top), int(right - left), int(bottom - top)


def landmark_input(rgb: np.ndarray, rect: tuple[int, int, int, int], size: int) -> np.ndarray:
    x, y, w, h = rect
    grey = Image.fromarray(rgb).convert("L").crop((x, y, x + w, y + h))
    small = np.asarray(grey.resize((size, size), Image.BILINEAR), dtype=np.float32)
    return (small / 256.0)[np.newaxis, np.newaxis].copy()


def five_points(landmarks: np.ndarray, rect: tuple[int, int, int, int]) -> np.ndarray:
    """68 points relative to the crop -> image pixels -> the 5 ArcFace points."""
    x, y, w, h = rect
    points = landmarks.reshape(68, 2) * np.array([w, h]) + np.array([x, y])
    return np.array([
        points[[37, 38, 40, 41]].mean(axis=0), points[[43, 44, 46, 47]].mean(axis=0),
        points[30], points[[48, 60]].mean(axis=0), points[[54, 64]].mean(axis=0),
    ])


def similarity(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Least-squares similarity transform src -> dst (2x3), as src/pipeline/align.rs."""
    s, d = src - src.mean(axis=0), dst - dst.mean(axis=0)
    var = (s ** 2).sum()
    a = (s * d).sum() / var
    b = (s[:, 0] * d[:, 1] - s[:, 1] * d[:, 0]).sum() / var
    t = dst.mean(axis=0) - np.array([[a, -b], [b, a]]) @ src.mean(axis=0)
    return np.array([[a, -b, t[0]], [b, a, t[1]]])


def embedder_input(rgb: np.ndarray, five: np.ndarray) -> np.ndarray:
    """The 112x112 aligned chip, BGR, (x - 127) / 128."""
    m = similarity(five, ARCFACE_112)
    inverse = np.linalg.inv(np.vstack([m, [0.0, 0.0, 1.0]]))[:2]  # chip -> image, for Pillow
    chip = Image.fromarray(rgb).transform(
        (112, 112), Image.AFFINE, data=tuple(inverse.ravel()), resample=Image.BILINEAR
    )
    return nchw(np.asarray(chip)[..., ::-1], 127.0, 1.0 / 128.0)


@pytest.fixture(scope="module")
def model_inputs(photos, sessions) -> dict[str, dict[str, np.ndarray]]:
    """{photo: {model role: input tensor}}, each built from the photo and the previous models'
    outputs (onnxruntime)."""
    detector_shape = sessions["detector"].get_inputs()[0].shape  # [1, 3, 240, 320]
    landmark_size = sessions["landmarks"].get_inputs()[0].shape[2]  # 64
    result = {}
    for photo in PHOTOS:
        rgb = photos.rgb(photo)
        height, width = rgb.shape[:2]
        detector = detector_input(rgb, (detector_shape[3], detector_shape[2]))
        scores, boxes = run_onnxruntime(sessions["detector"], detector)
        rect = crop_rect(best_box(scores, boxes, width, height), width, height)
        landmarks_in = landmark_input(rgb, rect, landmark_size)
        [landmarks] = run_onnxruntime(sessions["landmarks"], landmarks_in)
        five = five_points(landmarks, rect)
        x, y, w, h = rect
        assert np.all((five >= [x, y]) & (five <= [x + w, y + h])), (
            f"{photo}: landmarks {five.tolist()} outside the face box {rect}"
        )
        embedder = embedder_input(rgb, five)
        result[photo] = {"detector": detector, "landmarks": landmarks_in, "embedder": embedder}
    return result


@pytest.mark.parametrize("photo", PHOTOS)
@pytest.mark.parametrize("role", list(MODELS))
def test_tract_matches_onnxruntime(
    onnx_run, suite_env, sessions, model_inputs, tmp_path, record_property, role, photo
):
    tensor = model_inputs[photo][role]
    expected = run_onnxruntime(sessions[role], tensor)
    got = run_tract(onnx_run, suite_env.onnx_models / MODELS[role], tensor, tmp_path)
    assert len(got) == len(expected), f"tract gave {len(got)} outputs, onnxruntime {len(expected)}"
    worst = 0.0
    for k, (ours, theirs) in enumerate(zip(got, expected)):
        assert ours.shape == theirs.shape, (
            f"output {k}: tract {ours.shape}, onnxruntime {theirs.shape}"
        )
        assert np.isfinite(ours).all(), f"output {k}: tract gave non-finite values"
        worst = max(worst, float(np.max(np.abs(ours - theirs))))
    record_property("max_abs_diff", worst)
    print(
        f"\n{MODELS[role]} on {photo} {list(tensor.shape)}: "
        f"max |tract - onnxruntime| = {worst:.3g}"
    )
    assert worst <= TOLERANCE, (
        f"{MODELS[role]} on {photo}: tract differs from onnxruntime by up to {worst:.3g} "
        f"(tolerance {TOLERANCE})"
    )
