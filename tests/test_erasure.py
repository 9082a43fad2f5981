"""Erasure that erases, through the real server, both engines: after an acknowledged FORGET no
file under the model folder holds the person's embedding in any form the model writes (the
store's f32, the saved index's i8 and fine bytes for the ONNX engine's cosine gallery, f16 for
dlib's), within seconds, after the server stops, and after a kill -9 right after the FORGET
(the next load erases). A photo taken out of the gallery folder loses its cached embedding and
its vector at the next load. `retention_days` expires enrollments on their own, while running
and at load, erased and recorded the same way; on a PostgreSQL fleet the servers without it follow
the expiry of one with it. With PostgreSQL, the operator's `VACUUM FULL` (docs/gallery.md)
leaves no copy in the table's files. Each check first finds the bytes where they were written,
so a scan that cannot find anything fails rather than passes."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from environment import REPO_ROOT
from face_client import forget, infer_encoded, list_people, names, people
from gallery_store import index_file
from postgres_server import SUITE_DB

# The gallery's two forms (cosine i8, Euclidean f16); tract's gallery is the ONNX engine's.
pytestmark = pytest.mark.engines("onnx", "dlib")

# FORGET's erasure runs on its own thread, about a second after the change; the issue allows 60.
ERASED_WITHIN_S = 60.0
# What docs/gallery.md tells a PostgreSQL operator to run after a FORGET: every table that holds
# vectors (tests/test_fleet_join.py runs it on a published index).
VACUUM_FULL = ("VACUUM FULL triton_face.enrollments, triton_face.folder_photos, "
               "triton_face.published_index_parts;")
WINDOW = 16


def _forms(embedding: np.ndarray, engine: str) -> dict[str, bytes]:
    """The bytes of `embedding` as each file the model writes holds it."""
    forms = {"f32": embedding.astype("<f4").tobytes()}
    if engine == "onnx":  # cosine: i8 of the unit vector (rounded half away from zero)
        scaled = embedding / np.linalg.norm(embedding) * 127
        forms["i8"] = np.clip(np.sign(scaled) * np.floor(np.abs(scaled) + 0.5), -127, 127) \
            .astype(np.int8).tobytes()
    else:  # Euclidean: f16
        forms["f16"] = embedding.astype("<f2").tobytes()
    return forms


def _windows(form: bytes) -> list[bytes]:
    """Four slices spread over the form: a copy in part is found too."""
    step = (len(form) - WINDOW) // 3
    return [form[i * step:i * step + WINDOW] for i in range(4)]


def _found(model_dir: Path, forms: dict[str, bytes]) -> dict[str, list[str]]:
    """Per form, the files under `model_dir` holding any of its windows (the engine's model
    files are links to assets/, not written by the model)."""
    files = {p: p.read_bytes() for p in model_dir.rglob("*") if p.is_file() and not p.is_symlink()}
    return {
        kind: sorted({str(p.relative_to(model_dir)) for p, data in files.items()
                      for w in _windows(form) if w in data})
        for kind, form in forms.items()
    }


def _stored(gallery: Path, sql: str, key: str) -> np.ndarray:
    with closing(sqlite3.connect(f"file:{gallery / 'gallery.sqlite3'}?mode=ro", uri=True)) as db:
        [(blob,)] = db.execute(sql, (key,)).fetchall()
    return np.frombuffer(blob, dtype="<f4")


def _enrolled(gallery: Path, name: str) -> np.ndarray:
    return _stored(gallery, "SELECT embedding FROM enrollments WHERE name = ?", name)


def _assert_everywhere(server, forms) -> None:
    found = _found(server.model_dir, forms)
    assert "gallery/gallery.sqlite3" in found["f32"], found
    for kind in forms.keys() - {"f32"}:
        assert any(re.fullmatch(r"gallery/gallery\.\w+\.index", f) for f in found[kind]), found


def _wait_erased(server, forms) -> float:
    started = time.monotonic()
    while any(_found(server.model_dir, forms).values()):
        assert time.monotonic() - started < ERASED_WITHIN_S, _found(server.model_dir, forms)
        time.sleep(0.2)
    return time.monotonic() - started


def test_forget_erases_every_copy(start_server, engine, photos):
    server = start_server(gallery={})
    client = server.http()
    for photo, name in (("biden.jpg", "biden"), ("obama.jpg", "obama"),
                        ("obama_partial_face.jpg", "other")):
        [ack] = infer_encoded(client, [photos.bytes(photo)], enroll=name)
        assert ack["enrolled"]["added"], ack
    server.stop()  # the index is saved beside the store
    obama = _forms(_enrolled(server.gallery_dir, "obama"), engine.name)
    biden = _forms(_enrolled(server.gallery_dir, "biden"), engine.name)
    _assert_everywhere(server, obama)

    server.start()
    [gone] = forget(server.http(), "obama")
    assert gone["forgotten"]["removed"] == 1
    took = _wait_erased(server, obama)
    _assert_everywhere(server, biden)  # what stays is untouched (the scan still sees it)
    assert names(infer_encoded(server.http(), [photos.bytes("biden.jpg")])[0]) == ["biden"]
    server.stop()
    assert not any(_found(server.model_dir, obama).values())
    print(f"{engine.name}: erased {took:.1f} s after the FORGET")

    # Killed right after an acknowledged FORGET: the next load erases what was left.
    server.start()
    [gone] = forget(server.http(), "biden")
    assert gone["forgotten"]["removed"] == 1
    server.kill()
    server.start()
    assert not any(_found(server.model_dir, biden).values()), _found(server.model_dir, biden)
    assert names(infer_encoded(server.http(), [photos.bytes("biden.jpg")])[0]) == ["unknown"]

    # Stopped right after an acknowledged FORGET: the pass runs before the server exits.
    other = _forms(_enrolled(server.gallery_dir, "other"), engine.name)
    assert _found(server.model_dir, other)["f32"], "the scan finds the enrolled row"
    [gone] = forget(server.http(), "other")
    assert gone["forgotten"]["removed"] == 1
    server.stop()
    assert not any(_found(server.model_dir, other).values()), _found(server.model_dir, other)


def test_a_replaced_index_file_keeps_no_copy_in_its_old_blocks(start_server, engine, photos):
    """The saved index opened before a FORGET, its descriptor kept: once the erasure pass has
    replaced the file, reading through that descriptor (the old inode, whose blocks a plain
    rename would free as they were) finds zeros, not the person."""
    server = start_server(gallery={})
    for photo, name in (("biden.jpg", "biden"), ("obama.jpg", "obama")):
        [ack] = infer_encoded(server.http(), [photos.bytes(photo)], enroll=name)
        assert ack["enrolled"]["added"], ack
    server.stop()  # the index saved beside the store
    obama = _forms(_enrolled(server.gallery_dir, "obama"), engine.name)
    index_form = {k: v for k, v in obama.items() if k != "f32"}
    server.start()
    with open(index_file(server.gallery_dir), "rb") as old:
        held = old.read()
        assert all(w in held for form in index_form.values() for w in _windows(form)), \
            "the scan finds obama through the descriptor"
        [gone] = forget(server.http(), "obama")
        assert gone["forgotten"]["removed"] == 1
        _wait_erased(server, obama)
        old.seek(0)
        after = old.read()
    assert len(after) == len(held) and after.count(0) == len(after), "the old file zeroed"


@pytest.mark.engines("onnx")  # the store's rule, the same for every engine
def test_an_expiry_at_load_after_a_failed_pass_is_erased(start_server, engine, photos):
    """A reader holds the store while the server loads: the expiry at load commits, its erasure
    pass fails (the checkpoint is held back) and says so; once the reader lets go, the pass is
    tried again and no byte of the expired face stays (the mark of what is erased moves only
    when a pass succeeds)."""
    server = start_server(gallery={}, params={"retention_days": RETENTION_DAYS})
    [ack] = infer_encoded(server.http(), [photos.bytes("biden.jpg")], enroll="biden")
    enrolled = time.monotonic()
    assert ack["enrolled"]["added"], ack
    server.stop()
    biden = _forms(_enrolled(server.gallery_dir, "biden"), engine.name)
    _assert_everywhere(server, biden)
    time.sleep(max(0.0, RETENTION_S + 0.5 - (time.monotonic() - enrolled)))
    reader = sqlite3.connect(server.gallery_dir / "gallery.sqlite3", isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM enrollments").fetchall()  # a read snapshot
        server.start()
        assert "1 enrollments expired at load" in server.log_text()
        started = time.monotonic()
        while "not done yet" not in server.log_text():
            assert time.monotonic() - started < ERASED_WITHIN_S, server.log_tail()
            time.sleep(0.2)
        assert _found(server.model_dir, biden)["f32"], "held back while the reader reads"
    finally:
        reader.close()
    took = _wait_erased(server, biden)
    print(f"erased {took:.1f} s after the reader let go")


def _legacy(path: Path, engine: str, metric: str, entries: dict[str, np.ndarray]) -> Path:
    """The old store's `enrolled.json` (imported into SQLite at the next load)."""
    [dim] = {len(v) for v in entries.values()}
    path.write_text(json.dumps({
        "version": 1, "engine": engine, "metric": metric, "dim": dim,
        "entries": [{"name": n, "embedding": [float(x) for x in v]} for n, v in entries.items()],
    }))
    return path


