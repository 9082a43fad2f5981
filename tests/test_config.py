"""Model parameters other than the defaults: pixel_format, return_embeddings, detector,
match_threshold. Gallery {obama.jpg, biden.jpg} throughout."""

from __future__ import annotations

import numpy as np
import pytest

from face_client import MATCH_THRESHOLD, assert_geometry, assert_person, infer_encoded, infer_pixels


@pytest.fixture(scope="module")
def bgr_server(start_module_server):
    return start_module_server(params={"pixel_format": "BGR", "return_embeddings": "true"})


@pytest.fixture(scope="module")
def bgr(bgr_server):
    return bgr_server.http()


@pytest.mark.parametrize("photo,person", [("obama2.jpg", "obama"), ("biden.jpg", "biden")])
def test_bgr_pixels_are_recognized(bgr, photos, photo, person):
    [raw] = infer_pixels(bgr, photos.bgr(photo))
    [encoded] = infer_encoded(bgr, [photos.bytes(photo)])  # decoding does not depend on pixel_format
    by_pixels = assert_person(raw, person, photos.size(photo))
    by_encoded = assert_person(encoded, person, photos.size(photo))
    # Same pixels reach the embedder both ways, so the distances agree; swapped channels would not.
    assert abs(by_pixels["distance"] - by_encoded["distance"]) < 0.03, (by_pixels, by_encoded)


def test_rgb_pixels_to_bgr_model_still_find_the_face(bgr, photos):
    [doc] = infer_pixels(bgr, photos.rgb("obama2.jpg"))
    assert len(doc["faces"]) == 1  # the name may be wrong: the colours are
    assert_geometry(doc)


def test_embeddings_are_returned(bgr, photos):
    docs = infer_encoded(bgr, [photos.bytes(p) for p in ("obama2.jpg", "obama3.jpg", "biden.jpg")])
    obama2, obama3, biden = (np.array(assert_single(doc)["embedding"]) for doc in docs)
    assert np.linalg.norm(obama2 - obama3) < MATCH_THRESHOLD, "two photos of one person"
    assert np.linalg.norm(obama2 - biden) > MATCH_THRESHOLD, "photos of two people"
    assert np.isfinite(obama2).all() and np.linalg.norm(obama2) > 0


def assert_single(doc: dict) -> dict:
    assert len(doc["faces"]) == 1, doc["faces"]
    return doc["faces"][0]


def test_cnn_detector(start_server, photos):
    # Small images: the CNN detector takes seconds per megapixel on a CPU.
    gallery = {"obama.jpg": photos.path("obama_half.jpg")}
    client = start_server(params={"detector": "cnn"}, gallery=gallery).http()
    pixels = photos.rgb("obama2.jpg", 0.5)
    [doc] = infer_pixels(client, pixels)
    assert_person(doc, "obama", (pixels.shape[1], pixels.shape[0]))


def test_match_threshold(start_server, photos):
    """With a tiny threshold the nearest person is still measured but no longer named."""
    client = start_server(params={"match_threshold": "0.05"}).http()
    [doc] = infer_encoded(client, [photos.bytes("obama2.jpg")])
    face = assert_person(doc, "unknown")
    assert face["distance"] is not None and 0.05 <= face["distance"] < MATCH_THRESHOLD, face
