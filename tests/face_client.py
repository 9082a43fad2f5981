"""Talking to the `face` model with the real Triton clients (HTTP or gRPC, same helpers).

Requests are dicts {input name: numpy array}; every successful RESULT document is parsed and
validated against schema/result.schema.json before a test sees it. The helpers talk to the `face`
model unless given `model=`; further keywords (sequence_id=, sequence_start=, sequence_end=, ...)
go to the client's infer call. `sequence_infer` is one step of a `face_sequence` sequence.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Sequence

import jsonschema
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from engines import Engine
from environment import SCHEMA_PATH

MODEL = "face"
SEQUENCE_MODEL = "face_sequence"
# INVALID_ARG and UNAVAILABLE as the HTTP and the gRPC client report them.
INVALID_ARGUMENT = {"400", "StatusCode.INVALID_ARGUMENT"}
UNAVAILABLE = {"503", "StatusCode.UNAVAILABLE"}

Tensors = dict[str, np.ndarray]


# ---- requests -------------------------------------------------------------------------------

def bytes_tensor(items: Iterable[bytes | str]) -> np.ndarray:
    """A BYTES tensor [B, 1] (str items are UTF-8 encoded)."""
    rows = [[item.encode("utf-8") if isinstance(item, str) else item] for item in items]
    return np.array(rows, dtype=np.object_).reshape(len(rows), 1)


def _with_enroll(tensors: Tensors, enroll: str | Sequence[str] | None) -> Tensors:
    if enroll is not None:
        batch = len(next(iter(tensors.values())))
        names = [enroll] * batch if isinstance(enroll, str) else list(enroll)
        tensors["ENROLL"] = bytes_tensor(names)
    return tensors


def encoded_tensors(items: Sequence[bytes | Path], enroll=None) -> Tensors:
    """ENCODED [B, 1] from file bytes or paths, plus ENROLL [B, 1] if `enroll` is given."""
    data = [item.read_bytes() if isinstance(item, Path) else item for item in items]
    return _with_enroll({"ENCODED": bytes_tensor(data)}, enroll)


def pixel_tensors(images: np.ndarray | Sequence[np.ndarray], enroll=None) -> Tensors:
    """IMAGE [B, H, W, C] from one [H, W, C] image, a list of same-sized ones, or a 4-D batch."""
    batch = np.stack(images) if isinstance(images, (list, tuple)) else np.asarray(images)
    if batch.ndim == 3:
        batch = batch[np.newaxis]
    return _with_enroll({"IMAGE": np.ascontiguousarray(batch)}, enroll)


def _protocol(client):
    return grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient


def build_request(client, tensors: Tensors):
    """(inputs, outputs) for client.infer / client.async_infer, for either protocol."""
    protocol = _protocol(client)
    inputs = []
    for name, array in tensors.items():
        tensor = protocol.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs, [protocol.InferRequestedOutput("RESULT")]


def infer(client, tensors: Tensors, model: str = MODEL, **options) -> list[dict]:
    inputs, outputs = build_request(client, tensors)
    return parse_results(client.infer(model, inputs, outputs=outputs, **options))


def infer_encoded(client, items: Sequence[bytes | Path], enroll=None) -> list[dict]:
    return infer(client, encoded_tensors(items, enroll))


def infer_pixels(client, images, enroll=None) -> list[dict]:
    return infer(client, pixel_tensors(images, enroll))


def forget_tensors(names: str | Sequence[str]) -> Tensors:
    """FORGET [B, 1]: one name or several."""
    return {"FORGET": bytes_tensor([names] if isinstance(names, str) else names)}


def list_tensors(value: bool = True) -> Tensors:
    """LIST [1, 1]."""
    return {"LIST": np.array([[value]], dtype=np.bool_)}


def forget(client, names: str | Sequence[str], model: str = MODEL, **options) -> list[dict]:
    """FORGET `names`: one `forgotten` document per name."""
    return infer(client, forget_tensors(names), model, **options)


def list_people(client, model: str = MODEL, **options) -> dict:
    """LIST: the one document with `people` and `gallery_size`."""
    [doc] = infer(client, list_tensors(), model, **options)
    return doc


def people(doc: dict) -> list[tuple[str, int, str]]:
    """A LIST answer's rows as (name, embeddings, source)."""
    return [(p["name"], p["embeddings"], p["source"]) for p in doc["people"]]


def submit(
    client: httpclient.InferenceServerClient, tensors: Tensors, model: str = MODEL, **options
):
    """Send without waiting (HTTP client, up to its `concurrency` in flight); see collect()."""
    inputs, outputs = build_request(client, tensors)
    return client.async_infer(model, inputs, outputs=outputs, **options)


def collect(pending) -> list[dict]:
    return parse_results(pending.get_result())


def sequence_request(sequence_id, start: bool = False, end: bool = False) -> dict:
    """The sequence keywords of client.infer / async_infer / async_stream_infer."""
    return {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}


def sequence_infer(
    client, sequence_id, tensors: Tensors | None = None, start=False, end=False,
    model: str = SEQUENCE_MODEL,
) -> dict:
    """One step of a sequence: a frame (`tensors`, one image) or none (START / END only)."""
    docs = infer(client, tensors or {}, model, **sequence_request(sequence_id, start, end))
    assert len(docs) == 1, f"one document per sequence step, got {len(docs)}: {docs}"
    return docs[0]


def model_statistics(client, model: str = MODEL) -> dict:
    """The model's entry of the HTTP client's statistics (JSON)."""
    return client.get_inference_statistics(model)["model_stats"][0]