def _temporary_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.engines("onnx")  # the store's and the saved index's rules, the same for dlib
def test_no_copy_outlives_an_import_another_embedders_rows_or_a_failed_save(
        start_server, engine, photos, tmp_path):
    """enrolled.json is erased once imported (and the `.migrated` copies older versions left);
    a FORGET that deletes only another embedder's rows is erased like any; a save that fails
    leaves no temporary file. Each time the byte scan finds nothing under the model folder."""
    rng = np.random.default_rng(7)
    ghost = rng.standard_normal(128).astype("<f4")  # dlib's rows: another embedder
    mine = rng.standard_normal(512)
    mine = (mine / np.linalg.norm(mine)).astype("<f4")
    server = start_server(gallery={"enrolled.json": _legacy(
        tmp_path / "dlib.json", "dlib", "euclidean", {"ghost": ghost})})
    gallery = server.gallery_dir
    leftovers = lambda: sorted(p.name for p in gallery.glob("enrolled.json*"))  # noqa: E731
    assert leftovers() == [], "imported, then erased"
    assert "imported 1 enrolled faces" in server.log_text()
    server.stop()
    _legacy(gallery / "enrolled.json", "onnx", "cosine", {"imported": mine})
    _legacy(gallery / "enrolled.json.migrated", "onnx", "cosine", {"imported": mine})
    server.start()
    assert leftovers() == [], "the import and an older version's renamed copy, erased"
    [doc] = infer_encoded(server.http(), [photos.bytes("obama.jpg")], enroll="obama")
    server.stop()  # the index saved, with `imported`'s vector
    forms = {"ghost": _forms(ghost, "dlib") | {}, "imported": _forms(mine, "onnx")}
    forms["ghost"].pop("f16")  # another embedder's rows are only in the store
    _assert_everywhere(server, forms["imported"])
    assert _found(server.model_dir, forms["ghost"])["f32"], "the scan finds the other's row"

    server.start()
    for name in ("ghost", "imported"):
        [gone] = forget(server.http(), name)
        assert gone["forgotten"]["removed"] == 1, gone
        _wait_erased(server, forms[name])

    # A save that fails (a folder where the index goes): its temporary file goes at once.
    obama = _forms(_enrolled(gallery, "obama"), "onnx")
    saved = index_file(gallery)
    saved.unlink()
    (saved / "in-the-way").mkdir(parents=True)
    [gone] = forget(server.http(), "obama")
    assert gone["forgotten"]["removed"] == 1, gone
    started = time.monotonic()
    while "erasure not done yet" not in server.log_text():
        assert time.monotonic() - started < ERASED_WITHIN_S, server.log_tail()
        time.sleep(0.2)
    assert _temporary_files(gallery) == []
    _wait_erased(server, obama)
    server.stop()
    assert _temporary_files(gallery) == [], "the save at unload failed too, and left nothing"
    assert not any(_found(server.model_dir, obama).values())


