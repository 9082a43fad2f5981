"""The limits max_image_pixels, max_faces_per_image and max_gallery_size fail only the request
that exceeds them: the first two are the request's doing (INVALID_ARG), a full gallery is the
server's capacity (UNAVAILABLE). One server per engine, empty gallery, small limits."""

from __future__ import annotations

import pytest

from face_client import (
    UNAVAILABLE, assert_serving, expect_error, expect_invalid, infer_encoded, infer_pixels, names,
)

LIMITS = {
    # obama2.jpg (626x1200 = 751,200 px) fits, obama.jpg (910x1137 = 1,034,670 px) does not.
    "max_image_pixels": "1000000",
    "max_faces_per_image": "1",
    "max_gallery_size": "1",
}


@pytest.fixture(scope="module")
def server(start_module_server):
    return start_module_server(params=LIMITS, gallery={})


@pytest.mark.parametrize("photo", ["obama.jpg", "obama3.jpg"])
def test_image_over_pixel_limit(http, photos, probe, photo):
    expect_invalid(lambda: infer_encoded(http, [photos.bytes(photo)]), "max_image_pixels")
    expect_invalid(lambda: infer_pixels(http, photos.rgb(photo)), "max_image_pixels")
    assert_serving(http, probe)


def test_image_under_pixel_limit(http, photos):
    [doc] = infer_encoded(http, [photos.bytes("obama2.jpg")])
    assert (doc["image"]["width"], doc["image"]["height"]) == photos.size("obama2.jpg")
    assert len(doc["faces"]) == 1, doc["faces"]


def test_too_many_faces(http, photos, probe):
    expect_invalid(lambda: infer_encoded(http, [photos.bytes("two_faces.jpg")]), "faces")
    assert_serving(http, probe)


def test_gallery_size_limit(http, photos):
    [first] = infer_encoded(http, [photos.bytes("obama2.jpg")], enroll="obama")
    assert first["enrolled"] == {"name": "obama", "gallery_size": 1, "added": True}
    expect_error(
        lambda: infer_pixels(http, photos.rgb("biden.jpg", 0.45), enroll="biden"),
        UNAVAILABLE, "max_gallery_size",
    )
    [obama] = infer_encoded(http, [photos.bytes("obama_640x480.jpg")])
    assert names(obama) == ["obama"], "the first enrollment was lost"
    [biden] = infer_pixels(http, photos.rgb("biden.jpg", 0.45))
    assert names(biden) == ["unknown"], "the enrollment over the limit was stored"
