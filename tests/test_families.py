"""The ONNX engine reads every detector family's output layout as the family's reference code
writes it: synthetic detectors (tests/family_models.py, built from the layouts' spec sheets,
not from the Rust decoders) served through the real server, each answering coloured dots with
faces at known places. Per layout: a black image has no face; an image letterboxed into the
input (1000x700, 517x333; one free-size model is served at a non-square 800x608) with a red,
a green and a blue dot answers exactly the faces planted at those places (boxes and five
points in the frame's pixels, within 3 pixels of the input scaled to the frame); several dots
of one stride answer one face each; the load log names the family each model was read as
(`auto` picking the right one) and its runtime (onnxruntime, or tract for three of them).
Models no family reads, a family named that does not fit, a detector answering NaN and an
embedder answering nothing fail their load with a message saying so, while the server keeps
serving its other model.

One server serves all the good variants (each its own copy of the sample config, its
detector file written into its version folder); a second one, with explicit model control,
loads the bad ones."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from tritonclient.utils import InferenceServerException

import family_models as fm
from face_client import infer, infer_encoded, pixel_tensors
from triton_server import ONNX_SAMPLE_MODEL, TritonServer, parameters_of

pytestmark = pytest.mark.engines("onnx")

VARIANTS = {v.name: v for v in fm.VARIANTS}
ONE_INSTANCE = [(r"count:\s*\d+", "count: 1")]
# Every model: one engine (one instance, one thread), the files as they are (no batch freed).
COMMON = {"batch_threads": "1", "free_batch": "false"}
# The sample config's detector settings (UltraFace's): dropped, so each family's reference
# preparation, threshold and NMS apply, and its own points (no landmark model).
DROPPED = (
    "detector_family", "landmark_model", "detector_threshold", "nms_iou", "detector_channels",
    "detector_mean", "detector_scale", "detector_resize", "detector_input_size",
)
READY_TIMEOUT_S = 120.0
TOLERANCE_PX = 3.0


def model_edits(
    sample: dict[str, str], params: dict[str, str], drop: bool = True
) -> list[tuple[str, str]]:
    """Config edits of a copy of the sample model: one instance, the sample's detector
    settings dropped (unless not `drop`), `params` set."""
    edits = list(ONE_INSTANCE)
    for key in DROPPED if drop else ():
        if key in sample:
            edits.append((rf'[^\n]*key:\s*"{key}"[^\n]*\n', ""))
    for key, value in params.items():
        if key in sample and not (drop and key in DROPPED):
            edits.append((rf'(key:\s*"{key}"\s+value:\s*\{{\s*string_value:\s*")[^"]*',
                          rf"\g<1>{value}"))
        else:
            edits.append((r"\Z", f'parameters {{ key: "{key}" value: {{ string_value: '
                                 f'"{value}" }} }}\n'))
    return edits


def variant_params(v: fm.Variant) -> dict[str, str]:
    params = {"detector_model": v.file, **v.params}
    if v.runtime == "tract":
        params["runtime"] = "tract"
    return params


def sample_parameters(suite_env) -> dict[str, str]:
    return parameters_of(suite_env.config_of(ONNX_SAMPLE_MODEL).read_text())


def version_dir(server: TritonServer, model: str):
    return server.root / "models" / model / "1"


def save_beside(model: onnx.ModelProto, path) -> None:
    """`model` written at `path` in a test's version folder, in place of the link to the suite's
    copy of a file of that name (face_onnx_yunet's real YuNet has the test model's name):
    written through the link, it would replace the real weights for every later test."""
    path.unlink(missing_ok=True)
    onnx.save(model, path)


@pytest.fixture(scope="module")
def server(suite_env, tmp_path_factory, engine):
    """Every variant beside the sample `face`, empty galleries."""
    sample = sample_parameters(suite_env)
    copies = {v.name: model_edits(sample, variant_params(v)) for v in VARIANTS.values()}
    server = TritonServer(
        suite_env, tmp_path_factory.mktemp("families"), params=COMMON, gallery={},
        engine=engine.name, config_edits=ONE_INSTANCE, copies=copies,
    )
    for v in VARIANTS.values():
        save_beside(v.build(), version_dir(server, v.name) / v.file)
    try:
        server.start(READY_TIMEOUT_S)
        yield server
    finally:
        server.stop()
        server.discard_library()


# ---- images and the faces they must answer -----------------------------------------------------

@dataclass(frozen=True)
class Letterbox:
    """Where a w x h frame lands in a variant's input: input = frame * k + offset."""
    kx: float
    ky: float
    ox: int
    oy: int
    new_w: int
    new_h: int

    @staticmethod
    def of(v: fm.Variant, w: int, h: int) -> "Letterbox":
        big_w, big_h = v.size
        r = min(big_w / w, big_h / h)
        new_w, new_h = math.floor(w * r + 0.5), math.floor(h * r + 0.5)
        if v.placement == "letterbox-centre":
            ox, oy = (big_w - new_w) // 2, (big_h - new_h) // 2
        else:
            ox = oy = 0
        return Letterbox(new_w / w, new_h / h, ox, oy, new_w, new_h)

    def to_frame(self, x: float, y: float) -> tuple[float, float]:
        return (x - self.ox) / self.kx, (y - self.oy) / self.ky

    def tolerance(self) -> float:
        """3 pixels of the input, in frame pixels where the frame is bigger than the input."""
        return TOLERANCE_PX * max(1.0, 1.0 / min(self.kx, self.ky))