def test_a_photo_out_of_the_folder_is_erased(start_server, engine, photos):
    server = start_server(gallery={"obama.jpg": photos.path("obama.jpg")})
    [ack] = infer_encoded(server.http(), [photos.bytes("biden.jpg")], enroll="biden")
    assert ack["enrolled"]["added"], ack
    server.stop()
    cached = _stored(server.gallery_dir, "SELECT embedding FROM folder_photos WHERE faces = ?", 1)
    obama = _forms(cached, engine.name)
    _assert_everywhere(server, obama)

    (server.gallery_dir / "obama.jpg").unlink()
    server.start()
    took = _wait_erased(server, obama)
    assert names(infer_encoded(server.http(), [photos.bytes("obama2.jpg")])[0]) == ["unknown"]
    print(f"{engine.name}: the folder photo erased {took:.1f} s after the load")


def test_postgresql_rows_are_erased_by_vacuum_full(postgres, start_server, engine, photos):
    """FORGET deletes the rows at once; their bytes stay in the table's files (a dead tuple, a
    TOAST chunk for 512-d) until the operator's VACUUM FULL rewrites the table."""
    server = start_server(gallery={},
                          params={"gallery_store": "postgres", "gallery_name": f"erase_{engine.name}"},
                          env={"FACE_GALLERY_DSN": postgres.dsn(SUITE_DB, "erase")})
    client = server.http()
    for photo, name in (("biden.jpg", "biden"), ("obama.jpg", "obama")):
        [ack] = infer_encoded(client, [photos.bytes(photo)], enroll=name)
        assert ack["enrolled"]["added"], ack
    [(hex_blob,)] = postgres.sql(
        "SELECT encode(embedding, 'hex') FROM triton_face.enrollments WHERE name = 'obama'", SUITE_DB)
    obama = {"f32": bytes.fromhex(hex_blob)}
    tables = postgres.data / "base"

    def in_tables() -> list[str]:
        postgres.sql("CHECKPOINT", SUITE_DB)  # the pages written to the table files
        return _found(tables, obama)["f32"]

    assert in_tables(), "the scan finds the enrolled row"
    [gone] = forget(client, "obama")
    assert gone["forgotten"]["removed"] == 1
    assert in_tables(), "a deleted row stays in the files until VACUUM FULL"
    assert VACUUM_FULL in (REPO_ROOT / "docs" / "gallery.md").read_text(), "the documented command"
    postgres.sql(VACUUM_FULL, SUITE_DB)
    assert not in_tables()
    assert names(infer_encoded(client, [photos.bytes("biden.jpg")])[0]) == ["biden"]



