"""Keys with roles (`gallery_key_file`), through the real server: every request needs the
request parameter `gallery_key` (or a header Triton forwards as it) with a key that holds the roles
it uses: `recognize` (photos and frames answered with names), `search` (EMBEDDING, `top_k` above 1,
a threshold above the model's, raw embeddings), `manage` (ENROLL, FORGET, LIST). A missing, wrong
or role-less key is refused for that request alone with one message, changes nothing and is
counted by reason; a sequence's frames hold its START's key; a rate per key label; a key file that
could be wrong fails the load. No key is shown in a log, an error, an answer or the model config.
The keys do not depend on the engine: the ONNX engine's server serves them all."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image
from tritonclient.utils import InferenceServerException

from face_client import (
    SEQUENCE_MODEL, UNAVAILABLE, encoded_tensors, expect_error, expect_invalid, forget,
    forget_tensors, infer, list_people, list_tensors, names, people, sequence_request,
)
from environment import REPO_ROOT
from postgres_server import SUITE_DB
from triton_server import TritonServer

pytestmark = pytest.mark.engines("onnx")

OPS_KEY = "k-ops-7f3a91c2e4b5d6a7"  # ops: every role (a two-field line)
CAM_KEY = "k-cam-1b2c3d4e5f6a7b8c"  # cam: recognize
FINDER_KEY = "k-find-9e8d7c6b5a4f3e2d"  # finder: recognize, search
AUDIT_KEY = "k-audit-5a6b7c8d9e0f1a2b"  # audit: manage
WRONG_KEY = "k-wrong-0c4f2a9e8b7d6c5a"
SECRETS = (OPS_KEY, CAM_KEY, FINDER_KEY, AUDIT_KEY, WRONG_KEY)
KEY_FILE = (f"# who may do what\nops:{OPS_KEY}\ncam:recognize:{CAM_KEY}\n"
            f"finder: recognize, search :{FINDER_KEY}\naudit:manage:{AUDIT_KEY}\n")
REFUSED = "gallery_key"
ADMIN = "admin-9d2e"
# As docs/gallery.md shows it: the key forwarded from a header, Triton's repository API restricted.
FORWARD = (
    "--http-header-forward-pattern=gallery_key", "--grpc-header-forward-pattern=gallery_key",
    f"--http-restricted-api=model-repository,shared-memory:admin-key={ADMIN}",
    f"--grpc-restricted-protocol=model-repository,shared-memory:admin-key={ADMIN}",
)


def _key_file(folder, text: str, mode: int = 0o600, name: str = "gallery.keys"):
    path = folder / name
    path.write_text(text)
    path.chmod(mode)
    return path


def _add_param(key: str, value: str) -> tuple[str, str]:
    """A config edit that adds a model parameter (before the sample's `engine`)."""
    line = f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'
    return (r'(?m)^(parameters \{ key: "engine")', line + "\n\\g<1>")


@pytest.fixture(scope="module")
def keyed(start_module_server, tmp_path_factory):
    keys = _key_file(tmp_path_factory.mktemp("keys"), KEY_FILE)
    return start_module_server(
        params={"gallery_key_file": str(keys)}, metrics=True, extra_args=FORWARD,
        more_models=(SEQUENCE_MODEL,),
    )


def _key(value, **parameters) -> dict:
    return {"parameters": {"gallery_key": value, **parameters}}


def _enroll(client, photos, photo: str, name: str, **options) -> list[dict]:
    return infer(client, encoded_tensors([photos.bytes(photo)], name), **options)


def _who(client) -> list[str]:
    return sorted(name for name, _, _ in people(list_people(client, **_key(OPS_KEY))))


def _refusals(server) -> dict[str, float]:
    return {reason: server.metric("face_key_refusals", model="face", reason=reason) or 0.0
            for reason in ("no_key", "wrong_key", "role", "rate")}


def _kinds(photos) -> list[tuple[str, dict, dict, str, str]]:
    """Every kind of request: (what, tensors, parameters, a key without its role, the right
    key). ENROLL and FORGET of `mallory`, whom the gallery never holds after the test."""
    photo = encoded_tensors([photos.bytes("obama2.jpg")])
    vector = np.full((1, 512), 1 / np.sqrt(512), np.float32)
    return [
        ("recognize", photo, {}, AUDIT_KEY, CAM_KEY),
        ("detect_only", photo, {"detect_only": True}, AUDIT_KEY, CAM_KEY),
        ("top_k 1", photo, {"top_k": 1}, CAM_KEY, FINDER_KEY),
        ("REFERENCE", {**photo, "REFERENCE": vector}, {}, CAM_KEY, FINDER_KEY),
        ("EMBEDDING", {"EMBEDDING": vector}, {}, CAM_KEY, FINDER_KEY),
        ("top_k 100", photo, {"top_k": 100}, CAM_KEY, FINDER_KEY),
        ("match_threshold 2", photo, {"match_threshold": 2.0}, CAM_KEY, FINDER_KEY),
        ("return_embeddings", photo, {"return_embeddings": True}, CAM_KEY, FINDER_KEY),
        ("ENROLL", encoded_tensors([photos.bytes("obama2.jpg")], "mallory"), {}, FINDER_KEY, AUDIT_KEY),
        ("FORGET", forget_tensors("mallory"), {}, FINDER_KEY, AUDIT_KEY),
        ("LIST", list_tensors(), {}, CAM_KEY, AUDIT_KEY),
        ("LIST changes", list_tensors(), {"changes": True}, FINDER_KEY, OPS_KEY),
    ]


def test_every_request_needs_a_key_with_its_role(keyed, photos):
    """No key, a wrong key, a key without the role: refused with one message, nothing changed,
    each counted by its reason; the right key: served."""
    before, counted = _who(keyed.http()), _refusals(keyed)
    assert before == ["biden", "obama"], before
    refused = {"no_key": 0, "wrong_key": 0, "role": 0}
    for c in (keyed.http(), keyed.grpc()):
        for what, tensors, parameters, lacking, right in _kinds(photos):
            messages = []
            for reason, key in (("no_key", None), ("wrong_key", WRONG_KEY), ("wrong_key", 7),
                                ("role", lacking)):
                options = {**parameters, **({} if key is None else {"gallery_key": key})}
                error = expect_invalid(lambda: infer(c, tensors, parameters=options), REFUSED)  # noqa: B023
                messages.append(error.message())
                refused[reason] += 1
            assert len(set(messages)) == 1, f"{what}: the messages differ: {messages}"
            docs = infer(c, tensors, parameters={**parameters, "gallery_key": right})
            assert docs, what
    assert _who(keyed.http()) == before, "ENROLL then FORGET leave the gallery as it was"
    now = _refusals(keyed)
    assert {r: now[r] - counted[r] for r in refused} == refused, (counted, now)


def test_a_recognize_key_cannot_sweep_the_gallery(keyed, photos):
    """EMBEDDING, top_k 100 and a threshold of 2 with a `recognize` key: refused; with `search`:
    served, every distance rounded to distance_decimals (2)."""
    client = keyed.http()
    [mine] = infer(client, encoded_tensors([photos.bytes("obama2.jpg")]),
                   parameters={"gallery_key": FINDER_KEY, "return_embeddings": True})
    vector = np.asarray([mine["faces"][0]["embedding"]], np.float32)
    sweep = {"top_k": 100, "match_threshold": 2.0}
    expect_invalid(lambda: infer(client, {"EMBEDDING": vector}, **_key(CAM_KEY, **sweep)),
                   "role 'search'")
    [doc] = infer(client, {"EMBEDDING": vector}, **_key(FINDER_KEY, **sweep))
    candidates = doc["faces"][0]["candidates"]
    assert [c["name"] for c in candidates] == ["obama", "biden"], candidates
    assert doc["faces"][0]["name"] == "obama"
    for distance in [c["distance"] for c in candidates] + [doc["faces"][0]["distance"]]:
        assert distance == round(distance, 2), doc
    # A recognize key is named the face, at the model's threshold.
    [plain] = infer(client, encoded_tensors([photos.bytes("obama2.jpg")]), **_key(CAM_KEY))
    assert names(plain) == ["obama"] and "embedding" not in plain["faces"][0], plain


def _frame(client, sequence_id, photos, key=None, start=False, end=False, tensors=None):
    tensors = tensors if tensors is not None else encoded_tensors([photos.bytes("obama2.jpg")])
    options = {} if key is None else {"parameters": {"gallery_key": key}}
    [doc] = infer(client, tensors, SEQUENCE_MODEL, **sequence_request(sequence_id, start, end),
                  **options)
    return doc


def _followed(client, frame: dict, threshold: float, sequence_id: int) -> tuple[dict, dict]:
    """A recognize key's sequence of two frames of one photo (the second's face found again by
    its last box, embedded again only when its distance is near the threshold): each frame's
    face."""
    parameters = {"gallery_key": CAM_KEY, "match_threshold": threshold,
                  "detect_every": 1, "reidentify_every": 1000}
    docs = [infer(client, frame, SEQUENCE_MODEL, parameters=parameters,
                  **sequence_request(sequence_id, start=k == 0, end=k == 1))[0] for k in range(2)]
    return docs[0]["faces"][0], docs[1]["faces"][0]


def test_a_sequences_embedding_flag_tells_no_finer_distance_than_answers(keyed, photos):
    """A recognize key sweeps its threshold over frames of one photo saved at many JPEG
    qualities (distances apart by less than the answers' 2 decimals show): whether a followed
    face is embedded again (its distance within 10% of the threshold) is the same for every
    frame whose answer shows the same distance: the flag tells nothing finer."""
    client, ids = keyed.http(), iter(range(7000, 9000))
    rgb = Image.fromarray(photos.rgb("obama2.jpg"))
    frames = []
    for quality in range(40, 100, 4):
        out = io.BytesIO()
        rgb.save(out, "JPEG", quality=quality)
        frames.append(encoded_tensors([out.getvalue()]))
    shown = [_followed(client, f, 0.49, next(ids))[0]["distance"] for f in frames]
    assert None not in shown and len(set(shown)) <= 3, shown
    low, high = round(min(shown) / 1.12, 2), round(max(shown) / 0.88, 2)
    compared = 0
    for threshold in np.arange(low, min(high, 0.49) + 0.001, 0.01):
        flags: dict[float, set[bool]] = {}
        for frame in frames:
            first, followed = _followed(client, frame, float(threshold), next(ids))
            assert followed["track"] == first["track"], followed
            flags.setdefault(first["distance"], set()).add(followed["embedded"])
        assert all(len(f) == 1 for f in flags.values()), (threshold, flags)
        compared += sum(len(f) for f in flags.values())
    assert compared >= 5, compared


def test_a_sequence_is_its_starts_keys(keyed, photos):
    """A live sequence is its START's key's: its frames and END bring that key; a frame without
    it or with another key is refused and the sequence goes on; another key's START cannot take
    the sequence over; a START without a key or the role is refused."""
    client = keyed.grpc()
    expect_invalid(lambda: _frame(client, 501, photos, start=True), REFUSED)
    expect_invalid(lambda: _frame(client, 501, photos, key=AUDIT_KEY, start=True), "role 'recognize'")
    first = _frame(client, 501, photos, key=CAM_KEY, start=True)
    assert names(first) == ["obama"], first
    assert names(_frame(client, 501, photos, key=CAM_KEY)) == ["obama"]
    for other in (None, OPS_KEY, FINDER_KEY, WRONG_KEY):
        expect_invalid(lambda: _frame(client, 501, photos, key=other), REFUSED)  # noqa: B023
    expect_invalid(lambda: _frame(client, 501, photos, key=FINDER_KEY, start=True), REFUSED)
    last = _frame(client, 501, photos, key=CAM_KEY, end=True, tensors={})
    assert last["summary"]["frames"] == 2, last


def test_a_rate_per_key_label(start_server, tmp_path, photos):
    """key_rate 2/s with bursts of 3: the fourth LIST at once is refused UNAVAILABLE with when to
    retry, counted, and changes nothing; another label has its own allowance; after the hint, the
    label is served again."""
    keys = _key_file(tmp_path, KEY_FILE)
    server = start_server(params={"gallery_key_file": str(keys), "key_rate": "2", "key_burst": "3"},
                          metrics=True)
    client = server.http()
    for _ in range(3):
        list_people(client, **_key(AUDIT_KEY))
    error = expect_error(lambda: list_people(client, **_key(AUDIT_KEY)), UNAVAILABLE, "retry in")
    text = error.message() or str(error)
    wait = float(text.split("retry in ")[1].split(" s")[0])
    assert 0 < wait <= 0.5, text
    assert "key 'audit'" in text and AUDIT_KEY not in text, text
    assert server.metric("face_key_refusals", model="face", reason="rate") == 1
    list_people(client, **_key(OPS_KEY))  # another label
    time.sleep(wait + 0.05)
    assert list_people(client, **_key(AUDIT_KEY))["gallery_size"] == 2
    assert "each at most 2/s (bursts of 3)" in server.log_text()


def test_every_key_of_the_file_works_and_the_header(keyed, photos):
    client, grpc = keyed.http(), keyed.grpc()
    [ack] = _enroll(client, photos, "obama3.jpg", "barack", **_key(AUDIT_KEY))
    assert ack["enrolled"]["added"] is True, ack
    assert "barack" in _who(grpc)
    [gone] = forget(grpc, "barack", **_key(OPS_KEY))
    assert gone["forgotten"]["name"] == "barack", gone
    listed = list_people(client, headers={"gallery_key": AUDIT_KEY})
    assert {name for name, _, _ in people(listed)} == {"obama", "biden"}, listed
    listed = list_people(grpc, headers={"gallery_key": OPS_KEY})
    assert {name for name, _, _ in people(listed)} == {"obama", "biden"}, listed
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
    assert ("every request needs a key of" in log and "ops (recognize,search,manage), "
            "cam (recognize), finder (recognize,search), audit (manage)" in log), log
    for text in (*errors, *answers, config, log, keyed.metrics_text()):
        for secret in (*SECRETS, OPS_KEY[:-1]):
            assert secret not in text, f"{secret} shown in: {text[:300]}"


def test_an_open_model_warns_at_load(start_server):
    log = start_server().log_text()
    assert "no gallery_key_file: any client may recognize, search, ENROLL, FORGET and LIST" in log


BAD_FILES = [
    ("no-key", "# only a comment\n\n", 0o600, "no key in the file"),
    ("bare", f"{OPS_KEY}\n", 0o600, "line 1: expected label:roles:key or label:key"),
    ("short", "ops:k-21-characters-xyz\n", 0o600,
     "the key of 'ops' holds fewer than 128 bits (at least 22 base64 characters, or 32 hex digits); "
     "make one with `openssl rand -base64 24`"),
    ("near-roles", f"ops:{OPS_KEY}\nui:recognize|search\n", 0o600,
     "line 2: the key of 'ui' holds fewer than 128 bits"),
    ("role-words", "ui:recognize,search,manage,recognise,search\n", 0o600,
     "line 1: the key of 'ui' is made of role words and separators"),
    ("same-key", f"ops:{OPS_KEY}\ncam:recognize:{OPS_KEY}\n", 0o600, "line 2: the same key as on line 1"),
    ("same-label", f"ops:{OPS_KEY}\n\nops:{CAM_KEY}\n", 0o600, "line 3: the label 'ops' as on line 1"),
    ("role", f"cam:recognise:{CAM_KEY}\n", 0o600, "line 1: an unknown role"),
    ("roles-no-key", f"ops:{OPS_KEY}\nui:recognize,search\n", 0o600,
     "line 2: the key of 'ui' is missing"),
    ("key-in-roles", f"ui:{CAM_KEY}:recognize\n", 0o600, "line 1: an unknown role"),
    ("readable", f"ops:{OPS_KEY}\n", 0o644, "group or others may use it (mode 644): chmod 600"),
    ("missing", None, 0o600, "cannot be read"),
]


@pytest.mark.parametrize("text, mode, needle", [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES])
def test_a_key_file_that_could_be_wrong_fails_the_load(suite_env, tmp_path, engine, text, mode, needle):
    keys = tmp_path / "absent.keys" if text is None else _key_file(tmp_path, text, mode)
    server = TritonServer(suite_env, tmp_path / "repo", engine=engine.name,
                          params={"gallery_key_file": str(keys)})
    log = server.start_expecting_exit()
    assert needle in log and f"gallery_key_file {keys}" in log, log
    for secret in SECRETS:
        assert secret not in log, secret


def test_models_on_one_store_share_its_keys(suite_env, tmp_path, engine):
    """`face_too` keeps its gallery in `face`'s folder with another key file: one of the two
    loads is refused, naming both models and both files."""
    a, b = _key_file(tmp_path, KEY_FILE, name="a.keys"), _key_file(tmp_path, KEY_FILE, name="b.keys")
    root = tmp_path / "repo"
    shared = root / "models" / "face" / "gallery"
    server = TritonServer(
        suite_env, root, engine=engine.name,
        config_edits=[_add_param("gallery_key_file", str(a))],
        copies={"face_too": [_add_param("gallery_key_file", str(b)),
                             (r'(key: "gallery_dir"\s+value: \{ string_value: ")[^"]*',
                              rf"\g<1>{shared}")]},
    )
    log = server.start_expecting_exit()
    assert "share one gallery store but not its keys" in log, log
    assert f"gallery_key_file {a}" in log and f"gallery_key_file {b}" in log, log
    assert "'face'" in log and "'face_too'" in log, log


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
    with_key = subprocess.run(command, env=dict(env, FACE_GALLERY_KEY=OPS_KEY),
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
    forget(grpc, "rec", **_key(AUDIT_KEY))
    newest = _changes(client, OPS_KEY, changes_limit=2)
    got = [(c["operation"], c["name"], c["count"], c["key"]) for c in newest]
    assert got == [("forget", "rec", 1, "audit"), ("enroll", "rec", 1, "ops")], newest
    assert newest[0]["change"] > newest[1]["change"] and newest[0]["at_ms"] >= newest[1]["at_ms"]
    assert len(_changes(grpc, AUDIT_KEY)) >= 2  # the default limit: up to 100
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
    keys = _key_file(tmp_path, KEY_FILE)
    server = start_server(
        params={"gallery_store": "postgres", "gallery_name": "keys",
                "gallery_key_file": str(keys)},
        env={"FACE_GALLERY_DSN": postgres.dsn(SUITE_DB, "keys")},
    )
    _record_checks(server, photos)
