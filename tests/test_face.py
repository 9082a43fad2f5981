"""Recognition with the default config and the gallery {obama.jpg, biden.jpg}: single photos over
HTTP and gRPC, encoded and raw, batches, concurrent ragged requests, model metadata. Every test
runs against both engines (test_x[dlib], test_x[onnx]; see tests/engines.py)."""

from __future__ import annotations

import pytest

from face_client import (
    MODEL, assert_geometry, assert_person, collect, encoded_tensors, infer_encoded, infer_pixels,
    model_counts, names, pixel_tensors, submit,
)

# Photos of known people that are NOT the gallery photos themselves.
PEOPLE = [("obama2.jpg", "obama"), ("obama3.jpg", "obama"), ("biden.jpg", "biden")]


def _box(face: dict) -> tuple[int, int, int, int]:
    box = face["box"]
    return box["left"], box["top"], box["right"], box["bottom"]


@pytest.mark.parametrize("photo,person", PEOPLE)
def test_recognizes_encoded_and_raw_photo(client, photos, engine, photo, person):
    size = photos.size(photo)
    [encoded] = infer_encoded(client, [photos.bytes(photo)])
    [raw] = infer_pixels(client, photos.rgb(photo))
    by_encoded = assert_person(encoded, person, engine, size)
    by_pixels = assert_person(raw, person, engine, size)
    # The backend's decoder and Pillow decode the same JPEG to (almost) the same pixels.
    width = size[0]
    assert all(abs(a - b) <= 0.02 * width for a, b in zip(_box(by_encoded), _box(by_pixels))), (
        f"ENCODED box {by_encoded['box']} vs IMAGE box {by_pixels['box']}"
    )
    assert abs(by_encoded["distance"] - by_pixels["distance"]) < 0.03
    assert "embedding" not in by_encoded, "embeddings returned although return_embeddings=false"


def test_gallery_photo_matches_itself(http, photos, engine):
    [doc] = infer_encoded(http, [photos.bytes("biden.jpg")])
    face = assert_person(doc, "biden", engine)
    assert face["distance"] < 0.05, f"the gallery photo itself is at distance {face['distance']}"


def test_no_face(http, photos):
    size = photos.size("noface.jpg")
    for doc in infer_encoded(http, [photos.bytes("noface.jpg")]) + infer_pixels(
        http, photos.rgb("noface.jpg")
    ):
        assert doc["faces"] == []
        assert (doc["image"]["width"], doc["image"]["height"]) == size


@pytest.mark.parametrize("photo", ["32bit.png", "obama2.webp", "obama2.bmp"])
def test_encoded_formats(http, photos, engine, photo):
    """An RGBA PNG, a WebP and a BMP are decoded like the JPEG."""
    [doc] = infer_encoded(http, [photos.bytes(photo)])
    assert_person(doc, "obama", engine, photos.size(photo))


def test_grayscale_jpeg_is_accepted(http, photos):
    [doc] = infer_encoded(http, [photos.bytes("obama2_gray.jpg")])
    assert len(doc["faces"]) == 1, doc["faces"]
    assert_geometry(doc)


def test_batch_of_raw_images_in_one_request(http, photos, engine):
    image = photos.rgb("obama2.jpg")
    docs = infer_pixels(http, [image, image])
    assert len(docs) == 2
    for doc in docs:
        assert_person(doc, "obama", engine, photos.size("obama2.jpg"))
    assert docs[0] == docs[1], "the same image twice in one batch gave different answers"


def test_batch_of_encoded_images_keeps_order(client, photos):
    batch = ["obama2.jpg", "noface.jpg", "biden.jpg"]
    docs = infer_encoded(client, [photos.bytes(p) for p in batch])
    assert [names(doc) for doc in docs] == [["obama"], [], ["biden"]]
    assert [(d["image"]["width"], d["image"]["height"]) for d in docs] == [
        photos.size(p) for p in batch
    ]


