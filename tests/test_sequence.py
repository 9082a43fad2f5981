"""The stateful `face_sequence` model (Triton's sequence batcher): sequences interleaved over HTTP
threads and one gRPC stream with both scheduling strategies, batches mixing sequences, string
correlation IDs, errors, idle eviction, and many short sequences (the live-sequence gauge and the
server's memory). Gallery {obama.jpg, biden.jpg} throughout; every document is schema-checked.
Every server test runs against both engines: with onnx, face_sequence's config is switched to
`engine: onnx` and the sample ONNX parameters (triton_server.engine_config)."""

from __future__ import annotations

import json
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pytest

from face_client import (
    INVALID_ARGUMENT, SEQUENCE_MODEL, UNAVAILABLE, assert_geometry, build_request,
    encoded_tensors, expect_error, forget_tensors, infer, model_statistics, parse_results,
    pixel_tensors, sequence_infer, sequence_request, validate,
)

# config.pbtxt edits (see TritonServer config_edits).
DIRECT = (r"oldest\s*\{[^}]*\}", "direct { }")
STRING_CORRID = (r"(CONTROL_SEQUENCE_CORRID\s+data_type:\s*)TYPE_UINT64", r"\g<1>TYPE_STRING")
STRATEGIES = {"oldest": (), "direct": (DIRECT,)}


def idle_timeout(microseconds: int) -> tuple[str, str]:
    key = "max_sequence_idle_microseconds"
    return (key + r":\s*\d+", f"{key}: {microseconds}")


# What Triton answers for a frame of a sequence it has not seen started (or that has ended).
NOT_STARTED = "must specify the START flag"
OBAMA, BIDEN = "obama", "biden"
TINY = np.zeros((48, 48, 3), np.uint8)  # a frame without faces that costs the engine nothing
RSS_LIMIT_KIB = 30 * 1024  # how far the server's RSS may grow over 2000 short sequences


def start_sequence_server(factory, *edits: tuple[str, str], params=None):
    """The frames here are unrelated photos, not video: the detector runs on every one (a
    tracker has nothing to follow from one photo to the next), and the shipped
    `reidentify_every` decides which faces are embedded again (tests/test_tracking.py: video)."""
    params = {"detect_every": "1", **(params or {})}
    return factory(model=SEQUENCE_MODEL, config_edits=edits, params=params, metrics=True)


@pytest.fixture(scope="module")
def oldest_server(start_module_server):
    """The config as shipped (oldest strategy, max_batch_size 4, 2 instances), metrics on."""
    return start_sequence_server(start_module_server)


@pytest.fixture(scope="module")
def direct_server(start_module_server):
    return start_sequence_server(start_module_server, DIRECT)


@pytest.fixture(params=list(STRATEGIES))
def seq_server(request, engine):  # `engine`: parametrise by engine (the servers depend on it)
    return request.getfixturevalue(f"{request.param}_server")


def live_sequences(server) -> float:
    value = server.metric("face_live_sequences", model=SEQUENCE_MODEL)
    assert value is not None, "no face_live_sequences{model=\"face_sequence\"} on /metrics"
    return value


def tracked(doc: dict) -> list[tuple[str, int]]:
    return [(face["name"], face["track"]) for face in doc["faces"]]


