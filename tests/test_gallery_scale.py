"""A gallery of 100,000 people through the real server (issue: a gallery of millions at the cost
of an empty one): the store is filled straight through SQL with random unit embeddings of the
model's own embedder beside one real person, and `scripts/gallery_index.py` builds the vector
index before the server loads the model (the build at load, with its progress). Names
stay right among them, top_k lists people, ENROLL and FORGET are visible at once, the index saved
beside the store is used at the next load, a kill -9 while it is written leaves the last whole
file in use (caught up from the store), and a damaged file is rebuilt from the store. The
100,000 are indexed twice (the build before serving, the damaged file). The ONNX engine only: its 512-d embeddings are the large case,
and one engine keeps the suite's time in bounds."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from environment import REPO_ROOT
from face_client import encoded_tensors, forget, infer, infer_encoded, names
from gallery_store import index_file

pytestmark = pytest.mark.engines("onnx")

PEOPLE = 100_000
DIM = 512
# Building the graph of 100,000 people takes about a minute on 2 cores.
BUILD_TIMEOUT_S = 600.0


def _fill(gallery_dir: Path, people: int) -> None:
    """Add `people` random unit embeddings, one person each, as rows of the embedder that stored
    the first enrollment (the model's own)."""
    rng = np.random.default_rng(22)
    with closing(sqlite3.connect(gallery_dir / "gallery.sqlite3")) as db:
        [(embedder,)] = db.execute("SELECT DISTINCT embedder FROM enrollments").fetchall()
        for start in range(0, people, 10_000):
            block = rng.standard_normal((min(10_000, people - start), DIM)).astype("<f4")
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            db.executemany(
                "INSERT INTO enrollments (embedder, name, embedding, enrolled_at_ms) "
                "VALUES (?, ?, ?, 0)",
                ((embedder, f"person {start + i}", v.tobytes()) for i, v in enumerate(block)),
            )
        db.commit()


def _index_before_serving(server) -> str:
    """scripts/gallery_index.py on the server's model folder; its output."""
    log = server.root / "gallery-index.log"
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "gallery_index.py"), str(server.model_dir),
         "--log", str(log)],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
        env={**os.environ, "TRITONSERVER": str(server.env.tritonserver)})
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    # The build told its progress, with the time left, and its end, in the log and as a bar.
    told = [x for x in log.read_text().splitlines() if "gallery: indexing" in x]
    assert any(re.search(r"\d+% \(\d+ of \d+\) in .*, about .* left", x) for x in told), told
    assert "done in" in told[-1], told
    assert re.search(r"indexing: +\d+%.*about .* left", run.stderr), run.stderr
    return run.stdout


def _loaded_line(server) -> str:
    lines = [x for x in server.log_text().splitlines() if "gallery index" in x]
    assert lines, server.log_tail()
    return lines[-1]


def _start_slow(server) -> None:
    server.start(timeout=BUILD_TIMEOUT_S)


def _who(client, photos, photo: str) -> list[str]:
    [doc] = infer_encoded(client, [photos.bytes(photo)])
    return names(doc)


def _kill_while_saving(server) -> None:
    """SIGTERM, then SIGKILL as soon as the index being saved at unload shows as a temporary
    file: a crash in the middle of the write."""
    server._close_clients()
    server.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    while not list(server.gallery_dir.glob("gallery.*.index.*.tmp")):
        assert server.running, "the server stopped before its save was seen:\n" + server.log_tail()
        assert time.monotonic() < deadline, server.log_tail()
        time.sleep(0.001)
    server.kill()


