"""Who may change or read the gallery (`gallery_key_file`), through the real server: ENROLL,
FORGET and LIST need the request parameter `gallery_key` (or a header Triton forwards as it);
a missing or wrong key is refused for that request alone, changes nothing, is counted, and no
key is shown in a log, an error, an answer or the model config. Recognition needs no key.
The keys do not depend on the engine: the ONNX engine's server serves them all."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tritonclient.utils import InferenceServerException

from face_client import (
    encoded_tensors, expect_invalid, forget, infer, infer_encoded, list_people, names, people,
)
from environment import REPO_ROOT
from postgres_server import SUITE_DB
from triton_server import TritonServer

pytestmark = pytest.mark.engines("onnx")

OPS_KEY, BARE_KEY, WRONG_KEY = "k-ops-7f3a91c2", "k-bare-55d0e8b1", "k-wrong-0c4f2a9e"
REFUSED = "gallery_key"
ADMIN = "admin-9d2e"
# As docs/gallery.md shows it: the key forwarded from a header, Triton's repository API restricted.
FORWARD = (
    "--http-header-forward-pattern=gallery_key", "--grpc-header-forward-pattern=gallery_key",
    f"--http-restricted-api=model-repository,shared-memory:admin-key={ADMIN}",
    f"--grpc-restricted-protocol=model-repository,shared-memory:admin-key={ADMIN}",
)


def _key_file(folder, text: str, mode: int = 0o600):
    path = folder / "gallery.keys"
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture(scope="module")
def keyed(start_module_server, tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    keys = _key_file(folder, f"# who may change the gallery\nops:{OPS_KEY}\n{BARE_KEY}\n")
    return start_module_server(
        params={"gallery_key_file": str(keys)}, metrics=True, extra_args=FORWARD,
    )


def _key(value) -> dict:
    return {"parameters": {"gallery_key": value}}


def _enroll(client, photos, photo: str, name: str, **options) -> list[dict]:
    return infer(client, encoded_tensors([photos.bytes(photo)], name), **options)


def _who(client) -> list[str]:
    return sorted(name for name, _, _ in people(list_people(client, **_key(OPS_KEY))))


def test_changes_and_lists_need_a_valid_key_and_refusals_change_nothing(keyed, photos):
    client, grpc = keyed.http(), keyed.grpc()
    before = _who(client)
    assert before == ["biden", "obama"], before
    refused = 0
    for c in (client, grpc):
        for options in ({}, _key(WRONG_KEY), _key(""), _key(OPS_KEY.upper()), _key(7)):
            expect_invalid(lambda: _enroll(c, photos, "obama2.jpg", "mallory", **options), REFUSED)
            expect_invalid(lambda: forget(c, "obama", **options), REFUSED)  # noqa: B023
            expect_invalid(lambda: list_people(c, **options), REFUSED)  # noqa: B023
            refused += 3
    assert _who(client) == before, "a refused request changed the gallery"
    assert keyed.metric("face_gallery_refusals", model="face") == refused

    # Recognition needs no key.
    for c in (client, grpc):
        [doc] = infer_encoded(c, [photos.bytes("obama2.jpg")])
        assert names(doc) == ["obama"], doc


def test_every_key_of_the_file_works(keyed, photos):
    client, grpc = keyed.http(), keyed.grpc()
    [ack] = _enroll(client, photos, "obama3.jpg", "barack", **_key(BARE_KEY))
    assert ack["enrolled"]["added"] is True, ack
    assert "barack" in _who(grpc)
    [gone] = forget(grpc, "barack", **_key(OPS_KEY))
    assert gone["forgotten"]["name"] == "barack", gone
    assert "barack" not in _who(client)


def test_the_key_as_a_header_that_triton_forwards(keyed, photos):
    client, grpc = keyed.http(), keyed.grpc()
    listed = list_people(client, headers={"gallery_key": BARE_KEY})
    assert {name for name, _, _ in people(listed)} >= {"obama", "biden"}, listed
    listed = list_people(grpc, headers={"gallery_key": OPS_KEY})
    assert {name for name, _, _ in people(listed)} >= {"obama", "biden"}, listed
    expect_invalid(lambda: list_people(client, headers={"gallery_key": WRONG_KEY}), REFUSED)
    # Triton's own restriction of the rest, as the docs configure it.
    for c, header in ((client, "admin-key"), (grpc, "triton-grpc-protocol-admin-key")):
        with pytest.raises(InferenceServerException):
            c.get_model_repository_index()
        assert c.get_model_repository_index(headers={header: ADMIN})


def test_no_key_is_shown_in_log_config_error_or_answer(keyed, photos):
    client = keyed.http()
    errors = [
        str(expect_invalid(lambda: list_people(client, **_key(WRONG_KEY)), REFUSED)),
        str(expect_invalid(lambda: _enroll(client, photos, "obama2.jpg", "x", **_key(OPS_KEY[:-1])),
                           REFUSED)),
    ]
    answers = [str(list_people(client, **_key(OPS_KEY)))]
    config = str(client.get_model_config("face"))
    log = keyed.log_text()
    assert "ENROLL, FORGET and LIST need one of the 2 keys" in log, log
    for text in (*errors, *answers, config, log):
        for secret in (OPS_KEY, BARE_KEY, WRONG_KEY, OPS_KEY[:-1]):
            assert secret not in text, f"{secret} shown in: {text[:300]}"
    assert "can be read by other users" not in log, "the file is 0600"


def test_load_warns_of_an_open_gallery_or_a_readable_key_file(start_server, tmp_path):
    open_model = start_server()
    assert "no gallery_key_file: any client may ENROLL, FORGET and LIST" in open_model.log_text()
    open_model.stop()
    keys = _key_file(tmp_path, f"{OPS_KEY}\n", mode=0o644)
    readable = start_server(params={"gallery_key_file": str(keys)})
    log = readable.log_text()
    assert "can be read by other users than the server's" in log, log
    assert OPS_KEY not in log


@pytest.mark.parametrize("text, needle", [
    ("# only a comment\n\n", "no key in the file"),
    (f"ops:\n{OPS_KEY}\n", "line 1: expected label:key or a key"),
    (None, "cannot be read"),
], ids=["no-key", "bad-line", "missing"])
def test_a_key_file_that_gives_no_keys_fails_the_load(suite_env, tmp_path, engine, text, needle):
    keys = tmp_path / "absent.keys" if text is None else _key_file(tmp_path, text)
    server = TritonServer(suite_env, tmp_path / "repo", engine=engine.name,
                          params={"gallery_key_file": str(keys)})
    log = server.start_expecting_exit()
    assert needle in log and f"gallery_key_file {keys}" in log, log
    assert OPS_KEY not in log


def test_our_clients_send_the_key_from_the_environment(keyed, photos, tmp_path):
    """scripts/enroll.py (through scripts/face_api.py, which the app and video.py share):
    refused without FACE_GALLERY_KEY, enrolls with it."""
    folder = tmp_path / "people"
    folder.mkdir()
    (folder / "joe.jpg").write_bytes(photos.bytes("biden.jpg"))
    command = [sys.executable, str(REPO_ROOT / "scripts" / "enroll.py"), str(folder),
               "--model", "face", "--url", f"127.0.0.1:{keyed.http_port}", "--quiet"]
    env = {k: v for k, v in os.environ.items() if k != "FACE_GALLERY_KEY"}
    without = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert without.returncode != 0 and REFUSED in without.stdout + without.stderr, without
    assert "joe" not in _who(keyed.http())
    with_key = subprocess.run(command, env=dict(env, FACE_GALLERY_KEY=BARE_KEY),
                              capture_output=True, text=True, timeout=120)
    assert with_key.returncode == 0, with_key.stdout + with_key.stderr
    assert "joe" in _who(keyed.http())
    forget(keyed.http(), "joe", **_key(OPS_KEY))


def _changes(client, key: str, **parameters) -> list[dict]:
    doc = list_people(client, parameters={"gallery_key": key, "changes": True, **parameters})
    return doc["changes"]


def _record_checks(server, photos) -> None:
    """ENROLL with one key, FORGET with another, then LIST's record: both, newest first, each
    with its key's label and never a key; its limit and bad values refused alone."""
    client, grpc = server.http(), server.grpc()
    [ack] = _enroll(client, photos, "obama3.jpg", "rec", **_key(OPS_KEY))
    assert ack["enrolled"]["added"] is True, ack
    forget(grpc, "rec", **_key(BARE_KEY))
    newest = _changes(client, OPS_KEY, changes_limit=2)
    got = [(c["operation"], c["name"], c["count"], c["key"]) for c in newest]
    assert got == [("forget", "rec", 1, "default"), ("enroll", "rec", 1, "ops")], newest
    assert newest[0]["change"] > newest[1]["change"] and newest[0]["at_ms"] >= newest[1]["at_ms"]
    assert len(_changes(grpc, BARE_KEY)) >= 2  # the default limit: up to 100
    for c in (client, grpc):
        for bad in (0, 10_001, "5", 2.5):
            expect_invalid(lambda: _changes(c, OPS_KEY, changes_limit=bad), "changes_limit")  # noqa: B023
        expect_invalid(lambda: list_people(c, parameters={"gallery_key": OPS_KEY, "changes_limit": 3}),  # noqa: B023
                       "changes_limit")
        expect_invalid(lambda: list_people(c, parameters={"changes": True}), REFUSED)  # noqa: B023
    plain = list_people(client, **_key(OPS_KEY))
    assert "changes" not in plain, "only when asked"


def test_the_record_of_changes(keyed, photos):
    _record_checks(keyed, photos)


def test_the_record_of_changes_in_postgresql(postgres, start_server, photos, tmp_path):
    keys = _key_file(tmp_path, f"ops:{OPS_KEY}\n{BARE_KEY}\n")
    server = start_server(
        params={"gallery_store": "postgres", "gallery_name": "keys",
                "gallery_key_file": str(keys)},
        env={"FACE_GALLERY_DSN": postgres.dsn(SUITE_DB, "keys")},
    )
    _record_checks(server, photos)
