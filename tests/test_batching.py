"""The ONNX engine runs the frames of an Execute through each model together, the faces
through landmarks and the embedder together (`max_engine_batch`), through the real server.
One server, three models of the sample config, each asking for runs of up to 32: `face`
without `free_batch`, so the sample models' fixed batch of 1 stands (a user's fixed-batch
model: run one item at a time, and the load log says so); `face_batched` with it, as the
sample config has it; `face_limited` the same with at most two faces an image and a long
queue delay, so that requests the dynamic batcher gathers share one Execute. The answers of
the batched path are those of one item at a time; a frame that fails fails its request
alone."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from face_client import collect, encoded_tensors, infer, model_statistics, names, submit

pytestmark = pytest.mark.engines("onnx")

# No face, one, five; four sizes from 480 to 1137 pixels high.
PHOTOS = ["obama.jpg", "noface.jpg", "group5_480.jpg", "biden.jpg", "obama2.jpg"]
ONE_INSTANCE = [(r"count:\s*\d+", "count: 1")]


def set_param(key: str, value: str) -> tuple[str, str]:
    return (rf'(key: "{key}"\s+value: \{{ string_value: ")[^"]*', rf"\g<1>{value}")


# On KIND_CPU the engine runs one item at a time unless told otherwise (batches are slower
# on the CPU): these models ask for runs of up to 32.
BATCHED = ONE_INSTANCE + [(r'(?m)^(parameters \{ key: "engine")',
                           r'parameters { key: "max_engine_batch" value: { string_value: "32" } }\n\1')]


@pytest.fixture(scope="module")
def server(start_module_server):
    return start_module_server(
        # Distances unrounded: the two paths are compared within 0.005.
        params={"batch_threads": "1", "distance_decimals": "6"},
        config_edits=BATCHED + [set_param("free_batch", "false")],
        copies={
            "face_batched": BATCHED,
            # As a GPU runs: each model a session per run size, every run padded to one.
            "face_planned": BATCHED + [
                (r'(?m)^(parameters \{ key: "engine")',
                 r'parameters { key: "run_sizes" value: { string_value: "1,4,8" } }\n\1')],
            "face_limited": BATCHED + [
                set_param("max_faces_per_image", "2"),
                (r"max_queue_delay_microseconds:\s*\d+", "max_queue_delay_microseconds: 500000"),
            ],
        },
    )


def assert_same(got: dict, want: dict, what: str) -> None:
    """The same faces and names, boxes within 1 px, distances within 0.005."""
    assert len(got["faces"]) == len(want["faces"]), (what, got, want)
    for a, b in zip(got["faces"], want["faces"]):
        assert a["name"] == b["name"], (what, a, b)
        for side in ("left", "top", "right", "bottom"):
            assert abs(a["box"][side] - b["box"][side]) <= 1, (what, a["box"], b["box"])
        if b["distance"] is not None:
            assert abs(a["distance"] - b["distance"]) <= 0.005, (what, a, b)


def test_the_load_log_says_which_models_batch(server):
    log = server.log_text()
    lines = {model: [line for line in log.splitlines() if f"'{model}'" in line and "onnx (" in line]
             for model in ("face", "face_batched")}
    assert any("; one item a run: detector (its batch fixed in the file), landmarks" in line
               for line in lines["face"]), lines
    assert any("; batched, up to 32 items a run: detector (its batch of 1 freed at load), "
               "landmarks (its batch of 1 freed at load), embedder (its batch of 1 freed at "
               "load)" in line for line in lines["face_batched"]), lines


def test_the_load_log_says_which_sizes_each_model_planned(server):
    lines = [line for line in server.log_text().splitlines()
             if "'face_planned'" in line and "onnx (" in line]
    assert any("padded to the next planned size, a session each: detector [1, 4, 8], "
               "landmarks [1, 4, 8], embedder [1, 4, 8]" in line for line in lines), lines


def test_planned_sessions_answer_gathered_requests_as_one_at_a_time(http, grpc, photos):
    """Requests of 1 to 6 images at once, gathered by the dynamic batcher: runs of every
    size up to 8 frames and more faces, each padded to 1, 4 or 8 on its own session."""
    asked = [[PHOTOS[(i + k) % len(PHOTOS)] for k in range(1 + i % 6)] for i in range(12)]
    pending = [submit(http, encoded_tensors([photos.bytes(p) for p in names_]),
                      model="face_planned") for names_ in asked]
    for names_, request in zip(asked, pending):
        together = collect(request)
        alone = infer(grpc, encoded_tensors([photos.bytes(p) for p in names_]), model="face")
        for i, (got, want) in enumerate(zip(together, alone, strict=True)):
            assert_same(got, want, f"image {i} ({names_[i]}) of {names_}")


@pytest.mark.parametrize("count", [1, 2, 7])
def test_a_request_of_several_images_answers_as_one_at_a_time(grpc, photos, count):
    images = [photos.bytes(PHOTOS[i % len(PHOTOS)]) for i in range(count)]
    together = infer(grpc, encoded_tensors(images), model="face_batched")
    one_by_one = infer(grpc, encoded_tensors(images), model="face")
    assert len(together) == len(one_by_one) == count
    for i, (got, want) in enumerate(zip(together, one_by_one)):
        assert_same(got, want, f"image {i} ({PHOTOS[i % len(PHOTOS)]}) of {count}")
    if count >= 3:
        assert sum(len(d["faces"]) for d in together) >= 5, together


def test_a_frame_that_fails_in_a_gathered_batch_fails_its_request_alone(http, photos):
    before = model_statistics(http, "face_limited")
    asked = ["obama2.jpg", "group5_480.jpg", "biden.jpg", "noface.jpg"]
    pending = [submit(http, encoded_tensors([photos.bytes(p)]), model="face_limited")
               for p in asked]
    answers = {}
    for photo, request in zip(asked, pending):
        try:
            answers[photo] = collect(request)[0]
        except InferenceServerException as error:
            answers[photo] = error
    failed = answers["group5_480.jpg"]
    assert isinstance(failed, InferenceServerException), failed
    assert "more than max_faces_per_image = 2" in str(failed), failed
    assert names(answers["obama2.jpg"]) == ["obama"]
    assert names(answers["biden.jpg"]) == ["biden"]
    assert answers["noface.jpg"]["faces"] == []
    after = counted(http, "face_limited", before, requests=len(asked))
    assert after["execution_count"] - int(before["execution_count"]) == 1, \
        f"the four requests were not gathered into one Execute: {after}"


def counted(client, model: str, before: dict, requests: int) -> dict:
    """`model`'s statistics once `requests` more requests (answered or failed) are counted
    than in `before`."""
    def done(stats: dict) -> int:
        inference = stats["inference_stats"]
        return sum(int(inference[k].get("count", 0)) for k in ("success", "fail"))
    deadline = time.monotonic() + 10
    while True:
        stats = model_statistics(client, model)
        if done(stats) - done(before) >= requests or time.monotonic() > deadline:
            return {**stats, "execution_count": int(stats["execution_count"])}
        time.sleep(0.1)


def test_the_batched_embedding_matches_the_one_at_a_time_embedding(grpc, photos):
    [together] = infer(grpc, encoded_tensors([photos.bytes("obama2.jpg")]),
                       model="face_batched", parameters={"return_embeddings": True})
    [alone] = infer(grpc, encoded_tensors([photos.bytes("obama2.jpg")]), model="face",
                    parameters={"return_embeddings": True})
    a, b = (np.asarray(d["faces"][0]["embedding"], np.float32) for d in (together, alone))
    assert 1 - float(a @ b) <= 0.005
    assert re.fullmatch(r"obama", together["faces"][0]["name"])
