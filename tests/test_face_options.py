"""The face API's request options through the real server, both engines, HTTP and gRPC:
detect_only, min_face_size (request and model parameter), max_faces, return_crops, timings, and
the EMBEDDING and REFERENCE inputs; every bad value and every combination that makes no sense is
INVALID_ARG for that request alone, with good requests of the same moment answered."""

from __future__ import annotations

import base64
import io
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from environment import REPO_ROOT
from face_client import (
    assert_serving, collect, encoded_tensors, expect_invalid, infer, list_tensors,
    model_statistics, sequence_infer, submit, success_count,
)


def _doc(client, photos, photo: str, **parameters) -> dict:
    [doc] = infer(client, encoded_tensors([photos.bytes(photo)]), parameters=parameters or None)
    return doc


def _embedding(client, photos, photo: str) -> np.ndarray:
    [face] = _doc(client, photos, photo, return_embeddings=True)["faces"]
    return np.asarray(face["embedding"], np.float32)


def _vectors(*rows: np.ndarray) -> np.ndarray:
    """An FP32 [B, L] tensor of embeddings."""
    return np.stack([np.asarray(r, np.float32) for r in rows])


def _side(face: dict) -> int:
    box = face["box"]
    return min(box["right"] - box["left"], box["bottom"] - box["top"])


def _area(face: dict) -> int:
    box = face["box"]
    return (box["right"] - box["left"]) * (box["bottom"] - box["top"])


def test_detect_only_gives_the_boxes_of_a_full_request(client, photos, engine):
    full = _doc(client, photos, "group5.jpg")
    quick = _doc(client, photos, "group5.jpg", detect_only=True)
    assert len(quick["faces"]) == len(full["faces"]) >= 4, full
    for a, b in zip(full["faces"], quick["faces"]):
        assert b["box"] == a["box"] and b["score"] == a["score"], (a, b)
        assert np.allclose(b["landmarks"], a["landmarks"], atol=1e-3), (a, b)
        assert not {"name", "distance", "embedding", "candidates"} & set(b), b


def test_min_face_size_drops_the_small_faces(client, photos, engine):
    full = _doc(client, photos, "group5.jpg")["faces"]
    sides = sorted(_side(f) for f in full)
    assert sides[0] < sides[-1], f"group5.jpg's faces are all of one size: {sides}"
    cut = (sides[0] + sides[-1]) / 2
    kept = _doc(client, photos, "group5.jpg", min_face_size=cut)["faces"]
    assert [f["box"] for f in kept] == [f["box"] for f in full if _side(f) >= cut]
    assert 0 < len(kept) < len(full)
    # An integer works as well as a number; 0 keeps everything.
    assert len(_doc(client, photos, "group5.jpg", min_face_size=0)["faces"]) == len(full)
    assert len(_doc(client, photos, "group5.jpg", min_face_size=int(cut) + 1)["faces"]) <= len(kept)


def test_the_model_parameter_min_face_size_is_the_default(start_server, photos, engine):
    client = start_server(params={"min_face_size": "10000"}).grpc()
    assert _doc(client, photos, "group5.jpg")["faces"] == []
    assert len(_doc(client, photos, "group5.jpg", min_face_size=0)["faces"]) >= 4


def test_max_faces_keeps_the_largest_first(client, photos, engine):
    full = _doc(client, photos, "group5.jpg")["faces"]
    largest = sorted(full, key=_area, reverse=True)
    for n in (1, 2):
        kept = _doc(client, photos, "group5.jpg", max_faces=n)["faces"]
        assert [f["box"] for f in kept] == [f["box"] for f in largest[:n]]
        assert [f["name"] for f in kept] == [f["name"] for f in largest[:n]]
    [one] = _doc(client, photos, "obama.jpg", max_faces=3)["faces"]
    assert one["name"] == "obama"


def test_max_faces_under_the_hard_limit(start_server, photos, engine):
    client = start_server(params={"max_faces_per_image": "2"}).http()
    expect_invalid(lambda: _doc(client, photos, "group5.jpg"), "max_faces_per_image")
    assert len(_doc(client, photos, "group5.jpg", max_faces=2)["faces"]) == 2
    expect_invalid(lambda: _doc(client, photos, "group5.jpg", max_faces=3), "max_faces", "1 to 2")