# 0.00005 days = 4.3 s, checked every second (a tenth of the period, at least 1 s, at most 60).
RETENTION_DAYS = "0.00005"
RETENTION_S = 0.00005 * 86_400


@pytest.mark.engines("onnx")  # the store's rule, the same for every engine
def test_retention_expires_erases_and_records(start_server, engine, photos):
    server = start_server(gallery={}, params={"retention_days": RETENTION_DAYS})
    client = server.http()
    [ack] = infer_encoded(client, [photos.bytes("obama.jpg")], enroll="obama")
    enrolled = time.monotonic()
    assert ack["enrolled"]["added"], ack
    assert names(infer_encoded(client, [photos.bytes("obama2.jpg")])[0]) == ["obama"]
    obama = _forms(_enrolled(server.gallery_dir, "obama"), engine.name)
    assert _found(server.model_dir, obama)["f32"], "the scan finds the enrolled row"

    while names(infer_encoded(client, [photos.bytes("obama2.jpg")])[0]) == ["obama"]:
        assert time.monotonic() - enrolled < RETENTION_S + 10, "not expired"
        time.sleep(0.2)
    assert time.monotonic() - enrolled >= RETENTION_S - 0.5, "expired too early"
    _wait_erased(server, obama)
    changes = list_people(client, parameters={"changes": True})["changes"]
    assert {k: changes[0][k] for k in ("operation", "name", "count", "key")} == \
        {"operation": "expire", "name": "obama", "count": 1, "key": None}, changes

    # Expired at load: enrolled, the server stopped, started again after the period.
    [ack] = infer_encoded(client, [photos.bytes("biden.jpg")], enroll="biden")
    enrolled = time.monotonic()
    server.stop()  # the index saved with biden in it
    biden = _forms(_enrolled(server.gallery_dir, "biden"), engine.name)
    _assert_everywhere(server, biden)
    time.sleep(max(0.0, RETENTION_S + 0.5 - (time.monotonic() - enrolled)))
    server.start()
    assert "retention_days = 0.00005: 1 enrollments expired at load" in server.log_text()
    _wait_erased(server, biden)
    people = list_people(server.http(), parameters={"changes": True})
    assert people["gallery_size"] == 0 and people["changes"][0]["name"] == "biden", people