# ---- scenarios ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One request of a sequence: a photo or none (START / END only) and, with a photo, the
    expected (name, track) of each face."""

    photo: str | None = None
    faces: tuple[tuple[str, int], ...] = ()
    start: bool = False
    end: bool = False
    raw: bool = False  # send IMAGE pixels rather than ENCODED bytes

    def tensors(self, photos) -> dict:
        if self.photo is None:
            return {}
        if self.raw:
            return pixel_tensors(photos.rgb(self.photo))
        return encoded_tensors([photos.bytes(self.photo)])


# Three sequences; their requests are sent round by round, interleaved.
SCENARIO = {
    "A": [
        Step("obama2_small.jpg", ((OBAMA, 0),), start=True),
        Step("biden_small.jpg", ((BIDEN, 1),), raw=True),
        Step("obama3_small.jpg", ((OBAMA, 0),)),
        Step(end=True),
    ],
    "B": [
        Step(start=True),
        Step("biden_small.jpg", ((BIDEN, 0),)),
        Step("biden_smaller.jpg", ((BIDEN, 0),), raw=True),
        Step("obama.jpg", ((OBAMA, 1),)),
        Step("obama2_small.jpg", ((OBAMA, 1),), end=True),
    ],
    "C": [
        Step("noface.jpg", start=True),
        Step("obama3_small.jpg", ((OBAMA, 0),)),
        Step(end=True),
    ],
}
# The END summary's people: (track, name, frames).
PEOPLE = {
    "A": [(0, OBAMA, [0, 2]), (1, BIDEN, [1])],
    "B": [(0, BIDEN, [0, 1]), (1, OBAMA, [2, 3])],
    "C": [(0, OBAMA, [1])],
}


def check_sequence(seq_id, steps: list[Step], docs: list[dict], people) -> None:
    """Per-request frame numbers, names and tracks, then the END summary."""
    assert len(docs) == len(steps)
    frames = []
    for k, (step, doc) in enumerate(zip(steps, docs)):
        where = f"sequence {seq_id!r}, request {k} ({step.photo or 'no image'})"
        expected_frame = len(frames) if step.photo else None
        assert doc["sequence"] == {"correlation_id": seq_id, "frame": expected_frame}, where
        if step.photo:
            assert tracked(doc) == list(step.faces), f"{where}: (name, track) of the faces"
            assert_geometry(doc)
            frames.append(doc)
        else:
            assert set(doc) <= {"sequence", "summary"}, f"{where}: {doc}"
        assert ("summary" in doc) == step.end, f"{where}: summary only at END"
    check_summary(docs[-1]["summary"], frames, people)


def check_summary(summary: dict, frames: list[dict], people) -> None:
    """The summary against the sequence's frame documents; `people` as in PEOPLE."""
    assert summary["frames"] == len(frames)
    result = summary["result"]
    assert result["image_count"] == len(result["image_infos"]) == len(frames), result
    for n, (info, doc) in enumerate(zip(result["image_infos"], frames)):
        expected = [{"name": face["name"], "box": face["box"]} for face in doc["faces"]]
        assert info == {"face_count": len(expected), "face_infos": expected}, f"image_infos[{n}]"
    got = [(person["track"], person["name"], person["frames"]) for person in summary["people"]]
    assert got == people, "summary people (track, name, frames)"
    for person in summary["people"]:
        named = [
            face["distance"] for doc in frames for face in doc["faces"]
            if face["track"] == person["track"] and face["name"] != "unknown"
        ]
        assert person["best_distance"] == (min(named) if named else None), person


def check_sequences(scenario: dict, ids: dict, results: dict, people: dict) -> None:
    for name, steps in scenario.items():
        check_sequence(ids[name], steps, results[name], people[name])


def run_in_threads(server, photos, scenario: dict, ids: dict) -> dict[str, list[dict]]:
    """One HTTP client and thread per sequence; round k starts when every thread finished k-1."""
    clients = {name: server.http() for name in scenario}
    rounds = max(len(steps) for steps in scenario.values())
    barrier = threading.Barrier(len(scenario), timeout=120)

    def run(name: str) -> list[dict]:
        docs = []
        try:
            for k in range(rounds):
                barrier.wait()
                if k < len(scenario[name]):
                    step = scenario[name][k]
                    docs.append(sequence_infer(
                        clients[name], ids[name], step.tensors(photos), step.start, step.end
                    ))
        except BaseException:
            barrier.abort()
            raise
        return docs

    with ThreadPoolExecutor(len(scenario)) as pool:
        futures = {name: pool.submit(run, name) for name in scenario}
    errors = [f.exception() for f in futures.values() if f.exception() is not None]
    # Raise the thread's own failure, not the broken barrier it left the others with.
    errors.sort(key=lambda e: isinstance(e, threading.BrokenBarrierError))
    if errors:
        raise errors[0]
    return {name: future.result() for name, future in futures.items()}


