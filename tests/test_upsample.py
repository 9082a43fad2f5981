"""The dlib detector's `upsample` parameter: five people whose faces are ~45 px wide (the group
photo scaled to 480 px) are found only once the image is doubled before detection; boxes come
back in the original image's coordinates."""

from __future__ import annotations

import pytest

from face_client import assert_geometry, infer_encoded
from test_config import EXPLICIT, load_error
from triton_server import TritonServer

GROUP = "group5_480.jpg"
pytestmark = pytest.mark.engines("dlib")


@pytest.fixture(scope="module")
def upsampled(start_module_server):
    return start_module_server(params={"upsample": "1"})


def faces(server, photos) -> list[dict]:
    [doc] = infer_encoded(server.http(), [photos.bytes(GROUP)])
    assert_geometry(doc)
    return doc["faces"]


def test_upsampling_finds_the_small_faces(server, upsampled, photos):
    plain, doubled = faces(server, photos), faces(upsampled, photos)
    assert len(doubled) >= 5, f"upsample 1 found {len(doubled)} faces in {GROUP}"
    assert len(plain) < len(doubled), f"upsample 0 found {len(plain)}, upsample 1 {len(doubled)}"
    width, height = photos.size(GROUP)
    for face in doubled:
        box = face["box"]
        assert 0 <= box["left"] < box["right"] <= width + 2, box
        assert 0 <= box["top"] < box["bottom"] <= height + 2, box
        assert 20 <= box["right"] - box["left"] <= 120, f"not a small face in the original: {box}"


def test_upsampling_keeps_the_big_faces(upsampled, photos, engine):
    """A portrait is still recognized, with the same person, when upsampled."""
    [doc] = infer_encoded(upsampled.http(), [photos.bytes("obama2.jpg")])
    assert [f["name"] for f in doc["faces"]] == ["obama"]


@pytest.mark.parametrize("value", ["4", "-1", "one"])
def test_bad_upsample_fails_the_load(suite_env, tmp_path, engine, value):
    server = TritonServer(suite_env, tmp_path, params={"upsample": value}, extra_args=EXPLICIT)
    error = load_error(server)
    assert "upsample" in error, error
