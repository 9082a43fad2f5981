"""Model parameters other than the defaults: pixel_format, return_embeddings, match_threshold
and its engine default (both engines), detector (dlib only), the ONNX engine's model files
(onnx only: a load that must fail). Gallery {obama.jpg, biden.jpg} throughout."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from face_client import assert_face, assert_geometry, assert_person, infer_encoded, infer_pixels
from triton_server import ONNX_SAMPLE_MODEL, TritonServer, parameters_of


@pytest.fixture(scope="module")
def bgr_server(start_module_server):
    return start_module_server(params={"pixel_format": "BGR", "return_embeddings": "true"})


@pytest.fixture(scope="module")
def bgr(bgr_server):
    return bgr_server.http()


@pytest.mark.parametrize("photo,person", [("obama2.jpg", "obama"), ("biden.jpg", "biden")])
def test_bgr_pixels_are_recognized(bgr, photos, engine, photo, person):
    [raw] = infer_pixels(bgr, photos.bgr(photo))
    [encoded] = infer_encoded(bgr, [photos.bytes(photo)])  # decoding does not depend on pixel_format
    by_pixels = assert_person(raw, person, engine, photos.size(photo))
    by_encoded = assert_person(encoded, person, engine, photos.size(photo))
    # Same pixels reach the embedder both ways, so the distances agree; swapped channels would not.
    assert abs(by_pixels["distance"] - by_encoded["distance"]) < 0.03, (by_pixels, by_encoded)


def test_rgb_pixels_to_bgr_model_still_find_the_face(bgr, photos):
    [doc] = infer_pixels(bgr, photos.rgb("obama2.jpg"))
    assert len(doc["faces"]) == 1  # the name may be wrong: the colours are
    assert_geometry(doc)


SAMPLES = ("obama.jpg", "obama2.jpg", "obama3.jpg", "biden.jpg")
# The documented distances (tests/engines.py, docs/engines.md) are given to two decimals.
ROUNDING = 0.005


def test_embeddings_and_distances(bgr, photos, engine):
    """The returned embeddings of the sample photos: two photos of one person are within the
    engine's documented same-person range, two people at least its different-people distance,
    and `distance` is the engine's metric between a face's embedding and the gallery's."""
    docs = infer_encoded(bgr, [photos.bytes(photo) for photo in SAMPLES])
    faces = {photo: assert_single(doc) for photo, doc in zip(SAMPLES, docs)}
    embeddings = {photo: np.array(face["embedding"]) for photo, face in faces.items()}
    for face in faces.values():
        assert_face(face, engine)
        assert np.isfinite(face["embedding"]).all() and np.linalg.norm(face["embedding"]) > 0
    low, high = engine.same_person
    for a, b in itertools.combinations(SAMPLES, 2):
        distance = engine.distance(embeddings[a], embeddings[b])
        if a.startswith("obama") and b.startswith("obama"):
            assert low - ROUNDING <= distance <= high + ROUNDING, (
                f"{a} vs {b} (one person): {engine} distance {distance:.4f} not in {low}-{high}"
            )
        else:
            assert distance >= engine.different_people - ROUNDING, (
                f"{a} vs {b} (two people): {engine} distance {distance:.4f} "
                f"below {engine.different_people}"
            )
    # The gallery holds obama.jpg and biden.jpg, embedded the same way as the request's photo.
    for photo in ("obama2.jpg", "obama3.jpg"):
        expected = engine.distance(embeddings[photo], embeddings["obama.jpg"])
        # Answers round the gallery's distances to distance_decimals (2).
        assert faces[photo]["distance"] == pytest.approx(expected, abs=0.005 + 1e-3), (
            f"{photo}: reported distance {faces[photo]['distance']} is not the {engine.metric} "
            f"distance {expected:.4f} to the gallery's obama"
        )
        assert faces[photo]["distance"] == round(faces[photo]["distance"], 2)


def assert_single(doc: dict) -> dict:
    assert len(doc["faces"]) == 1, doc["faces"]
    return doc["faces"][0]


def test_match_threshold(start_server, photos, engine):
    """With a tiny threshold the nearest person is still measured but no longer named."""
    client = start_server(params={"match_threshold": "0.05"}).http()
    [doc] = infer_encoded(client, [photos.bytes("obama2.jpg")])
    face = assert_person(doc, "unknown", engine.with_threshold(0.05))
    assert face["distance"] is not None and 0.05 <= face["distance"] < engine.match_threshold, face