def model_counts(client, model: str = MODEL, inferences: int = 0) -> tuple[int, int]:
    """(inference_count, execution_count) of the model: requests done vs batches executed, once
    inference_count reaches `inferences`."""
    stats = _statistics_once(client, model, lambda s: int(s["inference_count"]) >= inferences)
    return int(stats["inference_count"]), int(stats["execution_count"])


def success_count(client, model: str = MODEL, at_least: int = 0) -> int:
    """Successful inferences of `model` so far, once there are `at_least` of them."""
    def count(stats: dict) -> int:
        return int(stats["inference_stats"]["success"]["count"])
    return count(_statistics_once(client, model, lambda s: count(s) >= at_least))


def _statistics_once(client, model: str, reached) -> dict:
    """The model's statistics once `reached(stats)` holds (10 s at most). The backend reports a
    batch's statistics just after sending its responses, so a client may see its answers a moment
    before they are counted."""
    deadline = time.monotonic() + 10
    while True:
        stats = model_statistics(client, model)
        if reached(stats):
            return stats
        assert time.monotonic() < deadline, f"statistics of {model} stuck at {stats}"
        time.sleep(0.05)


# ---- results --------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def validate(doc: dict) -> dict:
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, "RESULT does not match schema/result.schema.json:\n" + "\n".join(
        f"  at {'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors
    )
    return doc


def parse_results(result) -> list[dict]:
    """RESULT [B, 1] -> B validated JSON documents, in batch order."""
    array = result.as_numpy("RESULT")
    assert array is not None, "response has no RESULT output"
    assert array.ndim == 2 and array.shape[1] == 1, f"RESULT has shape {array.shape}, want [B, 1]"
    docs = []
    for raw in array[:, 0]:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        docs.append(validate(json.loads(text)))
    return docs


def names(doc: dict) -> list[str]:
    return [face["name"] for face in doc["faces"]]


# ---- assertions -----------------------------------------------------------------------------

def assert_geometry(doc: dict, margin: float = 0.25) -> None:
    """Boxes are proper rectangles overlapping the image; landmarks lie in the box (+ margin)."""
    width, height = doc["image"]["width"], doc["image"]["height"]
    for face in doc["faces"]:
        box = face["box"]
        left, top, right, bottom = box["left"], box["top"], box["right"], box["bottom"]
        assert left < right and top < bottom, f"degenerate box {box}"
        assert right > 0 and bottom > 0 and left < width and top < height, (
            f"box {box} does not overlap the {width}x{height} image"
        )
        dx, dy = (right - left) * margin, (bottom - top) * margin
        for x, y in face["landmarks"]:
            assert left - dx <= x <= right + dx and top - dy <= y <= bottom + dy, (
                f"landmark ({x}, {y}) outside box {box}"
            )


def assert_face(face: dict, engine: Engine) -> None:
    """What one face document says about the engine that made it: the detector's score (null
    where it reports none), the embedding's length when returned, and a name consistent with
    the distance and the engine's match threshold."""
    if engine.score is None:
        assert face["score"] is None, f"{engine} reports no detector score: {face}"
    else:
        low, high = engine.score
        assert face["score"] is not None and low <= face["score"] <= high, (
            f"{engine} detector score outside [{low}, {high}]: {face}"
        )
    if "embedding" in face:
        assert len(face["embedding"]) == engine.embedding_len, (
            f"{engine} embeddings have {engine.embedding_len} values, got {len(face['embedding'])}"
        )
    distance = face["distance"]
    if face["name"] != "unknown":
        assert distance is not None and distance < engine.match_threshold, face
    elif distance is not None:
        assert distance >= engine.match_threshold, f"unknown within the threshold: {face}"


def assert_person(
    doc: dict, name: str, engine: Engine, size: tuple[int, int] | None = None
) -> dict:
    """Exactly one face, named `name` (see assert_face); returns it."""
    if size is not None:
        assert (doc["image"]["width"], doc["image"]["height"]) == size, (
            f"image size {doc['image']} != photo size {size}"
        )
    assert names(doc) == [name], f"expected one face named {name!r}, got {names(doc)}"
    assert_geometry(doc)
    face = doc["faces"][0]
    assert_face(face, engine)
    return face


def expect_invalid(call: Callable[[], object], *needles: str) -> InferenceServerException:
    """`call()` must fail with INVALID_ARG; the message must contain one of `needles` (any case)."""
    return expect_error(call, INVALID_ARGUMENT, *needles)


def expect_error(
    call: Callable[[], object], statuses: set[str], *needles: str
) -> InferenceServerException:
    """`call()` must fail with a status in `statuses` (e.g. INVALID_ARGUMENT, UNAVAILABLE); the
    message must contain one of `needles` (any case)."""
    with pytest.raises(InferenceServerException) as info:
        call()
    error = info.value
    message = error.message() or str(error)
    assert str(error.status()) in statuses, (
        f"expected status {sorted(statuses)}, got {error.status()!r}: {message}"
    )
    if needles:
        assert any(n.lower() in message.lower() for n in needles), (
            f"error message names none of {needles}: {message!r}"
        )
    return error


def assert_serving(client, probe: bytes) -> None:
    """The server and model are ready and a good request (`probe`: one-face photo) succeeds."""
    assert client.is_server_ready(), "server no longer ready"
    assert client.is_model_ready(MODEL), "model no longer ready"
    [doc] = infer_encoded(client, [probe])
    assert len(doc["faces"]) == 1, f"probe photo: expected one face, got {doc['faces']}"
