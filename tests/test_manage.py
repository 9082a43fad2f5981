"""Managing the gallery through the real server: LIST, FORGET, the request parameter
match_threshold, the SQLite store surviving kill -9 after FORGET, and the one-time import of an
old gallery/enrolled.json. Every test runs against every engine unless marked."""

from __future__ import annotations

import json
import time

import pytest

from face_client import (
    INVALID_ARGUMENT, SEQUENCE_MODEL, assert_person, encoded_tensors, expect_error, expect_invalid,
    forget, forget_tensors, infer, infer_encoded, infer_pixels, list_people, list_tensors, names, people,
    sequence_infer,
)
from gallery_store import removals, stored_names


def _who(client, photos, photo: str, **options) -> list[str]:
    [doc] = infer(client, encoded_tensors([photos.bytes(photo)]), **options)
    return names(doc)


def test_list_and_forget(start_server, photos, engine):
    server = start_server(gallery={"biden.jpg": photos.path("biden.jpg")})
    client, grpc = server.http(), server.grpc()
    assert people(list_people(client)) == [("biden", 1, "folder")]
    for photo in ("obama.jpg", "obama3.jpg"):
        [ack] = infer_encoded(client, [photos.bytes(photo)], enroll="obama")
        assert ack["enrolled"]["added"] is True, ack
    listing = list_people(grpc)
    assert people(listing) == [("biden", 1, "folder"), ("obama", 2, "enrolled")]
    assert listing["gallery_size"] == 3
    assert _who(client, photos, "obama2.jpg") == ["obama"]

    [gone, nobody] = forget(client, ["obama", "nobody"])
    assert gone["forgotten"] == {"name": "obama", "removed": 2, "gallery_size": 1,
                                 "folder_files": []}
    assert nobody["forgotten"]["removed"] == 0, "an unknown name removes nothing"
    assert _who(client, photos, "obama2.jpg") == ["unknown"], "a forgotten person still matched"
    assert stored_names(server.gallery_dir) == []
    assert removals(server.gallery_dir) == [("obama", 2)], "one removal logged, none for nobody"
    assert people(list_people(client)) == [("biden", 1, "folder")]
    assert _who(client, photos, "biden.jpg") == ["biden"]


def test_forget_of_a_folder_name_names_its_files(start_server, photos):
    server = start_server(gallery={"joe/portrait.jpg": photos.path("biden.jpg")})
    client = server.http()
    for c in (client, server.grpc()):
        expect_invalid(lambda: forget(c, "joe"), "joe/portrait.jpg")
    # All or nothing: with a folder-only name in it, the request forgets nobody.
    [ack] = infer_encoded(client, [photos.bytes("obama.jpg")], enroll="obama")
    expect_invalid(lambda: forget(client, ["obama", "joe"]), "joe/portrait.jpg")
    assert people(list_people(client)) == [("joe", 1, "folder"), ("obama", 1, "enrolled")]
    # Enrolled as well as in the folder: the enrolled face goes, the file is named as kept.
    # (a smaller copy of the folder's photo: the same photo would be a duplicate, not added)
    [ack] = infer_pixels(client, photos.rgb("biden.jpg", 0.6), enroll="joe")
    assert ack["enrolled"]["added"] is True, ack
    [doc] = forget(client, "joe")
    assert doc["forgotten"]["removed"] == 1, doc
    assert doc["forgotten"]["folder_files"] == ["joe/portrait.jpg"], doc
    assert _who(client, photos, "biden.jpg") == ["joe"], "the folder image still knows joe"


