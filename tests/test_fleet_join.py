"""A server joining a large shared gallery (issue: a gallery of millions at the cost of an empty
one): it must not rebuild the vector index another server already built. Real PostgreSQL 15 and
real tritonservers, each with an empty model folder of its own:

- A loads a gallery of 25,000 people (filled with plain SQL beside one real person), builds its
  index, saves it and publishes it to the database;
- B joins with nothing on its disk: it copies the published index, reads from the store only the
  rows enrolled after it was published, and names people right;
- a damaged published copy is refused (BLAKE3 of its manifest), the joining server C rebuilds
  and publishes a sound one, and D joins from that;
- a FORGET on D: within seconds no part of the published copy holds the person's `i8` vector
  (the form the graph walks; its half bytes are zeroed with it in the same file), and once the
  operator's VACUUM FULL has run no table file holds it in any form.

The ONNX engine only: its 512-d embeddings are the large case."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from face_client import forget, infer_encoded, names
from postgres_server import SUITE_DB
from test_erasure import ERASED_WITHIN_S, VACUUM_FULL, _forms, _found, _windows

pytestmark = pytest.mark.engines("onnx")

DSN_ENV = "FACE_GALLERY_DSN"
GALLERY = "joining"
PARAMS = {"gallery_store": "postgres", "gallery_name": GALLERY}
# Above the exact-scan limit (20,000: a graph is built) and the save-at-load limit (10,000).
PEOPLE = 25_000
DIM = 512
BUILD_TIMEOUT_S = 600.0


def _fill(postgres, people: int) -> None:
    """`people` random unit embeddings as one change of the gallery, by the embedder that
    stored the first enrollment (the model's own), through COPY."""
    [(gallery, embedder)] = postgres.sql(
        "SELECT gallery, embedder FROM triton_face.enrollments LIMIT 1", SUITE_DB)
    [(change,)] = postgres.sql(
        f"UPDATE triton_face.galleries SET last_change = last_change + 1 WHERE id = {gallery} "
        "RETURNING last_change", SUITE_DB)
    rng = np.random.default_rng(24)

    def lines():
        for start in range(0, people, 5_000):
            block = rng.standard_normal((min(5_000, people - start), DIM)).astype("<f4")
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            for i, v in enumerate(block):
                yield f"{gallery}\t{embedder}\tperson {start + i}\t\\\\x{v.tobytes().hex()}\t{change}"

    postgres.copy_in("triton_face.enrollments", "gallery, embedder, name, embedding, change",
                     lines(), SUITE_DB)


def _index_lines(server) -> str:
    return "\n".join(x for x in server.log_text().splitlines() if "gallery index" in x)


def _who(server, photos, photo: str) -> list[str]:
    [doc] = infer_encoded(server.http(), [photos.bytes(photo)])
    return names(doc)


def test_a_joining_server_copies_the_published_index(postgres, start_server, photos):
    def joining(app: str):
        return start_server(params=PARAMS, gallery={},
                            env={DSN_ENV: postgres.dsn(SUITE_DB, app)})

    a = joining("join-a")
    [ack] = infer_encoded(a.http(), [photos.bytes("obama.jpg")], enroll="obama")
    assert ack["enrolled"]["added"] is True
    a.stop()
    _fill(postgres, PEOPLE)
    a.start(timeout=BUILD_TIMEOUT_S)
    log = _index_lines(a)
    assert f"{PEOPLE} vectors read from the store" in log, log
    assert "published to the store" in log, log
    [ack] = infer_encoded(a.http(), [photos.bytes("biden.jpg")], enroll="biden")
    assert ack["enrolled"]["gallery_size"] == PEOPLE + 2

    b = joining("join-b")
    log = _index_lines(b)
    assert "loaded from the copy another server published" in log, log
    assert "1 vectors read from the store" in log, "only biden, enrolled after publishing"
    assert _who(b, photos, "obama2.jpg") == ["obama"]
    assert _who(b, photos, "biden.jpg") == ["biden"]
    assert not list(b.gallery_dir.glob("*.tmp")), "the copy's temporary file stays"

    c = joining("join-c")
    c.stop()
    for f in c.gallery_dir.glob("gallery.*index*"):
        f.unlink()
    postgres.sql("UPDATE triton_face.published_index_parts "
                 "SET bytes = overlay(bytes PLACING '\\xdeadbeef'::bytea FROM 1000) "
                 "WHERE part = 0", SUITE_DB)
    c.start(timeout=BUILD_TIMEOUT_S)
    log = _index_lines(c)
    assert "not used: the copy published to the store" in log and "manifest" in log, log
    assert "gallery index built" in log and "published to the store" in log, log
    assert _who(c, photos, "obama2.jpg") == ["obama"]

    d = joining("join-d")
    log = _index_lines(d)
    assert "loaded from the copy another server published" in log, log
    assert "0 vectors read from the store" in log, log
    assert _who(d, photos, "biden.jpg") == ["biden"]

    # A FORGET on any server: the published copy is replaced by one without the person's i8 bytes.
    [(hex_blob,)] = postgres.sql(
        "SELECT encode(embedding, 'hex') FROM triton_face.enrollments WHERE name = 'obama'", SUITE_DB)
    forms = _forms(np.frombuffer(bytes.fromhex(hex_blob), dtype="<f4"), "onnx")
    obama = forms["i8"]

    def in_table_files() -> dict[str, list[str]]:
        postgres.sql("CHECKPOINT", SUITE_DB)  # the pages written to the table files
        return _found(postgres.data / "base", forms)

    before = in_table_files()
    assert before["f32"] and before["i8"], f"the scan finds obama in the table files: {before}"

    assert _published_parts_holding(postgres, obama), "the scan finds obama in the published copy"
    [gone] = forget(d.http(), "obama")
    assert gone["forgotten"]["removed"] == 1
    forgotten = time.monotonic()
    while _published_parts_holding(postgres, obama):
        assert time.monotonic() - forgotten < ERASED_WITHIN_S, "the published copy holds obama"
        time.sleep(0.5)
    print(f"the published copy without obama {time.monotonic() - forgotten:.1f} s after the FORGET")
    assert _who(b, photos, "obama2.jpg") == ["unknown"]
    # The dead tuples of the rows and of the replaced copy: gone from every table file once the
    # operator's VACUUM FULL (docs/gallery.md, privacy) has run.
    postgres.sql(VACUUM_FULL, SUITE_DB)
    assert in_table_files() == {"f32": [], "i8": []}
    _a_gallery_image_leaves_the_published_copy(postgres, a, photos)


def _published_parts_holding(postgres, form: bytes) -> int:
    return sum(int(postgres.sql(
        "SELECT count(*) FROM triton_face.published_index_parts "
        f"WHERE position('\\x{w.hex()}'::bytea IN bytes) > 0", SUITE_DB)[0][0])
        for w in _windows(form))


def _a_gallery_image_leaves_the_published_copy(postgres, a, photos) -> None:
    """A photo in A's gallery folder: published with the index at A's next load after a change
    saved its vector; taken out of the folder, the copy is replaced by one without it."""
    a.stop()
    shutil.copy(photos.path("obama_partial_face2.jpg"), a.gallery_dir / "walker.jpg")
    a.start(timeout=BUILD_TIMEOUT_S)
    assert _who(a, photos, "obama_partial_face2.jpg") == ["walker"]
    [ack] = infer_encoded(a.http(), [photos.bytes("obama3.jpg")], enroll="carol")
    assert ack["enrolled"]["added"] is True
    a.stop()  # a change: the index saved, walker's vector with it
    a.start(timeout=BUILD_TIMEOUT_S)  # its copy published: other gallery images than the store's
    [(hex_blob,)] = postgres.sql(
        "SELECT encode(p.embedding, 'hex') FROM triton_face.folder_photos p JOIN "
        f"triton_face.galleries g ON g.id = p.gallery WHERE g.name = '{GALLERY}' AND p.faces = 1",
        SUITE_DB)
    walker = _forms(np.frombuffer(bytes.fromhex(hex_blob), dtype="<f4"), "onnx")["i8"]
    assert _published_parts_holding(postgres, walker), "the scan finds walker in the copy"
    a.stop()
    (a.gallery_dir / "walker.jpg").unlink()
    a.start(timeout=BUILD_TIMEOUT_S)
    taken_out = time.monotonic()
    while _published_parts_holding(postgres, walker):
        assert time.monotonic() - taken_out < ERASED_WITHIN_S, "the published copy holds walker"
        time.sleep(0.5)
