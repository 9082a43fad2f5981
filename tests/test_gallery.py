"""The gallery: loading it from the model directory, enrolling through ENROLL, and the store
(gallery/gallery.sqlite3) surviving a clean restart, a SIGKILL and concurrent enrollments. Every
test runs against both engines."""

from __future__ import annotations

from face_client import (
    assert_person, assert_serving, collect, expect_invalid, infer_encoded, infer_pixels, names,
    pixel_tensors, submit,
)
from gallery_store import stored_names


def _gallery(photos, **files: str) -> dict:
    """Gallery layout {file name in the gallery dir: photo}; "__" in a keyword stands for "/"."""
    return {name.replace("__", "/") + ".jpg": photos.path(photo) for name, photo in files.items()}


def _assert_stored(server, name: str) -> None:
    """The gallery store exists and holds a row named `name`."""
    stored = stored_names(server.gallery_dir)
    assert name in stored, f"the gallery store does not hold {name!r}: {stored}"


def _who(client, photos, photo: str) -> list[str]:
    [doc] = infer_encoded(client, [photos.bytes(photo)])
    return names(doc)


def test_enroll_then_recognize(start_server, photos, engine):
    client = start_server(gallery=_gallery(photos, biden="biden.jpg")).http()
    [before] = infer_encoded(client, [photos.bytes("obama2.jpg")])
    stranger = assert_person(before, "unknown", engine)
    assert stranger["distance"] is not None and stranger["distance"] >= engine.match_threshold, (
        stranger
    )

    [ack] = infer_encoded(client, [photos.bytes("obama.jpg")], enroll="obama")
    assert ack["enrolled"] == {"name": "obama", "gallery_size": 2, "added": True}
    assert len(ack["faces"]) == 1
    for photo in ("obama2.jpg", "obama3.jpg"):
        [doc] = infer_encoded(client, [photos.bytes(photo)])
        assert_person(doc, "obama", engine, photos.size(photo))
    assert _who(client, photos, "biden.jpg") == ["biden"]

    [again] = infer_encoded(client, [photos.bytes("obama.jpg")], enroll="obama")
    assert again["enrolled"] == {"name": "obama", "gallery_size": 2, "added": False}


def test_enrollment_survives_restart(start_server, photos, engine):
    server = start_server(gallery={})
    client = server.http()
    [before] = infer_encoded(client, [photos.bytes("obama2.jpg")])
    assert_person(before, "unknown", engine)
    assert before["faces"][0]["distance"] is None, "empty gallery: distance must be null"

    pixels = photos.rgb("obama.jpg")
    [ack] = infer_pixels(client, pixels, enroll="obama")  # enrollment from raw pixels
    assert ack["enrolled"] == {"name": "obama", "gallery_size": 1, "added": True}
    server.restart()
    client = server.http()
    assert _who(client, photos, "obama2.jpg") == ["obama"], "enrollment lost over a restart"
    _assert_stored(server, "obama")
    [again] = infer_pixels(client, pixels, enroll="obama")
    assert again["enrolled"] == {"name": "obama", "gallery_size": 1, "added": False}


def test_enrollment_survives_sigkill(start_server, photos):
    server = start_server(gallery=_gallery(photos, biden="biden.jpg"))
    [ack] = infer_encoded(server.http(), [photos.bytes("obama.jpg")], enroll="obama")
    assert ack["enrolled"]["added"] is True
    server.kill()  # right after the acknowledgment, no clean shutdown
    _assert_stored(server, "obama")
    server.start()
    client = server.http()
    assert _who(client, photos, "obama2.jpg") == ["obama"], "acknowledged enrollment lost on SIGKILL"
    assert _who(client, photos, "biden.jpg") == ["biden"]


def test_concurrent_enrollments_are_all_stored(start_server, photos):
    """Six enrollments in flight at once on two instances; none is lost in the store."""
    server = start_server(gallery={})
    people = {
        f"person{i}": photos.rgb(photo, scale)
        for i, (photo, scale) in enumerate(
            [("obama2.jpg", 1.0), ("biden.jpg", 0.5), ("obama.jpg", 0.7),
             ("obama3.jpg", 0.5), ("obama_640x480.jpg", 1.0), ("obama2.jpg", 0.6)]
        )
    }

    def enroll_all(client) -> dict[str, dict]:
        pending = {name: submit(client, pixel_tensors(px, [name])) for name, px in people.items()}
        return {name: collect(handle)[0]["enrolled"] for name, handle in pending.items()}

    first = enroll_all(server.http())
    assert all(ack["added"] for ack in first.values()), first
    assert max(ack["gallery_size"] for ack in first.values()) == len(people), first
    server.restart()
    second = enroll_all(server.http())  # the same faces again: all already stored
    assert not any(ack["added"] for ack in second.values()), second
    assert {ack["gallery_size"] for ack in second.values()} == {len(people)}, second


def test_gallery_load_skips_unusable_images(start_server, photos):
    server = start_server(
        gallery=_gallery(
            photos, obama="obama.jpg", joe__portrait="biden.jpg",
            nobody="noface.jpg", group="two_faces.jpg",
        )
    )
    warnings = [line for line in server.log_text().splitlines() if line.startswith("W")]
    for skipped in ("nobody.jpg", "group.jpg"):
        assert any(skipped in line for line in warnings), (
            f"no warning names {skipped}; warnings:\n" + "\n".join(warnings)
        )
    client = server.http()
    assert _who(client, photos, "obama2.jpg") == ["obama"]
    assert _who(client, photos, "biden.jpg") == ["joe"], "joe/portrait.jpg must be person 'joe'"


def test_reserved_names_are_refused(start_server, photos, probe, engine):
    server = start_server(gallery={})
    client = server.http()
    for word in ("unknown", "Unknown", "null"):
        expect_invalid(lambda: infer_encoded(client, [photos.bytes("obama.jpg")], enroll=word),
                       "reserved")
    [doc] = infer_encoded(client, [photos.bytes("obama2.jpg")])
    assert_person(doc, "unknown", engine)
    assert doc["faces"][0]["distance"] is None, "a refused name was stored"
    assert stored_names(server.gallery_dir) == [], "a refused name reached the store"
    assert_serving(client, probe)


def test_a_request_with_a_faceless_image_enrolls_nothing(start_server, photos, engine):
    """Two ENROLLs in one request, the second image without a face: the request fails and the
    first name is not stored either (one store write per batch, all or nothing per request)."""
    server = start_server(gallery={})
    client = server.http()
    expect_invalid(
        lambda: infer_encoded(client, [photos.bytes("obama.jpg"), photos.bytes("noface.jpg")],
                              enroll=["obama", "nobody"]),
        "ENROLL[1]", "exactly one face",
    )
    [doc] = infer_encoded(client, [photos.bytes("obama2.jpg")])
    assert_person(doc, "unknown", engine)
    assert doc["faces"][0]["distance"] is None, "the first enrollment of the failed request was stored"
    # The same request without the faceless image goes through.
    [ack] = infer_encoded(client, [photos.bytes("obama.jpg")], enroll=["obama"])
    assert ack["enrolled"]["added"] is True
    _assert_stored(server, "obama")