def test_management_requests_go_alone(start_server, photos, engine):
    server = start_server(gallery={})
    client = server.http()
    image = encoded_tensors([photos.bytes("obama.jpg")])
    expect_invalid(lambda: infer(client, {**image, **forget_tensors("obama")}), "alone")
    expect_invalid(lambda: infer(client, {**image, **list_tensors()}), "alone")
    expect_invalid(lambda: infer(client, {**forget_tensors("a"), **list_tensors()}), "not both")
    expect_invalid(lambda: forget(client, "unknown"), "reserved")
    expect_invalid(lambda: forget(client, "../etc"), "FORGET")
    # LIST false is no LIST: an image is needed then, and with one it is a plain request.
    expect_invalid(lambda: infer(client, list_tensors(False)), "no image")
    [doc] = infer(client, {**image, **list_tensors(False)})
    assert_person(doc, "unknown", engine)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_match_threshold_per_request(server, photos, engine, protocol):
    client = getattr(server, protocol)()
    [doc] = infer_encoded(client, [photos.bytes("obama2.jpg")])
    face = assert_person(doc, "obama", engine)
    distance = face["distance"]
    strict = {"match_threshold": distance / 2}
    [doc] = infer(client, encoded_tensors([photos.bytes("obama2.jpg")]), parameters=strict)
    assert_person(doc, "unknown", engine.with_threshold(distance / 2))
    assert doc["faces"][0]["distance"] == pytest.approx(distance, abs=1e-4)
    # An integer is a number too.
    assert _who(client, photos, "obama2.jpg", parameters={"match_threshold": 3}) == ["obama"]
    for bad in (0, -0.5, "0.5", True):
        expect_invalid(
            lambda: infer(client, encoded_tensors([photos.bytes("obama2.jpg")]),
                          parameters={"match_threshold": bad}),
            "match_threshold",
        )
    assert _who(client, photos, "obama2.jpg") == ["obama"], "the model's threshold changed"


def test_forget_survives_sigkill(start_server, photos):
    server = start_server(gallery={})
    client = server.http()
    [ack] = infer_encoded(client, [photos.bytes("obama.jpg")], enroll="obama")
    assert ack["enrolled"]["added"] is True
    server.kill()  # right after the acknowledgment
    server.start()
    client = server.http()
    assert _who(client, photos, "obama2.jpg") == ["obama"], "acknowledged ENROLL lost on kill -9"
    [doc] = forget(client, "obama")
    assert doc["forgotten"]["removed"] == 1
    server.kill()
    server.start()
    client = server.http()
    assert _who(client, photos, "obama2.jpg") == ["unknown"], "acknowledged FORGET lost on kill -9"
    assert people(list_people(client)) == []


def test_an_old_enrolled_json_is_migrated_once(start_server, photos, engine):
    """A gallery of the previous release (enrolled.json, no gallery.sqlite3) is imported at the
    first load, then erased (its rows are in the store), and not imported again at the next."""
    server = start_server(gallery={}, params={"return_embeddings": "true"})
    [doc] = infer_encoded(server.http(), [photos.bytes("obama.jpg")])
    embedding = doc["faces"][0]["embedding"]
    server.stop()
    for leftover in server.gallery_dir.glob("gallery.sqlite3*"):
        leftover.unlink()
    old = {"version": 1, "engine": engine.kind, "metric": engine.metric, "dim": len(embedding),
           "entries": [{"name": "obama", "embedding": embedding}]}
    (server.gallery_dir / "enrolled.json").write_text(json.dumps(old))
    server.start()
    client = server.http()
    assert _who(client, photos, "obama2.jpg") == ["obama"], "the old enrollment was not imported"
    assert sorted(server.gallery_dir.glob("enrolled.json*")) == []
    assert "imported 1 enrolled faces" in server.log_text()
    assert "1 such file(s) erased" in server.log_text()
    server.restart()
    listing = list_people(server.http())
    assert people(listing) == [("obama", 1, "enrolled")], "imported twice"
    assert stored_names(server.gallery_dir) == ["obama"]


@pytest.mark.engines("onnx")
def test_an_embedder_change_ignores_old_rows_with_one_warning(start_server, photos):
    """Rows made with other model files stay in the store but never match; the log says how
    many, once. FORGET removes them too."""
    server = start_server(gallery={})
    for photo, name in (("obama.jpg", "obama"), ("biden.jpg", "biden")):
        infer_encoded(server.http(), [photos.bytes(photo)], enroll=name)
    server.stop()
    # Another embedder: the same one with one unknown protobuf field (number 1000) appended,
    # which the runtimes ignore but the model-file hash does not.
    model = server.model_dir / "1" / "fr_feature.onnx"
    changed = model.read_bytes() + bytes([0xC0, 0x3E, 0x01])
    model.unlink()  # a link to the suite's copy
    model.write_bytes(changed)
    server.start()
    warnings = [line for line in server.log_text().splitlines()
                if "made by another embedder" in line]
    assert len(warnings) == 1 and "2 enrolled faces" in warnings[0], warnings
    client = server.http()
    assert _who(client, photos, "obama2.jpg") == ["unknown"]
    assert people(list_people(client)) == []
    assert stored_names(server.gallery_dir) == ["obama", "biden"], "old rows were dropped"
    # A forgotten person is forgotten by every embedder: the old model's row goes too.
    [gone] = forget(client, "obama")
    assert gone["forgotten"]["removed"] == 1, gone
    assert stored_names(server.gallery_dir) == ["biden"]


