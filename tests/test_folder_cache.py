"""The gallery folder's photos are embedded once (issue 22): what each photo gave the embedder
is kept in the gallery store by content, so a restart embeds nothing again; a changed photo is
embedded again, a removed one is dropped (and its person with it). Both stores: SQLite beside
the photos, and a real PostgreSQL 15 (its cache per gallery). Both engines."""

from __future__ import annotations

import re
import shutil

import pytest

from face_client import infer_encoded, names
from postgres_server import SUITE_DB

DSN_ENV = "FACE_GALLERY_DSN"
COUNTS = re.compile(r"gallery photos: (\d+) embedded now, (\d+) known from the store")


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, engine) -> dict:
    """start_server keywords for the store under test (PostgreSQL: a gallery per engine)."""
    if request.param == "sqlite":
        return {}
    db = request.getfixturevalue("postgres")
    return {
        "params": {"gallery_store": "postgres", "gallery_name": f"cache-{engine.name}"},
        "env": {DSN_ENV: db.dsn(SUITE_DB, f"cache-{engine.name}")},
    }


def _counts(server) -> tuple[int, int]:
    """(embedded now, known from the store) as the last load logged them."""
    found = COUNTS.findall(server.log_text())
    assert found, "no 'gallery photos:' line in the log:\n" + server.log_tail()
    embedded, cached = found[-1]
    return int(embedded), int(cached)


def _who(server, photos, photo: str) -> list[str]:
    [doc] = infer_encoded(server.http(), [photos.bytes(photo)])
    return names(doc)


def test_folder_photos_are_embedded_once(start_server, photos, store):
    gallery = {
        "obama.jpg": photos.path("obama.jpg"),
        "joe/portrait.jpg": photos.path("biden.jpg"),
        "nobody.jpg": photos.path("noface.jpg"),
    }
    server = start_server(gallery=gallery, **store)
    assert _counts(server) == (3, 0)
    server.restart()
    assert _counts(server) == (0, 3), "a restart embedded the folder's photos again"
    warnings = [line for line in server.log_text().splitlines() if line.startswith("W")]
    assert any("nobody.jpg" in line for line in warnings), "a cached faceless photo is skipped"
    assert _who(server, photos, "obama2.jpg") == ["obama"]
    assert _who(server, photos, "biden.jpg") == ["joe"]

    # Obama's photo is replaced by another of him, joe's folder goes: the new photo is
    # embedded, and joe is known no more.
    server.stop()
    shutil.copyfile(photos.path("obama3.jpg"), server.gallery_dir / "obama.jpg")
    shutil.rmtree(server.gallery_dir / "joe")
    server.start()
    assert _counts(server) == (1, 1)
    assert _who(server, photos, "obama2.jpg") == ["obama"]
    assert _who(server, photos, "biden.jpg") == ["unknown"]
