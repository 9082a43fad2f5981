"""Bad requests get their own INVALID_ARG error, and the server goes on serving: one at a time,
over gRPC, and mixed with good requests in the same dynamic batches. Against both engines."""

from __future__ import annotations

import numpy as np
import pytest

from face_client import (
    assert_person, assert_serving, bytes_tensor, collect, encoded_tensors, expect_invalid, infer,
    pixel_tensors, submit,
)

SMALL = "obama_640x480.jpg"


def _image(photos, dtype=np.uint8, channels=3):
    """IMAGE [1, H, W, channels] of a small photo, cast or with channels dropped/added."""
    rgb = photos.rgb(SMALL)
    if channels > 3:
        rgb = np.concatenate([rgb, np.full(rgb.shape[:2] + (channels - 3,), 255, np.uint8)], axis=2)
    return {"IMAGE": np.ascontiguousarray(rgb[np.newaxis, :, :, :channels].astype(dtype))}


def _enroll(photo: str, name: str | bytes):
    return lambda photos: encoded_tensors([photos.bytes(photo)], enroll=[name])


# case id -> (photos -> request tensors, words of which the error message must contain one)
BAD_REQUESTS = {
    "image_fp32": (lambda p: _image(p, np.float32), ("IMAGE",)),
    "image_int32": (lambda p: _image(p, np.int32), ("IMAGE",)),
    "image_1_channel": (lambda p: _image(p, channels=1), ("IMAGE",)),
    "image_4_channels": (lambda p: _image(p, channels=4), ("IMAGE",)),
    "image_without_batch_dim": (lambda p: {"IMAGE": p.rgb(SMALL)}, ("IMAGE", "batch")),
    "image_empty": (lambda p: {"IMAGE": np.zeros((1, 0, 0, 3), np.uint8)}, ("IMAGE",)),
    "encoded_garbage": (lambda p: encoded_tensors([b"not an image"]), ("ENCODED",)),
    "encoded_truncated_jpeg": (lambda p: encoded_tensors([p.bytes("obama.jpg")[:100]]), ("ENCODED",)),
    "encoded_empty": (lambda p: encoded_tensors([b""]), ("ENCODED",)),
    "encoded_as_uint8": (
        lambda p: {"ENCODED": np.frombuffer(p.bytes(SMALL), np.uint8)[np.newaxis]},
        ("ENCODED",),
    ),
    "image_and_encoded": (
        lambda p: {**_image(p), **encoded_tensors([p.bytes(SMALL)])},
        ("IMAGE", "ENCODED"),
    ),
    "only_enroll": (lambda p: {"ENROLL": bytes_tensor(["alice"])}, ("IMAGE", "ENCODED")),
    "batch_over_max_batch_size": (lambda p: encoded_tensors([p.bytes(SMALL)] * 9), ("batch",)),
    "enroll_batch_mismatch": (
        lambda p: {**encoded_tensors([p.bytes(SMALL)] * 2), "ENROLL": bytes_tensor(["alice"])},
        ("ENROLL", "batch"),
    ),
    "enroll_two_faces": (_enroll("two_faces.jpg", "alice"), ("face",)),
    "enroll_no_face": (_enroll("noface.jpg", "alice"), ("face",)),
    "enroll_name_path": (_enroll(SMALL, "../etc"), ("ENROLL", "name")),
    "enroll_name_empty": (_enroll(SMALL, ""), ("ENROLL", "name")),
    "enroll_name_200_chars": (_enroll(SMALL, "a" * 200), ("ENROLL", "name")),
    "enroll_name_leading_dot": (_enroll(SMALL, ".alice"), ("ENROLL", "name")),
    "enroll_name_slash": (_enroll(SMALL, "al/ice"), ("ENROLL", "name")),
    "enroll_name_not_utf8": (_enroll(SMALL, b"\xff\xfe"), ("ENROLL", "name")),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_request_is_rejected(http, photos, probe, case):
    make, needles = BAD_REQUESTS[case]
    tensors = make(photos)
    expect_invalid(lambda: infer(http, tensors), *needles)
    assert_serving(http, probe)


@pytest.mark.parametrize("case", ["image_fp32", "encoded_garbage", "enroll_name_path"])
def test_bad_request_over_grpc(grpc, photos, probe, case):
    make, needles = BAD_REQUESTS[case]
    tensors = make(photos)
    error = expect_invalid(lambda: infer(grpc, tensors), *needles)
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert_serving(grpc, probe)


# Good requests (photo, scale or None for ENCODED, person) and bad ones, sent all at once.
GOOD = [
    ("obama2.jpg", 0.6, "obama"),
    ("biden.jpg", None, "biden"),
    ("obama.jpg", 0.6, "obama"),
    ("obama2.jpg", None, "obama"),
    ("biden.jpg", 0.5, "biden"),
    ("obama_640x480.jpg", None, "obama"),
]
BAD = ["encoded_garbage", "image_empty", "encoded_truncated_jpeg"]


def _good_request(photos, photo, scale):
    if scale is None:
        return encoded_tensors([photos.bytes(photo)])
    return pixel_tensors(photos.rgb(photo, scale))


def test_good_and_bad_requests_in_the_same_batches(http, photos, probe, engine):
    good = [(_good_request(photos, photo, scale), person) for photo, scale, person in GOOD]
    bad = [(BAD_REQUESTS[case][0](photos), BAD_REQUESTS[case][1]) for case in BAD]
    # Interleaved: good, good, bad, good, good, bad, ...
    mixed = []
    for index, (tensors, expected) in enumerate(good):
        mixed.append(("good", tensors, expected))
        if index % 2 == 1:
            mixed.append(("bad",) + bad[index // 2])
    pending = [submit(http, tensors) for _, tensors, _ in mixed]
    for (kind, _, expected), handle in zip(mixed, pending):
        if kind == "good":
            [doc] = collect(handle)
            assert_person(doc, expected, engine)
        else:
            expect_invalid(lambda: collect(handle), *expected)
    assert_serving(http, probe)
