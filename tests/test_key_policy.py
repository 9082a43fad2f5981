"""Keys that hold, through the real server: a `recognize` key learns no distance more precisely
than answers show it (its threshold is compared on the answers' grid; REFERENCE is `search`'s;
every distance of every answer rounded); one store, one policy (the same store however its path
or DSN is spelt, the same keys, decimals, rate and threshold; no response cache with keys); the
rate counts work and belongs to the store (shared by its models, not refilled by a reload)."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from face_client import (
    SEQUENCE_MODEL, UNAVAILABLE, encoded_tensors, expect_error, expect_invalid, infer, names,
    sequence_request,
)
from postgres_server import SUITE_DB
from test_gallery_keys import (
    CAM_KEY, FINDER_KEY, KEY_FILE, _add_param, _key, _key_file,
)
from triton_server import TritonServer

pytestmark = pytest.mark.engines("onnx")

DECIMALS = 2  # the sample models' distance_decimals (the default)
EXPLICIT = "--model-control-mode=explicit"
PHOTOS = ("obama2.jpg", "obama3.jpg", "obama_partial_face.jpg")


@pytest.fixture(scope="module")
def keyed(start_module_server, tmp_path_factory):
    keys = _key_file(tmp_path_factory.mktemp("policy_keys"), KEY_FILE)
    return start_module_server(params={"gallery_key_file": str(keys)},
                               more_models=(SEQUENCE_MODEL,))


def _distances(doc) -> list[float]:
    """Every number under a key that names a distance, anywhere in `doc`."""
    if isinstance(doc, dict):
        return [x for k, v in doc.items() for x in
                ([v] if "distance" in k and isinstance(v, (int, float)) else _distances(v))]
    if isinstance(doc, list):
        return [x for v in doc for x in _distances(v)]
    return []


def _assert_rounded(doc) -> int:
    found = _distances(doc)
    for d in found:
        assert d == round(d, DECIMALS), doc
    return len(found)


def _named_at(client, photo: bytes, key: str, threshold: float) -> tuple[tuple[str, ...], float]:
    [doc] = infer(client, encoded_tensors([photo]), **_key(key, match_threshold=threshold))
    return tuple(names(doc)), doc["faces"][0]["distance"]


def test_a_recognize_keys_threshold_is_on_the_answers_grid(keyed, photos):
    """Thresholds that round to a face's shown distance give one answer for a `recognize` key
    (a bisection learns nothing finer); one step below, unknown. A `search` key's thresholds
    are exact: within the same step, its answers change where the exact distance lies."""
    client = keyed.http()
    finer = 0
    for photo in map(photos.bytes, PHOTOS):
        [doc] = infer(client, encoded_tensors([photo]), **_key(CAM_KEY))
        shown = doc["faces"][0]["distance"]
        assert names(doc) == ["obama"] and 0.05 < shown < 0.45, doc
        cell = [shown + k * 10 ** -DECIMALS for k in (-0.49, -0.2, 0.0, 0.2, 0.49)]
        answers = {_named_at(client, photo, CAM_KEY, t) for t in cell}
        assert answers == {(("obama",), shown)}, (shown, answers)
        below = _named_at(client, photo, CAM_KEY, shown - 10 ** -DECIMALS)
        assert below == (("unknown",), shown), below
        exact = {_named_at(client, photo, FINDER_KEY, t)[0] for t in cell}
        finer += len(exact) > 1
    assert finer > 0, "a search key's exact threshold splits a step for some face"


def test_reference_is_search_and_every_distance_is_rounded(keyed, photos):
    client = keyed.http()
    photo = encoded_tensors([photos.bytes("obama2.jpg")])
    [mine] = infer(client, photo, **_key(FINDER_KEY, return_embeddings=True))
    vector = np.asarray([mine["faces"][0]["embedding"]], np.float32)
    with_reference = {**photo, "REFERENCE": vector}
    expect_invalid(lambda: infer(client, with_reference, **_key(CAM_KEY)), "role 'search'",
                   "REFERENCE")
    [verified] = infer(client, with_reference, **_key(FINDER_KEY))
    assert verified["faces"][0]["verification"]["same_person"] is True, verified
    counted = _assert_rounded(verified)
    [listed] = infer(client, {"EMBEDDING": vector + 0.01}, **_key(FINDER_KEY, top_k=2))
    counted += _assert_rounded(listed)
    # A sequence's frames and its summary, with a recognize key.
    for start, end in ((True, False), (False, False), (False, True)):
        [doc] = infer(client, photo, SEQUENCE_MODEL, **sequence_request(733, start, end),
                      **_key(CAM_KEY))
        counted += _assert_rounded(doc)
    assert doc["summary"]["people"], doc
    assert counted >= 7, "the scan found the distances it checks"


def _policy_server(suite_env, root, copies: dict, extra=()) -> TritonServer:
    return TritonServer(suite_env, root, engine="onnx", extra_args=(EXPLICIT, *extra),
                        config_edits=copies.pop("face"), copies=copies)


def _load_error(client, model: str) -> str:
    with pytest.raises(InferenceServerException) as info:
        client.load_model(model)
    return info.value.message() or str(info.value)


def _gallery_at(path: str) -> tuple[str, str]:
    return (r'(key: "gallery_dir"\s+value: \{ string_value: ")[^"]*', rf"\g<1>{path}")


def test_one_store_one_policy(suite_env, tmp_path):
    """`face` holds its folder with keys A; every other model on that folder (a relative path,
    a symlink) with other keys, other decimals, another rate or another threshold is refused,
    naming both models and the setting; the same policy loads; a response cache with keys is
    refused."""
    a = _key_file(tmp_path, KEY_FILE, name="a.keys")
    b = _key_file(tmp_path, KEY_FILE, name="b.keys")
    root = tmp_path / "repo"
    shared = root / "models" / "face" / "gallery"
    (tmp_path / "link").symlink_to(shared)
    keys_a = _add_param("gallery_key_file", str(a))
    relative = _gallery_at("../face/gallery")
    copies = {
        "face": [keys_a],
        "relative": [_add_param("gallery_key_file", str(b)), relative],
        "symlink": [_add_param("gallery_key_file", str(b)), _gallery_at(str(tmp_path / "link"))],
        "decimals": [keys_a, relative, _add_param("distance_decimals", "4")],
        "rate": [keys_a, relative, _add_param("key_rate", "5")],
        "threshold": [keys_a, _gallery_at(str(tmp_path / "link")),
                      (r'(key: "match_threshold"\s+value: \{ string_value: ")[^"]*', r"\g<1>0.7")],
        "same": [keys_a, relative],
        "cache": [keys_a, (r"(?m)^(name: .*)$", "\\g<1>\nresponse_cache { enable: true }")],
    }
    server = _policy_server(suite_env, root, copies)
    with server:
        client = server.http()
        client.load_model("face")
        expected = {
            "relative": ("not its keys", f"gallery_key_file {a}", f"gallery_key_file {b}"),
            "symlink": ("not its keys", f"gallery_key_file {b}"),
            "decimals": ("not its distance_decimals", "'face' has distance_decimals 2",
                         "'decimals' has distance_decimals 4"),
            "rate": ("not its key rate", "'face' has no key_rate", "key_rate 5"),
            "threshold": ("not its match_threshold", "'threshold' has match_threshold 0.7"),
            "cache": ("response_cache", "turn the model's response_cache off"),
        }
        for model, needles in expected.items():
            error = _load_error(client, model)
            for needle in needles:
                assert needle in error, (model, needle, error)
            if model != "cache":
                assert "'face'" in error and f"'{model}'" in error, error
            assert "k-" not in error, "no key text in a message"
        client.load_model("same")
        assert client.is_model_ready("same") and client.is_model_ready("face")


def test_two_spellings_of_one_postgresql_gallery_are_one_store(postgres, suite_env, tmp_path):
    a = _key_file(tmp_path, KEY_FILE, name="a.keys")
    b = _key_file(tmp_path, KEY_FILE, name="b.keys")
    store = [_add_param("gallery_store", "postgres"), _add_param("gallery_name", "policy")]
    copies = {
        "face": [*store, _add_param("gallery_key_file", str(a))],
        "keyword": [*store, _add_param("gallery_key_file", str(b)),
                    _add_param("gallery_dsn_env", "FACE_OTHER_DSN")],
    }
    server = _policy_server(suite_env, tmp_path / "repo", copies)
    server.process_env.update({
        "FACE_GALLERY_DSN": postgres.dsn(SUITE_DB, "policy"),
        "FACE_OTHER_DSN": postgres.dsn(SUITE_DB, "policy", form="keyword"),
    })
    with server:
        client = server.http()
        client.load_model("face")
        error = _load_error(client, "keyword")
        assert "share one gallery store but not its keys" in error, error
        assert "postgresql://" not in error and "host=" not in error, "no DSN in a message"


def test_the_rate_counts_work_on_the_store_across_a_reload(suite_env, tmp_path, photos):
    """key_rate 0.01/s (nothing comes back during the test), bursts of 10: 8 images cost 8; the
    copy on the same store shares the label's allowance; a reload of `face` does not refill it;
    a request costing more than the burst (6 images x top_k 2) is refused as its own error."""
    keys = _add_param("gallery_key_file", str(_key_file(tmp_path, KEY_FILE)))
    rate = [keys, _add_param("key_rate", "0.01"), _add_param("key_burst", "10")]
    root = tmp_path / "repo"
    copies = {"face": rate, "face_too": [*rate, _gallery_at(str(root / "models" / "face" / "gallery"))]}
    server = _policy_server(suite_env, root, copies)
    images = lambda n: encoded_tensors([photos.bytes("obama2.jpg")] * n)  # noqa: E731
    over = "over its rate"
    with server:
        client = server.http()
        for model in ("face", "face_too"):
            client.load_model(model)
        assert len(infer(client, images(8), **_key(CAM_KEY))) == 8
        expect_error(lambda: infer(client, images(3), "face_too", **_key(CAM_KEY)), UNAVAILABLE, over)
        assert len(infer(client, images(2), "face_too", **_key(CAM_KEY))) == 2
        client.load_model("face")  # a reload
        expect_error(lambda: infer(client, images(1), **_key(CAM_KEY)), UNAVAILABLE, over)
        expect_invalid(lambda: infer(client, images(6), **_key(FINDER_KEY, top_k=2)),
                       "costs 12", "key_burst 10")
        assert len(infer(client, images(5), **_key(FINDER_KEY, top_k=2))) == 5


def test_the_rate_counts_the_faces_matched(suite_env, tmp_path, photos):
    """A collage costs one token per face matched, times top_k, charged once its faces are found
    and before any is matched: group5.jpg (5 faces) costs 5 of a burst of 12; with top_k 3 it
    would cost 15, more than the burst, and is refused as its own error (its admission's 3 are
    spent: the detector ran); then the collage no longer fits what is left and is refused as
    over the rate, while a one-face photo still passes."""
    keys = _add_param("gallery_key_file", str(_key_file(tmp_path, KEY_FILE)))
    rate = [keys, _add_param("key_rate", "0.01"), _add_param("key_burst", "12")]
    server = _policy_server(suite_env, tmp_path / "repo", {"face": rate})
    group = encoded_tensors([photos.bytes("group5.jpg")])
    with server:
        client = server.http()
        client.load_model("face")
        [doc] = infer(client, group, **_key(FINDER_KEY))
        assert len(doc["faces"]) == 5, doc
        expect_invalid(lambda: infer(client, group, **_key(FINDER_KEY, top_k=3)),
                       "costs 15", "key_burst 12", "per face matched")
        expect_error(lambda: infer(client, group, **_key(FINDER_KEY)), UNAVAILABLE, "over its rate")
        [one] = infer(client, encoded_tensors([photos.bytes("obama2.jpg")]), **_key(FINDER_KEY))
        assert names(one) == ["obama"], one


def test_the_fleet_shares_one_rate_on_postgresql(postgres, suite_env, tmp_path, photos):
    """Two servers on one PostgreSQL gallery, key_rate 0.01/s (nothing comes back during the
    test) and bursts of 10: a key spends its burst across both (6 images on one, then 4 on the
    other; a fifth is refused there, and on the first), not 10 on each, as a client picking its
    server with X-Sequence-Id would otherwise get."""
    keys = _add_param("gallery_key_file", str(_key_file(tmp_path, KEY_FILE)))
    edits = [keys, _add_param("key_rate", "0.01"), _add_param("key_burst", "10"),
             _add_param("gallery_store", "postgres"), _add_param("gallery_name", "fleet_rate")]
    servers = [_policy_server(suite_env, tmp_path / f"repo{i}", {"face": list(edits)})
               for i in (0, 1)]
    images = lambda n: encoded_tensors([photos.bytes("obama2.jpg")] * n)  # noqa: E731
    over = "over its rate"
    for i, server in enumerate(servers):
        server.process_env["FACE_GALLERY_DSN"] = postgres.dsn(SUITE_DB, f"rate{i}")
    with servers[0] as a, servers[1] as b:
        first, second = a.http(), b.http()
        for client in (first, second):
            client.load_model("face")
        assert "shared by every server of the gallery" in a.log_text(), a.log_tail()
        assert len(infer(first, images(6), **_key(CAM_KEY))) == 6
        expect_error(lambda: infer(second, images(5), **_key(CAM_KEY)), UNAVAILABLE, over)
        assert len(infer(second, images(4), **_key(CAM_KEY))) == 4
        for client in (first, second):
            expect_error(lambda: infer(client, images(1), **_key(CAM_KEY)), UNAVAILABLE, over)
    [(label, tat)] = postgres.sql(
        "SELECT label, tat FROM triton_face.key_allowances WHERE gallery = 'fleet_rate'", SUITE_DB)
    assert label == "cam" and float(tat) > 0, (label, tat)