def run_in_stream(client, photos, scenario: dict, ids: dict) -> dict[str, list[dict]]:
    """All requests on one gRPC stream, round by round; answers matched by request id."""
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        sent = []
        for k in range(max(len(steps) for steps in scenario.values())):
            for name, steps in scenario.items():
                if k < len(steps):
                    inputs, outputs = build_request(client, steps[k].tensors(photos))
                    request_id = f"{name}/{k}"
                    client.async_stream_infer(
                        SEQUENCE_MODEL, inputs, outputs=outputs, request_id=request_id,
                        **sequence_request(ids[name], steps[k].start, steps[k].end),
                    )
                    sent.append(request_id)
        got = {}
        for _ in sent:
            result, error = answers.get(timeout=120)
            assert error is None, f"stream answered an error: {error}"
            [doc] = parse_results(result)
            got[result.get_response().id] = doc
    finally:
        client.stop_stream()
    assert sorted(got) == sorted(sent)
    return {
        name: [got[f"{name}/{k}"] for k in range(len(steps))] for name, steps in scenario.items()
    }


# ---- tests ----------------------------------------------------------------------------------

_FACE = {
    "box": {"left": 1, "top": 2, "right": 30, "bottom": 40}, "score": None,
    "landmarks": [[5.0, 6.0]] * 5, "name": "obama", "distance": 0.3,
}
_IMAGE = {"width": 64, "height": 48}
_NO_FRAME = {"correlation_id": 7, "frame": None}
_EMPTY_SUMMARY = {"result": {"image_count": 0, "image_infos": []}, "people": [], "frames": 0}


@pytest.mark.parametrize("doc,valid", [
    pytest.param({}, True, id="not_ready"),
    pytest.param({"sequence": _NO_FRAME}, True, id="start_without_image"),
    pytest.param({"sequence": _NO_FRAME, "summary": _EMPTY_SUMMARY}, True, id="end_without_image"),
    pytest.param({"sequence": {**_NO_FRAME, "frame": 0}}, False, id="frame_number_without_image"),
    pytest.param(
        {"image": _IMAGE, "faces": [_FACE], "sequence": {**_NO_FRAME, "frame": 0}}, False,
        id="sequence_face_without_track",
    ),
    pytest.param(
        {"image": _IMAGE, "faces": [{**_FACE, "track": 0}]}, False, id="track_without_sequence"
    ),
    pytest.param({"summary": _EMPTY_SUMMARY}, False, id="summary_without_sequence"),
    pytest.param({"sequence": _NO_FRAME, "extra": 1}, False, id="unknown_member"),
])
def test_schema_for_documents_a_server_rarely_sends(doc, valid):
    """The shapes the tests below cannot easily get from a server, or must never get."""
    if valid:
        validate(doc)
    else:
        with pytest.raises(AssertionError, match="does not match schema"):
            validate(doc)


def test_sequence_model_runs_the_engine(oldest_server, engine):
    """face_sequence's config switch: the model under test serves with `engine`."""
    config = oldest_server.http().get_model_config(SEQUENCE_MODEL)
    assert config["parameters"]["engine"]["string_value"] == engine.kind, config["parameters"]
    loaded = f"model '{SEQUENCE_MODEL}': engine {engine.kind}"
    assert loaded in oldest_server.log_text(), f"the model load does not log {loaded!r}"


@pytest.mark.parametrize("transport", ["http_threads", "grpc_stream"])
def test_interleaved_sequences(seq_server, photos, transport):
    """SCENARIO's three sequences at once: one HTTP client thread each, or one gRPC stream."""
    ids = {"A": 101, "B": 102, "C": 103}
    if transport == "http_threads":
        results = run_in_threads(seq_server, photos, SCENARIO, ids)
    else:
        results = run_in_stream(seq_server.grpc(), photos, SCENARIO, ids)
    check_sequences(SCENARIO, ids, results, PEOPLE)
    assert live_sequences(seq_server) == 0