def test_a_crop_is_the_aligned_face_of_the_documented_size(client, photos, engine):
    [face] = _doc(client, photos, "obama.jpg", return_crops=True)["faces"]
    png = base64.b64decode(face["crop"], validate=True)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    crop = Image.open(io.BytesIO(png))
    assert crop.size == (engine.crop_side, engine.crop_side) and crop.mode == "RGB"
    # It shows the face: the model finds obama in it (padded, as a face photo would be).
    framed = Image.new("RGB", (engine.crop_side * 3, engine.crop_side * 3), (128, 128, 128))
    framed.paste(crop, (engine.crop_side, engine.crop_side))
    out = io.BytesIO()
    framed.resize((framed.width * 2, framed.height * 2)).save(out, format="PNG")
    [doc] = infer(client, encoded_tensors([out.getvalue()]))
    assert [f["name"] for f in doc["faces"]] == ["obama"], doc
    # With detect_only too (the crop needs landmarks, not the embedder).
    [quick] = _doc(client, photos, "obama.jpg", return_crops=True, detect_only=True)["faces"]
    assert quick["crop"] == face["crop"]
    assert "crop" not in _doc(client, photos, "obama.jpg")["faces"][0]


def test_timings_add_up_to_no_more_than_the_compute_time(start_server, photos, engine):
    client = start_server().http()
    doc = _doc(client, photos, "obama_640x480.jpg", timings=True)
    t = doc["timings_ms"]
    assert set(t) == {"decode", "detection", "landmarks", "embedding", "matching"}
    assert t["detection"] > 0 and t["embedding"] > 0 and t["decode"] > 0, t
    success_count(client, at_least=1)  # counted a moment after its answer was sent
    stats = model_statistics(client)["inference_stats"]
    compute_ms = sum(int(stats[k]["ns"]) for k in ("compute_input", "compute_infer",
                                                   "compute_output")) / 1e6
    assert sum(t.values()) <= compute_ms, (t, compute_ms)
    assert "timings_ms" not in _doc(client, photos, "obama.jpg")
    quick = _doc(client, photos, "obama.jpg", timings=True, detect_only=True)["timings_ms"]
    assert quick["matching"] == 0 and quick["embedding"] == 0, quick


def test_an_embedding_is_matched_as_its_face(client, photos, engine):
    mine = _embedding(client, photos, "obama.jpg")
    [doc] = infer(client, {"EMBEDDING": _vectors(mine)})
    [face] = doc["faces"]
    assert "image" not in doc and "box" not in face, doc
    assert face["name"] == "obama" and face["distance"] == pytest.approx(0.0, abs=1e-3)
    # Several at once, each its own document; top_k works as for a face.
    other = _embedding(client, photos, "biden.jpg")
    docs = infer(client, {"EMBEDDING": _vectors(other, mine)}, parameters={"top_k": 2})
    assert [d["faces"][0]["name"] for d in docs] == ["biden", "obama"]
    assert [c["name"] for c in docs[1]["faces"][0]["candidates"]] == ["obama", "biden"]


def test_a_reference_verifies_each_face(client, photos, engine):
    reference = _embedding(client, photos, "obama.jpg")
    tensors = encoded_tensors([photos.bytes("obama2.jpg"), photos.bytes("biden.jpg")])
    tensors["REFERENCE"] = _vectors(reference, reference)
    same, other = infer(client, tensors)
    [a], [b] = same["faces"], other["faces"]
    assert a["verification"]["same_person"] is True, a
    assert b["verification"]["same_person"] is False, b
    low, high = engine.same_person
    assert low <= a["verification"]["distance"] <= high, a
    assert b["verification"]["distance"] >= engine.different_people, b
    # One per image: each image against its own.
    tensors["REFERENCE"] = _vectors(reference, _embedding(client, photos, "biden.jpg"))
    same, other = infer(client, tensors)
    assert [d["faces"][0]["verification"]["same_person"] for d in (same, other)] == [True, True]
    # A stricter threshold decides for the request.
    [doc] = infer(client, {**encoded_tensors([photos.bytes("obama2.jpg")]),
                           "REFERENCE": _vectors(reference)},
                  parameters={"match_threshold": a["verification"]["distance"] / 2})
    assert doc["faces"][0]["verification"]["same_person"] is False


