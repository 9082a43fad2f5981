"""dlib fails closed (dlib only): with `detector: cnn` and `cnn_min_side: 0` (no size fast path)
the inputs on which dlib's MMOD network threw a C++ exception (1x1, 10x6: a second one aborted the
process) or wrote out of bounds (9 px wide: SIGSEGV at 9x4000, silent heap corruption when
shorter) each get an error response for that request alone, the rest get `faces: []`, and the
server goes on serving, also when such requests share dynamic batches with good ones (as ENCODED
PNGs: IMAGE tensors of different shapes are never batched together)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from PIL import Image

from face_client import (
    assert_person, assert_serving, collect, encoded_tensors, expect_invalid, infer_pixels, submit,
)

pytestmark = pytest.mark.engines("dlib")

# (width, height): refused by the shim before dlib sees them (src/engine/dlib/shim.cpp).
REFUSED = [(1, 1), (10, 6), (9, 4000), (9, 40), (1, 3000), (3000, 1), (64, 5), (2, 2)]
# The smallest sizes dlib takes, next to refused ones: they must run and find nothing.
ACCEPTED = [(10, 7), (4000, 9), (11, 300), (31, 31)]


@pytest.fixture(scope="module")
def fence_server(start_module_server, photos):
    gallery = {"obama.jpg": photos.path("obama_half.jpg")}
    return start_module_server(params={"detector": "cnn", "cnn_min_side": "0"}, gallery=gallery)


@pytest.fixture(scope="module")
def fence(fence_server):
    return fence_server.http()


def _grey(width: int, height: int) -> np.ndarray:
    return np.full((height, width, 3), 128, dtype=np.uint8)


@pytest.mark.parametrize("width,height", REFUSED, ids=[f"{w}x{h}" for w, h in REFUSED])
def test_input_dlib_cannot_take_is_an_error(fence, probe, width, height):
    expect_invalid(lambda: infer_pixels(fence, _grey(width, height)), f"{width}x{height}")
    assert_serving(fence, probe)


@pytest.mark.parametrize("width,height", ACCEPTED, ids=[f"{w}x{h}" for w, h in ACCEPTED])
def test_small_input_dlib_can_take_has_no_face(fence, probe, width, height):
    [doc] = infer_pixels(fence, _grey(width, height))
    assert doc["faces"] == [] and doc["image"] == {"width": width, "height": height}, doc
    assert_serving(fence, probe)


def test_all_refused_inputs_in_a_row_then_a_photo(fence, photos, probe, engine):
    """dlib aborts the process on its second fatal_error: many in a row must not."""
    for _ in range(2):
        for width, height in REFUSED:
            expect_invalid(lambda: infer_pixels(fence, _grey(width, height)), "CNN")
    [doc] = infer_pixels(fence, photos.rgb("obama2.jpg", 0.5))
    assert_person(doc, "obama", engine)
    assert_serving(fence, probe)


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(_grey(width, height)).save(out, format="PNG")
    return out.getvalue()


def test_refused_and_good_requests_in_the_same_batches(fence, photos, probe, engine):
    good = encoded_tensors([probe])
    mixed = [("good", good)]
    for width, height in REFUSED:  # good, bad, good, bad, ...
        mixed += [("bad", encoded_tensors([_png(width, height)])), ("good", good)]
    pending = [submit(fence, tensors) for _, tensors in mixed]
    for (kind, _), handle in zip(mixed, pending):
        if kind == "good":
            [doc] = collect(handle)
            assert_person(doc, "obama", engine)
        else:
            expect_invalid(lambda: collect(handle), "CNN")
    assert_serving(fence, probe)