def test_a_hundred_thousand_people(start_server, photos):
    server = start_server(gallery={})
    [ack] = infer_encoded(server.http(), [photos.bytes("obama.jpg")], enroll="obama")
    assert ack["enrolled"]["added"] is True
    server.stop()
    _fill(server.gallery_dir, PEOPLE)

    # Indexed before serving: the server loads the saved index.
    said = _index_before_serving(server)
    read = re.search(r"gallery index .*, (\d+) vectors read from the store and indexed in", said)
    assert read and int(read.group(1)) >= PEOPLE, said
    assert re.search(rf"saved: .*gallery\.\w+\.index, {PEOPLE + 1} store rows", said), said
    server.start()
    assert re.search(r"loaded from its file in .*: 0 vectors read", _loaded_line(server)), \
        _loaded_line(server)
    client, grpc = server.http(), server.grpc()
    assert _who(client, photos, "obama2.jpg") == ["obama"]
    assert _who(grpc, photos, "biden.jpg") == ["unknown"]
    [doc] = infer(client, encoded_tensors([photos.bytes("obama2.jpg")]),
                  parameters={"top_k": 5})
    candidates = doc["faces"][0]["candidates"]
    assert [c["name"] for c in candidates][0] == "obama" and len(candidates) == 5, candidates
    assert len({c["name"] for c in candidates}) == 5
    assert all(c["distance"] > 0.5 for c in candidates[1:]), "random people are far"

    # Changes are visible at once.
    [ack] = infer_encoded(client, [photos.bytes("biden.jpg")], enroll="biden")
    assert ack["enrolled"] == {"name": "biden", "added": True, "gallery_size": PEOPLE + 2}
    assert _who(grpc, photos, "biden.jpg") == ["biden"]
    [gone] = forget(client, "obama")
    assert gone["forgotten"]["removed"] == 1
    assert _who(client, photos, "obama2.jpg") == ["unknown"]

    # A clean stop saves the index; the next load uses it and is quick.
    server.stop()
    index = index_file(server.gallery_dir)
    assert index.with_name(index.name + ".json").is_file()
    started = time.monotonic()
    server.start()
    took = time.monotonic() - started
    _taken(server)
    assert _who(server.http(), photos, "biden.jpg") == ["biden"]
    assert _who(server.http(), photos, "obama2.jpg") == ["unknown"]

    # Kill -9 while the stop saves the changed index: never a torn file in use. The last
    # whole file (or none) is used, and the rows it lacks come from the store.
    [ack] = infer_encoded(server.http(), [photos.bytes("obama3.jpg")], enroll="barack")
    _kill_while_saving(server)
    _start_slow(server)
    leftovers = list(server.gallery_dir.glob("*.tmp"))
    assert not leftovers, f"the killed writer's files stay: {leftovers}"
    print(f"after the kill: {_taken(server)}")
    assert _who(server.http(), photos, "obama2.jpg") == ["barack"]
    assert _who(server.http(), photos, "biden.jpg") == ["biden"]

    # The file damaged (truncated): not used, rebuilt from the store.
    server.kill()
    index.write_bytes(index.read_bytes()[: index.stat().st_size // 2])
    _start_slow(server)
    log = server.log_text()
    assert "saved gallery index not used" in log and "manifest" in log, server.log_tail()
    assert _who(server.http(), photos, "obama2.jpg") == ["barack"]
    assert _who(server.http(), photos, "biden.jpg") == ["biden"]
    print(f"load from the saved index: {took:.1f} s")

    # Killed right after that build: its own save is used, strays and all.
    server.kill()
    server.start()
    _taken(server)
    # A gallery image, saved in the index with an ENROLL: each load takes it out of the file and
    # adds the folder's again, which is no change. A stop with nothing else changed writes
    # nothing; the loads take the strays from the file, the same ones each time.
    shutil.copy(photos.path("obama_partial_face.jpg"), server.gallery_dir / "barry.jpg")
    server.stop()
    server.start()
    _taken(server)
    [ack] = infer_encoded(server.http(), [photos.bytes("obama.jpg")], enroll="obama")
    assert ack["enrolled"]["added"] is True
    server.stop()
    assert "gallery: index saved in" in server.log_text()
    server.start()
    again = _taken(server)
    assert "1 gallery images added again" in again, again
    server.stop()
    assert "index unchanged since it was saved or loaded: nothing written" in server.log_text()
    server.start()
    assert _strays(_taken(server)) == _strays(again), "the same strays at every load"
    # An ENROLL and a FORGET, then kill -9 (nothing saved): the rows the file lacks are inserted
    # each alone, the forgotten one removed; the strays still taken.
    [ack] = infer_encoded(server.http(), [photos.bytes("obama3.jpg")], enroll="barry2")
    forget(server.http(), "biden")
    server.kill()
    server.start()
    line = _taken(server)
    assert ": 1 vectors read from the store, 1 stale removed" in line, line
    assert _who(server.http(), photos, "biden.jpg") == ["unknown"]
    assert not list(server.gallery_dir.glob("*.tmp"))


def _taken(server) -> str:
    """The load's line, which says the strays were taken from the saved file, not counted."""
    line = _loaded_line(server)
    assert "loaded from its file" in line and "taken from its file" in line, line
    return line


def _strays(line: str) -> int:
    found = re.search(r"(\d+) out of the graph's reach", line)
    return int(found.group(1)) if found else 0