@pytest.mark.engines("dlib")
def test_sequence_model_lists_and_forgets_within_a_sequence(start_server, photos):
    server = start_server(model=SEQUENCE_MODEL, gallery={})
    client = server.http()
    frame = encoded_tensors([photos.bytes("obama.jpg")], enroll="obama")
    sequence_infer(client, 21, frame, start=True)
    listing = sequence_infer(client, 21, list_tensors())
    assert people(listing) == [("obama", 1, "enrolled")]
    assert listing["sequence"] == {"correlation_id": 21, "frame": None}
    done = sequence_infer(client, 21, forget_tensors("obama"), end=True)
    assert done["forgotten"]["removed"] == 1
    assert done["summary"]["frames"] == 1, done
    one_shot = sequence_infer(client, 22, list_tensors(), start=True, end=True)
    assert one_shot["people"] == [] and one_shot["gallery_size"] == 0
    expect_error(lambda: sequence_infer(client, 23, list_tensors()), INVALID_ARGUMENT,
                 "sequence 23")


def _until(check, what: str, seconds: float = 5.0):
    """`check()` once it is truthy (polled), else a failure naming `what`."""
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.05)
    return found


@pytest.mark.engines("onnx")
def test_models_on_one_folder_follow_each_other(start_server, photos, tmp_path):
    """`face`, its copy `still2` and the sequence model on one SQLite folder: an ENROLL or a
    FORGET through any of them is seen by the others within gallery_poll_ms (200 ms here), a
    running camera sequence included; the three share one embedder's saved index, which each
    load then uses (no save tore another's)."""
    shared = tmp_path / "shared"
    server = start_server(
        gallery={}, params={"gallery_dir": str(shared), "gallery_poll_ms": "200"},
        more_models=(SEQUENCE_MODEL,), copies={"still2": []},
    )
    client = server.http()
    frame = encoded_tensors([photos.bytes("obama2.jpg")])
    camera = lambda start=False, end=False: sequence_infer(client, 91, frame, start, end)  # noqa: E731
    assert names(camera(start=True)) == ["unknown"]
    [ack] = infer_encoded(client, [photos.bytes("obama.jpg")], enroll="obama")
    assert ack["enrolled"]["added"] is True, ack
    _until(lambda: _who(client, photos, "obama2.jpg", model="still2") == ["obama"],
           "still2 names the person enrolled through face")
    _until(lambda: names(camera()) == ["obama"], "the camera names the person enrolled")

    [gone] = forget(client, "obama", model="still2")
    assert gone["forgotten"]["removed"] == 1, gone
    _until(lambda: _who(client, photos, "obama2.jpg") == ["unknown"],
           "face stops naming the person forgotten through still2")
    _until(lambda: names(camera()) == ["unknown"], "the camera stops naming them")
    summary = camera(end=True)["summary"]
    assert "obama" not in json.dumps(summary), summary

    [ack] = infer(client, encoded_tensors([photos.bytes("obama3.jpg")], enroll="barack"), "still2")
    assert ack["enrolled"]["added"] is True, ack
    _until(lambda: _who(client, photos, "obama2.jpg") == ["barack"],
           "face names the person enrolled through still2")
    server.stop()
    server.start()
    log = server.log_text()
    assert log.count("gallery index loaded from its file") == 3, log
    assert "saved gallery index not used" not in log, log
    assert _who(server.http(), photos, "obama2.jpg", model="still2") == ["barack"]