def test_two_faces_in_a_frame_get_two_tracks(oldest_server, photos):
    client = oldest_server.http()
    pair = encoded_tensors([photos.bytes("two_faces.jpg")])  # obama and biden side by side
    first = sequence_infer(client, 301, pair, start=True)
    track = dict(tracked(first))
    assert sorted(track) == [BIDEN, OBAMA] and sorted(track.values()) == [0, 1], tracked(first)
    for photo, person in (("biden_small.jpg", BIDEN), ("obama2_small.jpg", OBAMA)):
        doc = sequence_infer(client, 301, encoded_tensors([photos.bytes(photo)]))
        assert tracked(doc) == [(person, track[person])], photo
    end = sequence_infer(client, 301, end=True)
    people = sorted([(track[BIDEN], BIDEN, [0, 1]), (track[OBAMA], OBAMA, [0, 2])])
    assert [(p["track"], p["name"], p["frames"]) for p in end["summary"]["people"]] == people
    assert [info["face_count"] for info in end["summary"]["result"]["image_infos"]] == [2, 1, 1]


def batch_sizes(client, frames_expected: int = 0) -> dict[int, int]:
    """{batch size: executions} from the model statistics, once they count `frames_expected`
    frames (the backend reports a batch just after answering its requests)."""
    deadline = time.monotonic() + 10
    while True:
        stats = model_statistics(client, SEQUENCE_MODEL)["batch_stats"]
        sizes = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats}
        if sum(size * n for size, n in sizes.items()) >= frames_expected:
            return sizes
        assert time.monotonic() < deadline, f"statistics stuck at {sizes}"
        time.sleep(0.05)


def test_batches_mix_frames_of_several_sequences(oldest_server, photos):
    """Eight sequences advanced together, frame k of each sent at once: the oldest strategy
    (max_batch_size 4, two instances) batches frames of different sequences, and each sequence
    still gets its own frame numbers and tracks."""
    cycle = [
        ("obama2_small.jpg", OBAMA), ("biden_small.jpg", BIDEN),
        ("obama3_small.jpg", OBAMA), ("biden_smaller.jpg", BIDEN),
    ]
    frames = 5
    plans = {
        f"S{i}": [cycle[(i + k) % len(cycle)] for k in range(frames)] for i in range(8)
    }
    ids = {name: 401 + i for i, name in enumerate(plans)}
    scenario, people = {}, {}
    for name, plan in plans.items():
        names = [person for _photo, person in plan]
        first_seen = list(dict.fromkeys(names))  # tracks are numbered in order of appearance
        scenario[name] = [
            Step(photo, ((person, first_seen.index(person)),), start=k == 0, end=k == frames - 1)
            for k, (photo, person) in enumerate(plan)
        ]
        people[name] = [
            (track, person, [k for k, seen in enumerate(names) if seen == person])
            for track, person in enumerate(first_seen)
        ]
    client = oldest_server.http()
    before = batch_sizes(client)
    results = run_in_threads(oldest_server, photos, scenario, ids)
    counted = sum(size * n for size, n in before.items()) + frames * len(plans)
    grown = {size: n - before.get(size, 0) for size, n in batch_sizes(client, counted).items()}
    assert any(size > 1 and n > 0 for size, n in grown.items()), (
        f"no batch held frames of several sequences: executions per batch size {grown}"
    )
    check_sequences(scenario, ids, results, people)
    assert live_sequences(oldest_server) == 0


def test_string_correlation_ids(start_server, photos):
    server = start_sequence_server(start_server, STRING_CORRID)
    scenario = {name: SCENARIO[name] for name in ("A", "C")}
    ids = {"A": "cam-1", "C": "cam-2"}
    check_sequences(scenario, ids, run_in_threads(server, photos, scenario, ids), PEOPLE)
    client = server.http()
    expect_error(
        lambda: sequence_infer(client, "cam-1", pixel_tensors(TINY)), INVALID_ARGUMENT, NOT_STARTED
    )
    assert live_sequences(server) == 0


