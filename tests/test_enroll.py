"""Bulk enrollment (`scripts/enroll.py`) against the real server: a folder with one photo per
person and a folder per person is enrolled with concurrency, refused photos are summed up by
reason, and a second run (after a clean end, or after an interruption that lost the journal)
enrolls nobody twice. One engine: the script does not depend on it."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from environment import REPO_ROOT
from face_client import list_people, people

pytestmark = pytest.mark.engines("onnx")

SCRIPT = REPO_ROOT / "scripts" / "enroll.py"


def _enroll(server, folder, *extra, port=None):
    url = f"127.0.0.1:{port or server.http_port}"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(folder), "--model", "face", "--url", url,
         "--concurrency", "3", *extra],
        capture_output=True, text=True, timeout=600)
    return run.returncode, run.stdout, run.stderr


def test_bulk_enrollment_and_its_rerun(start_server, photos, tmp_path):
    folder = tmp_path / "people"
    (folder / "barack").mkdir(parents=True)
    for source, target in [("obama.jpg", "obama.jpg"), ("biden.jpg", "biden.jpg"),
                           ("obama2.jpg", "barack/a.jpg"), ("obama3.jpg", "barack/b.jpg"),
                           ("noface.jpg", "nobody.jpg"), ("group5.jpg", "crowd.jpg"),
                           ("biden.jpg", "joe!.jpg")]:
        shutil.copy(photos.path(source), folder / target)
    (folder / "notes.txt").write_text("not a photo")
    server = start_server(gallery={})
    client = server.http()

    code, out, err = _enroll(server, folder)
    assert code == 1, (out, err)
    assert "7 photos: 4 enrolled, 0 already there, 0 done in an earlier run, 3 failed" in out, out
    assert "no face (1): nobody.jpg" in out, out
    assert "several faces (1): crowd.jpg" in out, out
    assert "invalid name (1): joe!.jpg" in out, out
    assert "photo" in err, "a progress bar on stderr"
    enrolled = [("barack", 2, "enrolled"), ("biden", 1, "enrolled"), ("obama", 1, "enrolled")]
    assert people(list_people(client)) == enrolled

    # Run again: what is done is not sent; the refused photos are tried and refused again.
    code, out, _ = _enroll(server, folder, "--quiet")
    assert code == 1 and "4 done in an earlier run, 3 failed" in out, out
    assert people(list_people(client)) == enrolled

    # An interruption that lost the journal: the server keeps no duplicate of a photo.
    (folder / ".enrolled-face.jsonl").unlink()
    for refused in ("nobody.jpg", "crowd.jpg", "joe!.jpg"):
        (folder / refused).unlink()
    code, out, _ = _enroll(server, folder, "--quiet")
    assert code == 0, out
    assert "4 photos: 0 enrolled, 4 already there, 0 done in an earlier run, 0 failed" in out, out
    assert people(list_people(client)) == enrolled

    # A changed photo is sent again.
    shutil.copy(photos.path("obama3.jpg"), folder / "obama.jpg")
    code, out, _ = _enroll(server, folder, "--quiet")
    assert code == 0 and "1 enrolled" in out and "3 done in an earlier run" in out, out
    assert ("obama", 2, "enrolled") in people(list_people(client))


def test_no_server_is_said_plainly(tmp_path):
    from triton_server import free_ports
    [port] = free_ports(1)
    code, _, err = _enroll(None, tmp_path, port=port)
    assert code == 2 and f"no server at 127.0.0.1:{port}" in err, err