def _bad_requests(photos, engine, embedding) -> list[tuple[dict, dict, tuple[str, ...]]]:
    """(tensors, parameters, words the error names) of requests that must be refused."""
    photo = encoded_tensors([photos.bytes("obama.jpg")])
    enroll = encoded_tensors([photos.bytes("obama.jpg")], enroll="someone")
    short = embedding[:-1]
    nan, inf = embedding.copy(), embedding.copy()
    nan[3], inf[0] = np.nan, np.inf
    refs = _vectors(embedding, embedding, embedding)
    return [
        (photo, {"detect_only": "yes"}, ("detect_only",)),
        (photo, {"min_face_size": -1}, ("min_face_size",)),
        (photo, {"min_face_size": "big"}, ("min_face_size",)),
        (photo, {"max_faces": 0}, ("max_faces",)),
        (photo, {"max_faces": 1000}, ("max_faces",)),
        (photo, {"max_faces": 1.5}, ("max_faces",)),
        (photo, {"return_crops": 1}, ("return_crops",)),
        (photo, {"timings": "true"}, ("timings",)),
        (enroll, {"detect_only": True}, ("detect_only", "ENROLL")),
        (photo, {"detect_only": True, "return_embeddings": True}, ("return_embeddings",)),
        (photo, {"detect_only": True, "top_k": 2}, ("top_k",)),
        ({**photo, "REFERENCE": _vectors(embedding)}, {"detect_only": True}, ("REFERENCE",)),
        ({**photo, "EMBEDDING": _vectors(embedding)}, {}, ("EMBEDDING",)),
        ({"EMBEDDING": _vectors(embedding)}, {"detect_only": True}, ("detect_only",)),
        ({"EMBEDDING": _vectors(embedding)}, {"max_faces": 1}, ("max_faces",)),
        ({"EMBEDDING": _vectors(short)}, {}, (str(engine.embedding_len),)),
        ({"EMBEDDING": _vectors(nan)}, {}, ("nan", "finite")),
        ({"EMBEDDING": _vectors(inf)}, {}, ("inf", "finite")),
        ({"EMBEDDING": _vectors(np.zeros_like(embedding))}, {}, ("zeros",)),
        ({"EMBEDDING": _vectors(embedding).astype(np.float64)}, {}, ("FP32",)),
        ({**photo, "REFERENCE": _vectors(short)}, {}, (str(engine.embedding_len),)),
        # Triton checks the batch dimension itself.
        ({**photo, "REFERENCE": refs}, {}, ("batch size",)),
        ({**list_tensors(), "REFERENCE": _vectors(embedding)}, {}, ("REFERENCE", "alone")),
        ({**list_tensors(), "EMBEDDING": _vectors(embedding)}, {}, ("EMBEDDING", "alone")),
    ]


def test_bad_values_and_combinations_are_refused_alone(http, photos, probe, engine):
    embedding = _embedding(http, photos, "obama.jpg")
    bad = _bad_requests(photos, engine, embedding)
    good = (encoded_tensors([photos.bytes("biden.jpg")]), {"detect_only": False, "timings": True})
    # Interleaved and in flight together, so that the batcher mixes them.
    sent = []
    for tensors, parameters, words in bad:
        sent.append((submit(http, tensors, parameters=parameters), words))
        sent.append((submit(http, good[0], parameters=good[1]), None))
    for handle, words in sent:
        if words is None:
            [doc] = collect(handle)
            assert [f["name"] for f in doc["faces"]] == ["biden"], doc
        else:
            expect_invalid(lambda: collect(handle), *words)
    assert_serving(http, probe)


def test_the_options_on_a_sequence_model(start_server, photos, engine):
    server = start_server(model="face_sequence")
    client = server.grpc()
    photo = encoded_tensors([photos.bytes("obama.jpg")])
    sequence_infer(client, 501, start=True)
    frames = [sequence_infer(client, 501, photo) for _ in range(2)]
    quick = [
        infer(client, photo, "face_sequence", sequence_id=501,
              parameters={"detect_only": True, "timings": True})[0]
        for _ in range(2)
    ]
    end = sequence_infer(client, 501, end=True)
    tracks = [d["faces"][0]["track"] for d in frames + quick]
    assert tracks == [0, 0, 0, 0], "detect_only frames follow the track their box overlaps"
    assert "name" not in quick[0]["faces"][0] and "timings_ms" in quick[0]
    [person] = end["summary"]["people"]
    assert person["name"] == "obama" and person["frames"] == [0, 1, 2, 3], end
    # EMBEDDING follows no frame: refused on a sequence, which goes on.
    embedding = np.random.default_rng(7).normal(size=engine.embedding_len)
    expect_invalid(
        lambda: infer(client, {"EMBEDDING": _vectors(embedding)}, "face_sequence",
                      sequence_id=502, sequence_start=True),
        "sequence")
    # The refused START left no state: its END is refused too, and frees Triton's slot (an
    # open sequence would hold the server's shutdown for its exit timeout).
    expect_invalid(lambda: sequence_infer(client, 502, end=True), "no live state")


@pytest.mark.parametrize("photo", ["obama2.jpg", "biden.jpg"])
def test_verify_script_compares_two_photos(server, photos, engine, photo):
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "verify.py"), str(photos.path("obama.jpg")),
         str(photos.path(photo)), "--url", f"127.0.0.1:{server.http_port}", "--model", "face"],
        capture_output=True, text=True, timeout=120)
    same = photo == "obama2.jpg"
    assert run.returncode == (0 if same else 1), run.stderr
    assert ("same person" in run.stdout) == same, run.stdout
    assert ("different people" in run.stdout) != same, run.stdout