@pytest.mark.engines("onnx")  # the store's rule, the same for every engine
def test_retention_on_a_postgresql_fleet(postgres, start_server, engine, photos):
    """Server A expires; server B, without retention_days, follows. Obama enrolled twice, 2.5 s
    apart: the first expiry takes his older row only, and B keeps the newer one (a follower that
    took the expiry for a FORGET would drop both)."""
    fleet = {"gallery_store": "postgres", "gallery_name": "retain"}
    env = {"FACE_GALLERY_DSN": postgres.dsn(SUITE_DB, "retain")}
    a = start_server(gallery={}, params={**fleet, "retention_days": RETENTION_DAYS}, env=env)
    b = start_server(gallery={}, params=fleet, env=env)
    client = b.http()
    [ack] = infer_encoded(client, [photos.bytes("obama.jpg")], enroll="obama")
    first = time.monotonic()
    assert ack["enrolled"]["added"], ack
    time.sleep(2.5)
    for photo, name in (("obama3.jpg", "obama"), ("biden.jpg", "biden")):
        [ack] = infer_encoded(client, [photos.bytes(photo)], enroll=name)
        assert ack["enrolled"]["added"], ack
    second = time.monotonic()

    def expiries() -> list[tuple[str, int]]:
        changes = list_people(a.http(), parameters={"changes": True})["changes"]
        return [(c["name"], c["count"]) for c in changes if c["operation"] == "expire"]

    def on_b() -> list[tuple[str, int, str]]:
        return sorted(people(list_people(client)))

    while not expiries():
        assert time.monotonic() - first < RETENTION_S + 10, "not expired"
        time.sleep(0.2)
    assert time.monotonic() - first >= RETENTION_S - 0.5, "expired too early"
    assert expiries() == [("obama", 1)]
    followed = time.monotonic()
    while on_b() != [("biden", 1, "enrolled"), ("obama", 1, "enrolled")]:
        assert time.monotonic() - followed < 2.0, on_b()  # the fleet's propagation promise
        time.sleep(0.1)
    assert names(infer_encoded(client, [photos.bytes("obama2.jpg")])[0]) == ["obama"]

    while on_b():
        assert time.monotonic() - second < RETENTION_S + 10, on_b()
        time.sleep(0.2)
    assert sorted(expiries()) == [("biden", 1), ("obama", 1), ("obama", 1)]
    assert postgres.sql("SELECT count(*) FROM triton_face.enrollments e JOIN "
                        "triton_face.galleries g ON g.id = e.gallery WHERE g.name = 'retain'",
                        SUITE_DB) == [("0",)]


def _private_memory(pid: int) -> tuple[bytes, list[list[str]]]:
    """The bytes of the server's memory kept out of core dumps (the index's: VmFlags `dd`), and
    each such region's flags."""
    regions, flags, start = [], [], None
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            head = line.split()[0] if line.strip() else ""
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                start = [int(x, 16) for x in head.split("-")]
            elif line.startswith("VmFlags:") and start:
                flag = line.split()[1:]
                # Ours are plain read-write memory; the kernel marks some of its own (vvar) dd.
                if {"dd", "rd", "wr"} <= set(flag) and not {"io", "pf"} & set(flag):
                    regions.append(start)
                    flags.append(flag)
    chunks = []
    with open(f"/proc/{pid}/mem", "rb") as mem:
        for a, b in regions:
            mem.seek(a)
            chunks.append(mem.read(b - a))
    return b"".join(chunks), flags


def test_a_forgotten_vector_leaves_the_servers_memory(start_server, engine, photos):
    """The index's memory is kept out of core dumps and locked against swap (or the load says
    why not), and a FORGET zeroes the person's vector there at once: a scan of that memory finds
    obama's stored form before and not after, biden's in both."""
    server = start_server(gallery={})
    client = server.http()
    for photo, name in (("biden.jpg", "biden"), ("obama.jpg", "obama")):
        [ack] = infer_encoded(client, [photos.bytes(photo)], enroll=name)
        assert ack["enrolled"]["added"], ack
    index_form = "i8" if engine.name == "onnx" else "f16"
    obama = _forms(_enrolled(server.gallery_dir, "obama"), engine.name)[index_form]
    biden = _forms(_enrolled(server.gallery_dir, "biden"), engine.name)[index_form]
    held = lambda form, memory: any(w in memory for w in _windows(form))  # noqa: E731
    memory, flags = _private_memory(server.proc.pid)
    assert flags, "no region of the server's memory is kept out of core dumps"
    assert held(obama, memory) and held(biden, memory), "the scan finds both in the index"
    locked = all("lo" in f for f in flags)
    assert locked or "not locked against swap" in server.log_text(), flags
    [gone] = forget(client, "obama")
    assert gone["forgotten"]["removed"] == 1
    memory, _ = _private_memory(server.proc.pid)
    assert not held(obama, memory), "the forgotten vector is still in the index's memory"
    assert held(biden, memory)