def test_a_forget_reaches_running_sequences(start_server, photos):
    """A person forgotten while a camera's sequence names them: its next frame and its END
    summary name nobody forgotten, in no track, vote, distance or kept frame (the person is
    enrolled, so that FORGET can take them: a gallery image would bring them back)."""
    server = start_server(model=SEQUENCE_MODEL, params={"detect_every": "1"},
                          gallery={"biden.jpg": photos.path("biden.jpg")})
    client = server.http()
    frame = encoded_tensors([photos.bytes("obama2.jpg")])
    enrolled = sequence_infer(client, 900, encoded_tensors([photos.bytes("obama.jpg")],
                                                           enroll="carol"), start=True, end=True)
    assert enrolled["enrolled"]["name"] == "carol", enrolled
    named = [sequence_infer(client, 1, frame, start=True), sequence_infer(client, 1, frame)]
    assert [d["faces"][0]["name"] for d in named] == ["carol", "carol"], named
    docs = infer(client, forget_tensors("carol"), SEQUENCE_MODEL,
                 **sequence_request(901, start=True, end=True))
    assert docs[0]["forgotten"]["name"] == "carol", docs
    after = sequence_infer(client, 1, frame)
    assert after["faces"][0]["name"] == "unknown", after
    summary = sequence_infer(client, 1, end=True)["summary"]
    assert "carol" not in json.dumps(summary), summary
    assert all(p["best_distance"] is None for p in summary["people"] if p["name"] == "unknown")
    assert summary["frames"] == 3 and len(summary["result"]["image_infos"]) == 3, summary
    assert "dropped from 1 live sequences" in server.log_text()


def test_errors_leave_other_sequences_running(start_server, photos):
    """A frame without START, START beyond max_sequences (and the frame after it), a frame after
    END: each fails alone, and the ongoing sequence 61 goes on with the right frames and tracks."""
    server = start_sequence_server(start_server, params={"max_sequences": "2"})
    client = server.http()
    ongoing = iter([
        Step("obama2_small.jpg", ((OBAMA, 0),), start=True),
        Step("biden_small.jpg", ((BIDEN, 1),)),
        Step("obama3_small.jpg", ((OBAMA, 0),)),
        Step("biden_smaller.jpg", ((BIDEN, 1),), raw=True, end=True),
    ])
    done: list[dict] = []

    def advance() -> None:
        step = next(ongoing)
        doc = sequence_infer(client, 61, step.tensors(photos), step.start, step.end)
        assert doc["sequence"] == {"correlation_id": 61, "frame": len(done)}
        assert tracked(doc) == list(step.faces), step
        done.append(doc)

    frame = pixel_tensors(TINY)
    advance()
    expect_error(lambda: sequence_infer(client, 69, frame), INVALID_ARGUMENT, NOT_STARTED)
    advance()

    sequence_infer(client, 62, start=True)
    assert live_sequences(server) == 2
    expect_error(lambda: sequence_infer(client, 63, start=True), UNAVAILABLE, "max_sequences")
    grpc = server.grpc()
    expect_error(lambda: sequence_infer(grpc, 64, start=True), UNAVAILABLE, "max_sequences")
    assert live_sequences(server) == 2
    # Triton took 63 as started, so its next frame reaches the backend, which has no state.
    expect_error(lambda: sequence_infer(client, 63, frame), INVALID_ARGUMENT, "sequence 63")
    advance()

    end = sequence_infer(client, 62, end=True)
    assert end["summary"] == {
        "result": {"image_count": 0, "image_infos": []}, "people": [], "frames": 0
    }
    expect_error(lambda: sequence_infer(client, 62, frame), INVALID_ARGUMENT, NOT_STARTED)
    fresh = sequence_infer(client, 65, frame, start=True, end=True)  # room again under the limit
    assert fresh["sequence"] == {"correlation_id": 65, "frame": 0} and fresh["faces"] == []
    assert fresh["summary"]["frames"] == 1
    advance()
    check_summary(done[-1]["summary"], done, [(0, OBAMA, [0, 2]), (1, BIDEN, [1, 3])])
    assert live_sequences(server) == 0
    # Triton still holds 63 and 64 open (it took their refused STARTs as started): their END
    # fails like a frame, and closes them, so the server stops without waiting for them.
    for sequence_id, sender in ((63, client), (64, grpc)):
        expect_error(
            lambda: sequence_infer(sender, sequence_id, end=True), INVALID_ARGUMENT,
            f"sequence {sequence_id}",
        )


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_idle_sequence_is_evicted(start_server, strategy):
    server = start_sequence_server(start_server, idle_timeout(1_000_000), *STRATEGIES[strategy])
    client = server.http()
    sequence_infer(client, 71, start=True)
    assert live_sequences(server) == 1
    time.sleep(2.5)  # 71 idles past the 1 s timeout; the next Execute evicts it
    sequence_infer(client, 72, pixel_tensors(TINY), start=True)
    sequence_infer(client, 72, end=True)
    assert live_sequences(server) == 0, "the idle sequence 71 was not evicted"
    expect_error(
        lambda: sequence_infer(client, 71, pixel_tensors(TINY)), INVALID_ARGUMENT,
        NOT_STARTED, "sequence 71",
    )


