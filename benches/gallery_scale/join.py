#!/usr/bin/env python3
"""A server joining a PostgreSQL gallery of a million people (issue 22): how long until it is
ready, when another server has published its index to the database.

A real PostgreSQL 15 (started here, under WORK/pg) holds gallery "big": obama enrolled through
server A, then the same PEOPLE rows as run.py's SQLite gallery, copied in with their row ids.
Server A starts with that gallery's saved index in its folder and publishes it to the database
(its copy there is missing); server B then joins with an empty model folder: it copies the
published index, checks it, and catches up from the store. Written to out/bench-gallery-join.txt:
A's load and publish, B's time to ready and RSS, and B's answer for obama.

The index A starts from is the one run.py's first load built over the same rows (the same ids,
so the same keys), its manifest handed to this gallery's uid: building it again would take
another 20 minutes and measure nothing new. Run run.py first.

  python benches/gallery_scale/join.py [--library target/release/libtriton_face.so]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "tests")]

from postgres_server import PostgresServer  # noqa: E402
from run import BIG, ROOT, Server, env, model_dir, saved_index  # noqa: E402
from triton_server import set_parameter  # noqa: E402

DB = "bench"
GALLERY = "big"
DSN_ENV = "FACE_GALLERY_DSN"


def fleet_model(repo: Path, name: str, onnx_dir: Path, max_size: int) -> Path:
    """A face_onnx model on the PostgreSQL gallery GALLERY, with an empty gallery folder."""
    d = model_dir(repo, name, onnx_dir, max_size)
    shutil.rmtree(d / "gallery")
    (d / "gallery").mkdir()
    text = (d / "config.pbtxt").read_text()
    for key, value in (("gallery_store", "postgres"), ("gallery_name", GALLERY)):
        text = set_parameter(text, key, value)
    (d / "config.pbtxt").write_text(text)
    return d


def copy_rows(db: PostgresServer, sqlite_store: Path) -> int:
    """Every enrollment of the SQLite gallery after obama's, with its id, as one change."""
    [(gallery, embedder)] = db.sql(
        "SELECT gallery, embedder FROM triton_face.enrollments", DB)
    [(change,)] = db.sql(
        f"UPDATE triton_face.galleries SET last_change = last_change + 1 WHERE id = {gallery} "
        "RETURNING last_change", DB)
    with closing(sqlite3.connect(sqlite_store)) as lite:
        count = lite.execute("SELECT count(*) FROM enrollments WHERE id > 1").fetchone()[0]
        rows = lite.execute("SELECT id, name, embedding FROM enrollments WHERE id > 1 ORDER BY id")
        db.copy_in("triton_face.enrollments", "id, gallery, embedder, name, embedding, change",
                   (f"{i}\t{gallery}\t{embedder}\t{name}\t\\\\x{blob.hex()}\t{change}"
                    for i, name, blob in rows), DB)
    db.sql("SELECT setval('triton_face.enrollments_id_seq', "
           "(SELECT max(id) FROM triton_face.enrollments))", DB)
    return count


def hand_over_index(sqlite_gallery: Path, gallery: Path, db: PostgresServer) -> None:
    """run.py's saved index, its manifest naming this gallery's uid (the owner's last word)."""
    [(uid,)] = db.sql(f"SELECT uid::text FROM triton_face.galleries WHERE name = '{GALLERY}'", DB)
    index = saved_index(sqlite_gallery)
    manifest_path = index.with_name(index.name + ".json")
    manifest = json.loads(manifest_path.read_text())
    manifest["owner"] = manifest["owner"].rsplit(" ", 1)[0] + f" {uid}"
    shutil.copy2(index, gallery / index.name)
    (gallery / manifest_path.name).write_text(json.dumps(manifest))


def index_lines(server: Server) -> list[str]:
    return [x.split("] ", 1)[-1] for x in server.log.read_text().splitlines()
            if "gallery index" in x]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=ROOT / "out/gallery-scale")
    ap.add_argument("--library", type=Path, default=ROOT / "target/release/libtriton_face.so")
    args = ap.parse_args()
    photos = Path(env("FACE_PHOTOS"))
    onnx_dir = Path(os.environ.get("FACE_ONNX_DIR") or Path(env("FACE_ASSETS")) / "onnx")
    work = args.work
    sqlite_gallery = work / "models" / BIG / "gallery"
    index = saved_index(sqlite_gallery)
    if not index or not index.with_name(index.name + ".json").exists():
        sys.exit(f"{sqlite_gallery}: no saved index: run benches/gallery_scale/run.py first")
    backends, logs = work / "backends", work / "logs"
    shutil.copy2(args.library, backends / "face/libtriton_face.so")
    shutil.rmtree(work / "pg", ignore_errors=True)
    shutil.rmtree(work / "join", ignore_errors=True)
    (work / "pg").mkdir(parents=True)
    db = PostgresServer(work / "pg")
    try:
        db.start()
        db.create_database(DB)
        os.environ[DSN_ENV] = db.dsn(DB, "bench")
        with closing(sqlite3.connect(sqlite_gallery / "gallery.sqlite3")) as lite:
            people = lite.execute("SELECT count(*) FROM enrollments").fetchone()[0]
        repos = {s: work / "join" / s for s in "ab"}
        folders = {s: fleet_model(repos[s], f"face_onnx_{s}", onnx_dir, people + 100) / "gallery"
                   for s in "ab"}

        server = Server(repos["a"], backends, logs / "join-a0.log", 120)
        assert server.infer("face_onnx_a", photos / "obama.jpg", enroll="obama")["enrolled"]["added"]
        server.stop()
        started = time.monotonic()
        copied = copy_rows(db, sqlite_gallery / "gallery.sqlite3")
        copy_s = time.monotonic() - started
        print(f"[join] {copied:,} rows copied into PostgreSQL in {copy_s:.0f} s", flush=True)
        hand_over_index(sqlite_gallery, folders["a"], db)

        a = Server(repos["a"], backends, logs / "join-a.log", 1800)
        a_lines = index_lines(a)
        a.stop()
        [(parts, mib)] = db.sql("SELECT count(*), sum(length(bytes)) >> 20 "
                                "FROM triton_face.published_index_parts", DB)
        b = Server(repos["b"], backends, logs / "join-b.log", 1800)
        answer = b.infer("face_onnx_b", photos / "obama2.jpg")
        b_ready, b_rss, b_lines = b.ready_s, b.rss_mib(), index_lines(b)
        b.stop()
    finally:
        db.stop()

    cpu = next((x.split(":", 1)[1].strip() for x in Path("/proc/cpuinfo").read_text().splitlines()
                if x.startswith("model name")), "?")
    who = [f.get("name") for f in answer["faces"]]
    lines = [f"a server joining a PostgreSQL gallery of {people:,} people ({cpu}, "
             f"{os.cpu_count()} CPUs, {time.strftime('%F %T')})",
             f"server A: ready in {a.ready_s:.1f} s, its index loaded from its folder and "
             f"published to the database ({parts} parts, {mib} MiB)",
             *(f"  log: {x}" for x in a_lines),
             f"server B, an empty model folder: ready in {b_ready:.1f} s, RSS {b_rss:.0f} MiB; "
             f"obama2.jpg -> {who}",
             *(f"  log: {x}" for x in b_lines)]
    text = "\n".join(lines) + "\n"
    print(text)
    (ROOT / "out/bench-gallery-join.txt").write_text(text)


if __name__ == "__main__":
    main()