# (photo, scale, expected person, input): different sizes, so IMAGE requests batch raggedly.
RAGGED = [
    ("obama2.jpg", 1.0, "obama", "IMAGE"),
    ("biden.jpg", 0.5, "biden", "IMAGE"),
    ("obama.jpg", 0.7, "obama", "IMAGE"),
    ("obama3.jpg", 0.5, "obama", "IMAGE"),
    ("obama_640x480.jpg", 1.0, "obama", "IMAGE"),
    ("obama2.jpg", 0.75, "obama", "IMAGE"),
    ("biden.jpg", 0.4, "biden", "IMAGE"),
    ("obama2.jpg", 1.0, "obama", "ENCODED"),
    ("obama_640x480.jpg", 1.0, "obama", "ENCODED"),
]


def ragged_request(photos, photo: str, scale: float, kind: str):
    """(tensors, expected (width, height)) for one RAGGED case."""
    if kind == "ENCODED":
        return encoded_tensors([photos.bytes(photo)]), photos.size(photo)
    pixels = photos.rgb(photo, scale)
    return pixel_tensors(pixels), (pixels.shape[1], pixels.shape[0])


def test_concurrent_ragged_requests(http, photos, engine):
    cases = RAGGED * 2
    requests = [ragged_request(photos, photo, scale, kind) for photo, scale, _, kind in cases]
    inferences_before, executions_before = model_counts(http)
    # Two slow requests first keep both instances busy, so the others queue and the batcher
    # has something to group: each is a full batch of a 1920 px photo with five faces, eight
    # times the work of one (one photo per blocker was not always enough once the engines got
    # fast: the instances could take the others one by one as they were submitted).
    group = encoded_tensors([photos.bytes("group5.jpg")] * 8)
    blockers = [submit(http, group) for _ in range(2)]
    pending = [submit(http, tensors) for tensors, _ in requests]
    for handle in blockers:
        docs = collect(handle)
        assert len(docs) == 8 and all(len(doc["faces"]) >= 1 for doc in docs), docs
    for (photo, scale, person, kind), (_, size), handle in zip(cases, requests, pending):
        [doc] = collect(handle)
        assert names(doc) == [person], f"{photo} x{scale} as {kind}: {names(doc)}"
        assert_person(doc, person, engine, size)
    # Triton counts inferences by image, executions by Execute.
    total = len(cases) + sum(len(group["ENCODED"]) for _ in blockers)
    requests = len(cases) + len(blockers)
    inferences, executions = model_counts(http, inferences=inferences_before + total)
    # 20 requests at once on 2 instances: the dynamic batcher must have grouped some of them.
    assert inferences - inferences_before == total
    assert executions - executions_before < requests, "no request was batched with another"


def test_model_metadata(http, engine):
    metadata = http.get_model_metadata(MODEL)
    inputs = {tensor["name"]: tensor for tensor in metadata["inputs"]}
    assert set(inputs) == {"IMAGE", "ENCODED", "ENROLL", "FORGET", "LIST", "EMBEDDING",
                           "REFERENCE"}
    assert (inputs["IMAGE"]["datatype"], inputs["IMAGE"]["shape"]) == ("UINT8", [-1, -1, -1, 3])
    for name in ("ENCODED", "ENROLL", "FORGET"):
        assert (inputs[name]["datatype"], inputs[name]["shape"]) == ("BYTES", [-1, 1])
    assert (inputs["LIST"]["datatype"], inputs["LIST"]["shape"]) == ("BOOL", [-1, 1])
    for name in ("EMBEDDING", "REFERENCE"):
        assert (inputs[name]["datatype"], inputs[name]["shape"]) == ("FP32", [-1, -1])
    assert [(t["name"], t["datatype"], t["shape"]) for t in metadata["outputs"]] == [
        ("RESULT", "BYTES", [-1, 1])
    ]
    config = http.get_model_config(MODEL)
    assert config["max_batch_size"] == 8
    assert config["backend"] == "face"
    # The server under test really runs the engine the test is parametrised with.
    assert config["parameters"]["engine"]["string_value"] == engine.kind, config["parameters"]