def dot_image(v: fm.Variant, size: tuple[int, int], dots) -> tuple[np.ndarray, list[dict]]:
    """A black `size` (w, h) RGB image with a saturated square per dot (colour, (fx, fy): a
    place in the frame as fractions of its width and height), and the faces `v` must answer.
    Each dot is placed at the centre of the cell of its colour's stride that the place falls in,
    in the model's input, its side half the stride: it fires that one place."""
    w, h = size
    box = Letterbox.of(v, w, h)
    image = np.zeros((h, w, 3), np.uint8)
    want = []
    for colour, (fx, fy) in dots:
        s = v.fires.get(colour, fm.FIRES[colour])
        x_in, y_in = box.ox + fx * box.new_w, box.oy + fy * box.new_h
        cell = (int(x_in // s), int(y_in // s))
        cx, cy = (cell[0] + 0.5) * s, (cell[1] + 0.5) * s
        (left, top), (right, bottom) = box.to_frame(cx - s / 4, cy - s / 4), box.to_frame(
            cx + s / 4, cy + s / 4)
        x0, x1 = math.ceil(left - 0.5), math.floor(right - 0.5)
        y0, y1 = math.ceil(top - 0.5), math.floor(bottom - 0.5)
        assert 0 <= x0 <= x1 < w and 0 <= y0 <= y1 < h, (colour, fx, fy)
        image[y0:y1 + 1, x0:x1 + 1, fm.CHANNEL[colour]] = 255
        if colour not in v.fires:
            continue  # a colour the model ignores (BlazeFace's green)
        planted_box, points = v.planted(colour, cell)
        (l, t), (r, b) = box.to_frame(*planted_box[:2]), box.to_frame(*planted_box[2:])
        want.append({
            "colour": colour, "box": [l, t, r, b],
            "landmarks": [list(box.to_frame(*p)) for p in points],
        })
    return image, want


def assert_faces(doc: dict, want: list[dict], v: fm.Variant, tolerance: float) -> None:
    """Exactly the `want` faces (matched by box centre), boxes and (where the model gives
    them) points within `tolerance` frame pixels."""
    faces = doc["faces"]
    assert len(faces) == len(want), (
        f"{v.name}: {len(faces)} faces, planted {len(want)}: {faces} vs {want}"
    )
    left = list(faces)
    for expected in want:
        l, t, r, b = expected["box"]
        centre = ((l + r) / 2, (t + b) / 2)

        def off(face):
            box = face["box"]
            return math.dist(centre, ((box["left"] + box["right"]) / 2,
                                      (box["top"] + box["bottom"]) / 2))
        face = min(left, key=off)
        left.remove(face)
        got = [face["box"][k] for k in ("left", "top", "right", "bottom")]
        assert np.allclose(got, expected["box"], atol=tolerance), (
            f"{v.name} {expected['colour']} dot: box {got}, planted "
            f"{np.round(expected['box'], 1).tolist()} (tolerance {tolerance:.1f} px)"
        )
        if v.points != "none":
            assert np.allclose(face["landmarks"], expected["landmarks"], atol=tolerance), (
                f"{v.name} {expected['colour']} dot: points {face['landmarks']}, planted "
                f"{np.round(expected['landmarks'], 1).tolist()} (tolerance {tolerance:.1f} px)"
            )


def detect(client, model: str, image: np.ndarray, detect_only: bool = True) -> dict:
    parameters = {"detect_only": True} if detect_only else None
    [doc] = infer(client, pixel_tensors(image), model=model, parameters=parameters)
    return doc


THREE_DOTS = (("red", (0.25, 0.3)), ("green", (0.7, 0.25)), ("blue", (0.45, 0.6)))
# Four faces of the red dots' stride, far apart.
FOUR_RED = tuple(("red", place) for place in ((0.2, 0.2), (0.8, 0.2), (0.2, 0.8), (0.8, 0.75)))


# ---- the good variants --------------------------------------------------------------------------

@pytest.mark.parametrize("name", VARIANTS)
def test_the_load_log_names_the_family_and_runtime(server, name):
    """Each model is read as its family (`auto` where detector_family is not set picks the
    right one), on its runtime, at its input size (the family's, or detector_input_size) and
    its family's placement."""
    v = VARIANTS[name]
    line = re.search(
        rf"model '{re.escape(name)}': engine onnx \((\w+)[^\n]*?; ([\w-]+) detector "
        rf"{re.escape(v.file)} \(([^\n]*)", server.log_text(),
    )
    assert line, f"no load line of {name} in the log:\n{server.log_tail(40)}"
    runtime, family, described = line.groups()
    assert (family, runtime) == (v.family, v.runtime), line.group(0)
    size = f"{v.size[0]}x{v.size[1]} {v.placement} "
    assert size in described, f"{name}: expected {size!r} in {line.group(0)}"
    if v.points == "none":
        assert "landmarks fr_landmark.onnx" in line.group(0), line.group(0)
    else:
        assert "five points from the detector" in line.group(0), line.group(0)


@pytest.mark.parametrize("name", VARIANTS)
def test_a_black_image_has_no_face(http, name):
    doc = detect(http, name, np.zeros((700, 1000, 3), np.uint8))
    assert doc["faces"] == [], doc


@pytest.mark.parametrize("size", [(1000, 700), (517, 333)], ids=["1000x700", "517x333"])
@pytest.mark.parametrize("name", VARIANTS)
def test_three_dots_answer_the_planted_faces(http, name, size):
    """A red, a green and a blue dot: a face of stride 8, 16 and 32 each (BlazeFace: its two
    maps; green is none of them), boxes and points where the model planted them. A full
    request (aligned and embedded; an empty gallery names nobody)."""
    v = VARIANTS[name]
    image, want = dot_image(v, size, THREE_DOTS)
    doc = detect(http, name, image, detect_only=False)
    assert doc["image"] == {"width": size[0], "height": size[1]}, doc["image"]
    assert_faces(doc, want, v, Letterbox.of(v, *size).tolerance())
    assert all(face["name"] == "unknown" for face in doc["faces"]), doc


@pytest.mark.parametrize("name", VARIANTS)
def test_several_faces_of_one_stride(http, name):
    v = VARIANTS[name]
    image, want = dot_image(v, (800, 600), FOUR_RED)
    doc = detect(http, name, image)
    assert_faces(doc, want, v, Letterbox.of(v, 800, 600).tolerance())
    assert all(0.5 <= face["score"] <= 1.0 for face in doc["faces"]), doc


# ---- models that must fail their load ------------------------------------------------------------

BAD = {
    "no_family": ({"detector_model": "no_family.onnx"}, "no_family.onnx", fm.no_family),
    "wrong_family": ({"detector_model": "det_10g.onnx", "detector_family": "yunet"},
                     "det_10g.onnx", lambda: fm.scrfd(9, batched=False, free=True)),
    "nan_output": ({"detector_model": "nan.onnx"}, "nan.onnx",
                   lambda: fm.scrfd(9, batched=True, free=False, named=True, nan=True)),
    "empty_embedder": ({"embedder_model": "empty_embedder.onnx"}, "empty_embedder.onnx",
                       fm.empty_embedder),
}


@pytest.fixture(scope="module")
def explicit(suite_env, tmp_path_factory, engine, probe):
    """A server with explicit model control: the sample `face` loaded (and answering), the bad
    models there to be loaded by the tests. The empty embedder's copy keeps the sample
    detector and landmarks."""
    sample = sample_parameters(suite_env)
    copies = {
        name: model_edits(sample, params, drop=name != "empty_embedder")
        for name, (params, _file, _build) in BAD.items()
    }
    server = TritonServer(
        suite_env, tmp_path_factory.mktemp("bad_families"), params=COMMON, gallery={},
        engine=engine.name, config_edits=ONE_INSTANCE, copies=copies,
        extra_args=("--model-control-mode=explicit",),
    )
    for name, (_params, file, build) in BAD.items():
        save_beside(build(), version_dir(server, name) / file)
    try:
        server.start(READY_TIMEOUT_S)
        client = server.http()
        client.load_model("face")
        assert_face_serves(client, probe)
        yield server
    finally:
        server.stop()
        server.discard_library()


def assert_face_serves(client, probe: bytes) -> None:
    assert client.is_model_ready("face"), "the good model is no longer ready"
    [doc] = infer_encoded(client, [probe])
    assert len(doc["faces"]) == 1, doc


def load_failure(server: TritonServer, model: str) -> str:
    """The error answering `model`'s load request; the model is not ready after it."""
    client = server.http()
    with pytest.raises(InferenceServerException) as info:
        client.load_model(model)
    error = info.value.message() or str(info.value)
    assert not client.is_model_ready(model)
    assert "TRITONBACKEND_ModelInitialize" in error, f"not the backend's refusal: {error}"
    return error


@pytest.mark.parametrize("name", BAD)
def test_a_bad_model_fails_its_load_and_the_other_keeps_serving(explicit, probe, name):
    error = load_failure(explicit, name)
    file = BAD[name][1]
    assert file in error, error
    if name == "no_family":
        # It names the parameter and lists what it saw.
        assert "detector_model" in error and "no detector family" in error, error
        assert "[1,7,3]" in error and "[1,5]" in error, error
    elif name == "wrong_family":
        assert "detector_model" in error and "does not fit" in error, error
        assert "yunet" in error and "scrfd" in error, error
    elif name == "nan_output":
        assert "detector_model" in error and "NaN" in error, error
    else:
        assert "embedder_model" in error, error
    assert_face_serves(explicit.http(), probe)
