"""Embedders as they come, through the real server: an NHWC copy of the sample embedder (a
Transpose in front) and a 160x160 copy (a Resize in front) give the sample's names, their input
size and layout read from the model and the face aligned to it; `embedder_normalize:
standardize` and `embedder_flip` give the embeddings a numpy computation of the same gives on
the aligned face the server returns (`return_crops`), through onnxruntime's Python API."""

from __future__ import annotations

import base64
import io

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper
from PIL import Image

from face_client import encoded_tensors, infer, infer_encoded

pytestmark = pytest.mark.engines("onnx")

SAMPLE = "fr_feature.onnx"
PHOTOS = ("obama2.jpg", "obama3.jpg", "biden.jpg")
PERSON = {"obama2.jpg": "obama", "obama3.jpg": "obama", "biden.jpg": "biden"}
WANTED = {"return_embeddings": True, "return_crops": True}


def with_front(model: onnx.ModelProto, name: str, shape: list[int], op: onnx.NodeProto,
               *initializers: onnx.TensorProto) -> onnx.ModelProto:
    """`model` with a new first input `name` of `shape`, turned into its old input by `op`."""
    graph = model.graph
    old = graph.input[0]
    graph.input.remove(old)
    graph.input.insert(0, helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    graph.node.insert(0, op)
    graph.initializer.extend(initializers)
    return model


def nhwc_copy(source) -> onnx.ModelProto:
    model = onnx.load(source)
    old = model.graph.input[0].name
    return with_front(model, "pixels", [1, 112, 112, 3],
                      helper.make_node("Transpose", ["pixels"], [old], perm=[0, 3, 1, 2]))


def copy_160(source) -> onnx.ModelProto:
    model = onnx.load(source)
    old = model.graph.input[0].name
    sizes = helper.make_tensor("to_112", TensorProto.INT64, [4], [1, 3, 112, 112])
    # Opset 11's Resize takes roi and scales as (empty) tensors, not as missing inputs.
    empty = [helper.make_tensor(name, TensorProto.FLOAT, [0], []) for name in ("roi", "scales")]
    resize = helper.make_node("Resize", ["face160", "roi", "scales", "to_112"], [old],
                              mode="linear")
    model = with_front(model, "face160", [1, 3, 160, 160], resize, sizes, *empty)
    # Resize with `sizes` needs opset 11 or later.
    model.opset_import[0].version = max(model.opset_import[0].version, 11)
    return model


def parameter(key: str, value: str) -> tuple[str, str]:
    """A config edit that sets a parameter the sample config does not set."""
    line = f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'
    return (r'(parameters \{ key: "engine")', line + r"\n\1")


def embedder(path) -> tuple[str, str]:
    """A config edit that points `embedder_model` at `path`."""
    return (r'("embedder_model"\s+value: \{ string_value: ")[^"]*', r"\g<1>" + str(path))


@pytest.fixture(scope="module")
def models(suite_env, tmp_path_factory):
    folder = tmp_path_factory.mktemp("embedders")
    files = {}
    for name, make in (("nhwc", nhwc_copy), ("big", copy_160)):
        files[name] = folder / f"fr_feature_{name}.onnx"
        onnx.save(make(suite_env.onnx_models / SAMPLE), files[name])
    return files


@pytest.fixture(scope="module")
def embedders(start_module_server, models):
    copies = {
        "nhwc": [embedder(models["nhwc"])],
        "big": [embedder(models["big"])],
        "standardized": [parameter("embedder_normalize", "standardize")],
        "flipped": [parameter("embedder_flip", "true")],
    }
    return start_module_server(copies=copies)


@pytest.fixture(scope="module")
def reference(suite_env):
    """The sample embedder as onnxruntime's Python API runs it."""
    return onnxruntime.InferenceSession(str(suite_env.onnx_models / SAMPLE),
                                        providers=["CPUExecutionProvider"])


def face_of(server, photo_bytes: bytes, model: str, **parameters) -> dict:
    [doc] = infer(server.http(), encoded_tensors([photo_bytes]), model=model,
                  parameters=parameters or None)
    [face] = doc["faces"]
    return face


def chip_of(face: dict) -> np.ndarray:
    """The aligned face the embedder saw, HxWx3 RGB."""
    png = base64.b64decode(face["crop"])
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), np.float64)


def embed(session, planes: np.ndarray) -> np.ndarray:
    """The sample embedder's raw output for one CxHxW input."""
    [out] = session.run(None, {"input": planes[None].astype(np.float32)})
    return out[0].astype(np.float64)


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_the_load_reads_each_embedders_input(embedders):
    log = embedders.log_text()
    assert "embedder fr_feature_nhwc.onnx 512-d (112x112 NHWC BGR" in log, log
    assert "embedder fr_feature_big.onnx 512-d (160x160 NCHW BGR" in log, log
    assert "standardised" in log and "with its mirror image" in log


@pytest.mark.parametrize("model", ["nhwc", "big"])
@pytest.mark.parametrize("photo", PHOTOS)
def test_other_layouts_and_sizes_give_the_samples_names(embedders, server, photos, engine,
                                                       model, photo):
    mine = face_of(embedders, photos.bytes(photo), model)
    [sample] = infer_encoded(server.http(), [photos.bytes(photo)])[0]["faces"]
    assert mine["name"] == sample["name"] == PERSON[photo]
    if model == "nhwc":  # the same numbers in another order: the same embedding
        assert abs(mine["distance"] - sample["distance"]) <= 0.01, (mine, sample)
    elif photo != "biden.jpg":  # aligned at 160 and resized: the sample's ranges
        low, high = engine.same_person
        assert low - 0.05 <= mine["distance"] <= high + 0.05, mine


@pytest.mark.parametrize("photo", PHOTOS)
def test_standardize_is_each_faces_own_mean_and_deviation(embedders, reference, photos, photo):
    face = face_of(embedders, photos.bytes(photo), "standardized", **WANTED)
    bgr = chip_of(face)[:, :, ::-1]
    # FaceNet's prewhitening over all the face's values.
    values = (bgr - bgr.mean()) / max(bgr.std(), 1.0 / np.sqrt(bgr.size))
    want = unit(embed(reference, values.transpose(2, 0, 1)))
    got = np.asarray(face["embedding"])
    assert np.abs(got - want).max() <= 1e-4, np.abs(got - want).max()


@pytest.mark.parametrize("photo", PHOTOS)
def test_flip_sums_the_face_and_its_mirror(embedders, reference, photos, photo):
    face = face_of(embedders, photos.bytes(photo), "flipped", **WANTED)
    assert face["name"] == PERSON[photo]
    bgr = (chip_of(face)[:, :, ::-1] - 127.0) / 128.0
    planes = bgr.transpose(2, 0, 1)
    want = unit(embed(reference, planes) + embed(reference, planes[:, :, ::-1]))
    got = np.asarray(face["embedding"])
    assert np.abs(got - want).max() <= 1e-4, np.abs(got - want).max()