def test_default_match_threshold(start_server, photos, engine):
    """Without match_threshold the engine's own default applies (the table's threshold)."""
    no_threshold = (r'[^\n]*"match_threshold"[^\n]*\n', "")
    server = start_server(config_edits=[no_threshold])
    expected = f"match threshold {engine.match_threshold:g} ({engine.metric})"
    assert expected in server.log_text(), f"the model load does not log {expected!r}"
    [doc] = infer_encoded(server.http(), [photos.bytes("obama3.jpg")])
    assert_person(doc, "obama", engine)


@pytest.mark.engines("dlib")
def test_cnn_detector(start_server, photos, engine):
    """dlib's MMOD CNN detector (parameter `detector`, dlib only)."""
    # Small images: the CNN detector takes seconds per megapixel on a CPU.
    gallery = {"obama.jpg": photos.path("obama_half.jpg")}
    client = start_server(params={"detector": "cnn"}, gallery=gallery).http()
    pixels = photos.rgb("obama2.jpg", 0.5)
    [doc] = infer_pixels(client, pixels)
    assert_person(doc, "obama", engine, (pixels.shape[1], pixels.shape[0]))

    # Tiny and thin images: dlib's MMOD network threw a C++ exception (1x1, 10x6) or
    # segfaulted (9x4000) on them; the cnn_min_side fast path (default 32) answers them without
    # running the CNN (test_dlib_fence.py runs them through it). They hold no face.
    for height, width in [(1, 1), (6, 10), (4000, 9), (9, 4000), (31, 31)]:
        tiny = np.full((height, width, 3), 128, dtype=np.uint8)
        [doc] = infer_pixels(client, tiny)
        assert doc["faces"] == [] and doc["image"] == {"width": width, "height": height}, doc
    [doc] = infer_pixels(client, pixels)
    assert_person(doc, "obama", engine)


# ---- the ONNX engine's model files ------------------------------------------------------------

# Explicit model control: the server starts with no model loaded, so a load that fails is an
# answer to POST /v2/repository/models/face/load, not a server that exits at start-up.
EXPLICIT = ("--model-control-mode=explicit",)


def load_error(server: TritonServer) -> str:
    """Why `face` fails to load, as the server reports it: the error answering its load
    request, which must match the state and reason of the repository index."""
    with server:
        client = server.http()
        with pytest.raises(InferenceServerException) as info:
            client.load_model("face")
        error = info.value.message() or str(info.value)
        assert not client.is_model_ready("face")
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["face"].get("state") == "UNAVAILABLE", index["face"]
        reason = index["face"].get("reason", "")
        assert reason and reason in error, f"index reason {reason!r} vs load error {error!r}"
    assert "TRITONBACKEND_ModelInitialize" in error, f"not the backend's refusal: {error}"
    return error


@pytest.mark.engines("onnx")
def test_onnx_without_landmark_model_fails_to_load(suite_env, tmp_path, engine):
    """The UltraFace detector gives no landmarks: without `landmark_model` faces cannot be
    aligned, so the load fails naming the parameter."""
    sample = suite_env.config_of(ONNX_SAMPLE_MODEL).read_text()
    assert "landmark_model" in parameters_of(sample)
    no_landmarks = (r'[^\n]*"landmark_model"[^\n]*\n', "")
    server = TritonServer(suite_env, tmp_path, engine="onnx", config_edits=[no_landmarks],
                          extra_args=EXPLICIT)
    error = load_error(server)
    assert "landmark_model" in error, error


@pytest.mark.engines("onnx")
@pytest.mark.parametrize("problem", ["missing", "not_onnx"])
def test_onnx_bad_model_file_fails_to_load(suite_env, tmp_path, photos, engine, problem):
    """A missing embedder file, or a file that is not ONNX (a JPEG), fails the load with a
    message naming the parameter and the file."""
    name = "absent.onnx" if problem == "missing" else "not_a_model.onnx"
    server = TritonServer(suite_env, tmp_path, engine="onnx", params={"embedder_model": name},
                          extra_args=EXPLICIT)
    if problem == "not_onnx":
        (server.model_dir / "1" / name).write_bytes(photos.bytes("obama.jpg"))
    error = load_error(server)
    assert "embedder_model" in error and name in error, error
    if problem == "missing":
        assert "not found" in error, error
    else:
        assert "not a loadable ONNX model" in error, error