@pytest.mark.engines("onnx")  # the sequence state's rule, the same for either engine
def test_retired_tracks_and_a_summary_within_its_limit(start_server, photos):
    """track_retire_frames 1: obama, away for a frame, is retired and comes back as a new track;
    max_tracks_per_summary 2: the summary lists the first two tracks and counts the third."""
    server = start_sequence_server(
        start_server, params={"track_retire_frames": "1", "max_tracks_per_summary": "2"})
    client = server.http()
    frames = ["obama2.jpg", "biden.jpg", "biden.jpg", "obama3.jpg"]
    tracks = []
    for i, photo in enumerate(frames):
        doc = validate(sequence_infer(client, 81, encoded_tensors([photos.bytes(photo)]),
                                      start=i == 0))
        tracks.append(tracked(doc))
    assert tracks == [[(OBAMA, 0)], [(BIDEN, 1)], [(BIDEN, 1)], [(OBAMA, 2)]], tracks
    summary = validate(sequence_infer(client, 81, end=True))["summary"]
    assert [(p["track"], p["name"], p["frames"]) for p in summary["people"]] == \
        [(0, OBAMA, [0]), (1, BIDEN, [1, 2])], summary
    assert summary["people_not_listed"] == 1 and summary["frames"] == 4, summary


def run_short_sequences(server, ids: range, threads: int = 4) -> None:
    """START and END of every ID, no frame but on every 100th (one at START, one at END)."""
    clients = [server.http() for _ in range(threads)]

    def run(client, chunk: range) -> None:
        for seq in chunk:
            frame = pixel_tensors(TINY) if seq % 100 == 0 else None
            sequence_infer(client, seq, frame, start=True)
            summary = sequence_infer(client, seq, frame, end=True)["summary"]
            frames = 0 if frame is None else 2
            assert (summary["frames"], summary["result"]["image_count"]) == (frames, frames), seq

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(run, c, ids[i::threads]) for i, c in enumerate(clients)]
    for future in futures:
        future.result()


def test_many_sequences_leave_no_state(oldest_server, record_property):
    run_short_sequences(oldest_server, range(100_000, 100_200))  # warm-up
    assert live_sequences(oldest_server) == 0
    warm = oldest_server.rss_kib()
    started = time.monotonic()
    run_short_sequences(oldest_server, range(200_000, 202_000))
    elapsed = time.monotonic() - started
    assert live_sequences(oldest_server) == 0
    after = oldest_server.rss_kib()
    record_property("rss_kib_after_200", warm)
    record_property("rss_kib_after_2000", after)
    print(
        f"\ntritonserver VmRSS: {warm / 1024:.1f} MiB after 200 sequences, "
        f"{after / 1024:.1f} MiB after 2000 more ({(after - warm) / 1024:+.1f} MiB); "
        f"2000 sequences in {elapsed:.1f} s"
    )
    # Growth is what a leak looks like; the allocator handing pages back (RSS falling by
    # 30 MiB once, onnx-tract) is not.
    assert after - warm < RSS_LIMIT_KIB, (
        f"server RSS grew by {(after - warm) / 1024:+.1f} MiB over 2000 sequences"
    )
