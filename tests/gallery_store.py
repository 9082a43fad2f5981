"""Reading a model's gallery store (gallery/gallery.sqlite3) from the tests, as a user's own
tooling would: plain SQL on the documented schema."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

STORE_FILE = "gallery.sqlite3"


def stored_names(gallery_dir: Path) -> list[str]:
    """The names of every enrolled row (all embedders), oldest first."""
    path = gallery_dir / STORE_FILE
    assert path.is_file(), f"{path} was not written"
    with closing(sqlite3.connect(path)) as db:
        return [name for (name,) in db.execute("SELECT name FROM enrollments ORDER BY id")]


def removals(gallery_dir: Path) -> list[tuple[str, int]]:
    """The removal log: (name, rows removed), oldest first."""
    with closing(sqlite3.connect(gallery_dir / STORE_FILE)) as db:
        return list(db.execute("SELECT name, removed FROM removals ORDER BY id"))


def index_file(gallery_dir: Path) -> Path:
    """The saved vector index of the one embedder in `gallery_dir` (gallery.<embedder>.index;
    its manifest is the same name with .json)."""
    found = sorted(gallery_dir.glob("gallery.*.index"))
    assert len(found) == 1, f"one embedder's saved index in {gallery_dir}: {found}"
    return found[0]
