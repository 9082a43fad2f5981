"""The request parameter top_k through the real server: each face lists the top_k nearest people,
ONE entry per person (its nearest embedding), nearest first, whether within the threshold or not;
bad values are refused for that request alone. Every test runs against both engines."""

from __future__ import annotations

import pytest

from face_client import encoded_tensors, expect_invalid, infer, infer_encoded


def _candidates(client, photos, photo: str, top_k) -> list[dict]:
    [doc] = infer(client, encoded_tensors([photos.bytes(photo)]), parameters={"top_k": top_k})
    [face] = doc["faces"]
    return face


def test_top_k_lists_each_person_once(start_server, photos, engine):
    server = start_server(gallery={"biden.jpg": photos.path("biden.jpg")})
    client, grpc = server.http(), server.grpc()
    # Three embeddings of obama: without grouping they would fill the list.
    for photo in ("obama.jpg", "obama3.jpg"):
        [ack] = infer_encoded(client, [photos.bytes(photo)], enroll="obama")
        assert ack["enrolled"]["added"] is True, ack
    [ack] = infer_encoded(client, [photos.bytes("obama2.jpg")], enroll="barack")
    assert ack["enrolled"]["added"] is True, ack

    for c in (client, grpc):
        face = _candidates(c, photos, "obama2.jpg", 3)
        got = [x["name"] for x in face["candidates"]]
        assert got[0] == "barack" and set(got) == {"barack", "obama", "biden"}, face
        distances = [x["distance"] for x in face["candidates"]]
        assert distances == sorted(distances), face
        assert distances[0] == pytest.approx(0.0, abs=1e-3), "obama2 itself is enrolled"
        assert face["name"] == "barack" and face["distance"] == distances[0], face
        # Beyond the threshold too: biden is listed, with his true distance.
        assert distances[2] > engine.match_threshold, face

    face = _candidates(client, photos, "obama2.jpg", 1)
    assert [x["name"] for x in face["candidates"]] == ["barack"], face
    face = _candidates(client, photos, "obama2.jpg", 100)
    assert len(face["candidates"]) == 3, "fewer people than asked: all of them"
    [plain] = infer_encoded(client, [photos.bytes("obama2.jpg")])
    assert "candidates" not in plain["faces"][0], "only when the request asks"


def test_bad_top_k_is_refused_alone(server, photos, client):
    for bad in (0, 101, -1, 2.5, "3", True):
        expect_invalid(lambda: _candidates(client, photos, "obama2.jpg", bad), "top_k")
    assert [x["name"] for x in _candidates(client, photos, "obama.jpg", 2)["candidates"]] == [
        "obama", "biden"]
