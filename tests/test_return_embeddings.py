"""The request parameter return_embeddings through the real server (HTTP and gRPC, both engines):
true adds each face's `embedding` on a model whose default is false, false leaves it out on a
model whose default is true, and a value that is not a bool is refused for that request alone.
An EMBEDDING taken this way is the one the gallery holds: enrolled from the same photo, it is
found at distance ~0."""

from __future__ import annotations

import math

import pytest

from face_client import encoded_tensors, expect_invalid, infer, infer_encoded


def _faces(client, photos, photo: str, **parameters) -> list[dict]:
    [doc] = infer(client, encoded_tensors([photos.bytes(photo)]), parameters=parameters or None)
    return doc["faces"]


def test_true_adds_the_embedding_and_false_leaves_it_out(server, photos, client, engine):
    [plain] = _faces(client, photos, "obama2.jpg")
    assert "embedding" not in plain, "the model's default is false"
    [face] = _faces(client, photos, "obama2.jpg", return_embeddings=True)
    embedding = face["embedding"]
    assert len(embedding) == engine.embedding_len, face
    assert all(math.isfinite(x) for x in embedding)
    assert face["name"] == plain["name"] == "obama" and face["distance"] == plain["distance"]
    [off] = _faces(client, photos, "obama2.jpg", return_embeddings=False)
    assert "embedding" not in off


def test_false_overrides_a_model_that_returns_them(start_server, photos):
    server = start_server(params={"return_embeddings": "true"})
    client = server.http()
    [face] = _faces(client, photos, "obama2.jpg")
    assert "embedding" in face, "the model's default is true"
    [face] = _faces(client, photos, "obama2.jpg", return_embeddings=False)
    assert "embedding" not in face


def test_a_returned_embedding_is_the_one_enrolled(start_server, photos, engine):
    server = start_server(gallery={})
    client = server.grpc()
    [face] = _faces(client, photos, "obama2.jpg", return_embeddings=True)
    [ack] = infer_encoded(client, [photos.bytes("obama2.jpg")], enroll="barack")
    assert ack["enrolled"]["added"] is True, ack
    [again] = _faces(client, photos, "obama2.jpg", return_embeddings=True)
    assert again["name"] == "barack" and again["distance"] == pytest.approx(0.0, abs=1e-3)
    assert again["embedding"] == pytest.approx(face["embedding"], abs=1e-5)


def test_a_value_that_is_not_a_bool_is_refused_alone(server, photos, client):
    for bad in ("true", 1, 0.5):
        expect_invalid(lambda: _faces(client, photos, "obama2.jpg", return_embeddings=bad),
                       "return_embeddings")
    assert _faces(client, photos, "obama2.jpg")[0]["name"] == "obama"
