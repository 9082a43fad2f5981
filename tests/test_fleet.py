"""A local fleet (issue #10): two real tritonservers, A and B, sharing one gallery in a real
PostgreSQL 15, behind the router the Kubernetes recipe deploys (deploy/kubernetes/router/
nginx.conf, run by Debian's nginx). It shows that

- an ENROLL on A is recognized by B, and a FORGET on B stops A naming that person, within 2 s
  (the measured delays are printed: run with -s to see them);
- killing B's database sessions loses nothing acknowledged: B reconnects, catches up, and can
  write again;
- with PostgreSQL stopped, ENROLL and FORGET answer UNAVAILABLE on both servers while
  recognition and LIST go on from memory; once it is back, writes work again, both servers
  hold every acknowledged change, and a restarted B loads the whole gallery from the database;
- through the router, 20 interleaved sequences (each request carrying the header the router
  hashes on) keep to one server each and end with the right tracks and summaries, while
  stateless requests spread over both servers;
- a server whose database is down, or whose DSN variable is unset, fails at start-up, naming
  the variable.

Both servers serve `face` and `face_sequence` (ONNX engine: the quicker to start), every model
with `gallery_name: face`, as the recipe's configs do; their gallery folders are empty, so every
name they know comes from the database. One PostgreSQL and one pair of servers serve the whole
module, in file order: propagation, killed sessions, database down (which restarts B: new
ports), the router (its own nginx, on the servers' ports of the moment), start-up failures
(servers of its own). Each test first sets up the gallery it needs (ensure_known /
ensure_unknown), so any one of them also runs alone (-k).
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from face_client import (
    SEQUENCE_MODEL, UNAVAILABLE, encoded_tensors, expect_error, forget, infer, infer_encoded,
    list_people, model_statistics, names, people, sequence_request,
)
from postgres_server import SUITE_DB
from router import Router, hashed_header
from test_sequence import Step, check_sequence
from triton_server import TritonServer, free_ports

pytestmark = pytest.mark.engines("onnx")

DSN_ENV = "FACE_GALLERY_DSN"
FLEET = {"gallery_store": "postgres", "gallery_name": "face"}
# The promise: another server sees a change within this (notifications; polling at worst).
PROPAGATION_S = 2.0
# After a lost connection: the reconnect backoff (up to ~1 s), then catching up.
CATCH_UP_S = 10.0
PROBE = {"obama": "obama2_small.jpg", "biden": "biden_small.jpg"}  # small: cheap to poll with


# ---- fixtures -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fleet(postgres, start_module_server) -> tuple[TritonServer, TritonServer]:
    """Servers A and B (`postgres` first: the database outlives them). A's DSN is a URL, B's
    the keyword form; each its own application_name, so a test can kill its sessions."""
    dsns = {"a": postgres.dsn(SUITE_DB, "face-a"),
            "b": postgres.dsn(SUITE_DB, "face-b", form="keyword")}
    a, b = (
        start_module_server(params=FLEET, gallery={}, more_models=(SEQUENCE_MODEL,),
                            env={DSN_ENV: dsns[name]})
        for name in "ab"
    )
    return a, b


# ---- helpers --------------------------------------------------------------------------------

def who(client, photos, person: str) -> list[str]:
    """The names the server gives the faces of `person`'s probe photo."""
    [doc] = infer_encoded(client, [photos.bytes(PROBE[person])])
    return names(doc)


def enroll(client, photos, photo: str, name: str) -> bool:
    """ENROLL the face of `photo` as `name`; True if added (False: a duplicate)."""
    [ack] = infer_encoded(client, [photos.bytes(photo)], enroll=name)
    return ack["enrolled"]["added"]


def enrolled(client) -> dict[str, int]:
    """{name: embeddings} of the enrolled people (the galleries have no folder photos)."""
    return {name: count for name, count, source in people(list_people(client))
            if source == "enrolled"}


def wait_for(check, since: float, timeout: float, what: str) -> float:
    """Seconds from `since` until check() first holds (polled); fails after `timeout`."""
    while True:
        if check():
            return time.monotonic() - since
        assert time.monotonic() - since < timeout, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.02)


def report(record_property, key: str, seconds: float, what: str) -> None:
    record_property(key, round(seconds, 3))
    print(f"\n[fleet] {what}: {seconds * 1000:.0f} ms")


def when_back(call, timeout: float = CATCH_UP_S):
    """call() until it stops answering UNAVAILABLE (the store reconnecting); its result and
    how long that took."""
    started = time.monotonic()
    while True:
        try:
            return call(), time.monotonic() - started
        except InferenceServerException as error:
            assert str(error.status()) in UNAVAILABLE, f"not UNAVAILABLE: {error}"
            assert time.monotonic() - started < timeout, f"still UNAVAILABLE: {error}"
            time.sleep(0.1)


def ensure_known(a, b, photos, *people_: str) -> None:
    """Each of `people_` enrolled (via A, from <person>.jpg) and known to both servers."""
    for person in people_:
        enroll(a.http(), photos, f"{person}.jpg", person)
    for server in (a, b):
        client = server.http()
        wait_for(lambda: set(people_) <= set(enrolled(client)), time.monotonic(),
                 PROPAGATION_S, f"{people_} on {server.root.name}")


def ensure_unknown(a, b, photos, person: str) -> None:
    """`person` forgotten (via A) and unknown to both servers."""
    forget(a.http(), person)
    for server in (a, b):
        client = server.http()
        wait_for(lambda: who(client, photos, person) == ["unknown"], time.monotonic(),
                 PROPAGATION_S, f"{person} forgotten on {server.root.name}")


# ---- propagation ----------------------------------------------------------------------------

def test_an_enrollment_on_a_is_recognized_by_b(fleet, photos, record_property):
    a, b = fleet
    ensure_unknown(a, b, photos, "obama")
    on_b = b.http()
    assert enroll(a.http(), photos, "obama.jpg", "obama")
    acked = time.monotonic()
    delay = wait_for(lambda: who(on_b, photos, "obama") == ["obama"], acked, 10, "B naming obama")
    report(record_property, "enroll_a_to_b_s", delay, "ENROLL acknowledged by A -> B names him")
    assert delay < PROPAGATION_S
    assert enrolled(on_b)["obama"] == 1


def test_a_forget_on_b_reaches_a(fleet, photos, record_property):
    a, b = fleet
    ensure_known(a, b, photos, "obama")
    on_a = a.http()
    assert who(on_a, photos, "obama") == ["obama"]
    [doc] = forget(b.http(), "obama")
    acked = time.monotonic()
    assert doc["forgotten"]["removed"] >= 1, doc
    delay = wait_for(lambda: who(on_a, photos, "obama") == ["unknown"], acked, 10,
                     "A forgetting obama")
    report(record_property, "forget_b_to_a_s", delay, "FORGET acknowledged by B -> A stops")
    assert delay < PROPAGATION_S
    assert "obama" not in enrolled(on_a)


# ---- lost sessions --------------------------------------------------------------------------

def enroll_in_background(server, photos, names_: list[str], acked: list[str],
                         refused: list[str], started: threading.Event) -> threading.Thread:
    """A thread ENROLLing `names_` on `server` one after the other (biden's face), noting which
    were acknowledged and which were refused (UNAVAILABLE); `started` is set after the 3rd ack."""
    client = server.http()

    def run() -> None:
        for name in names_:
            try:
                enroll(client, photos, "biden_small.jpg", name)
                acked.append(name)
            except InferenceServerException as error:
                assert str(error.status()) in UNAVAILABLE, f"{name}: {error}"
                refused.append(name)
            if len(acked) == 3:
                started.set()
        started.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_killed_sessions_lose_nothing_acknowledged(fleet, postgres, photos, record_property):
    a, b = fleet
    ensure_unknown(a, b, photos, "obama")
    writers = [f"writer{n:02}" for n in range(20)]
    acked, refused, started = [], [], threading.Event()
    # B's sessions are killed while B is writing, and A writes at once, while B may still be
    # reconnecting (B must then catch up rather than wait for a notification).
    thread = enroll_in_background(b, photos, writers, acked, refused, started)
    assert started.wait(60), "the writer on B got no acknowledgment"
    killed, at = postgres.terminate("face-b"), len(acked)
    assert enroll(a.http(), photos, "obama.jpg", "obama")
    since = time.monotonic()
    on_b = b.http()
    delay = wait_for(lambda: who(on_b, photos, "obama") == ["obama"], since, CATCH_UP_S,
                     "B catching up after its sessions were killed")
    report(record_property, "catch_up_after_kill_s", delay, "after the kill: ENROLL on A -> B")
    thread.join(120)
    assert not thread.is_alive()
    print(f"\n[fleet] killed {killed} sessions of B after {at} acknowledged writes; writes on "
          f"B: {len(acked)} acknowledged, {len(refused)} refused")
    assert killed >= 2, "B holds a writing and a listening session"

    stored = {name for (name,) in postgres.sql(
        "SELECT DISTINCT name FROM triton_face.enrollments", SUITE_DB)}
    assert set(acked) <= stored, f"acknowledged but not stored: {set(acked) - stored}"
    for server in (a, b):
        client = server.http()
        wait_for(lambda: set(acked) <= set(enrolled(client)), time.monotonic(),
                 PROPAGATION_S, f"acknowledged writers on {server.root.name}")

    # B writes again (on a new session), and A sees it.
    added, _ = when_back(lambda: enroll(on_b, photos, "obama3.jpg", "obama"))
    assert added
    on_a = a.http()
    wait_for(lambda: enrolled(on_a).get("obama") == 2, time.monotonic(), PROPAGATION_S,
             "A seeing B's ENROLL after the kill")
    # They look like biden: later tests want him named biden. (max_batch_size 8)
    for first in range(0, len(writers), 8):
        forget(on_a, writers[first:first + 8])


# ---- the database down ----------------------------------------------------------------------

def test_database_down_then_back(fleet, postgres, photos, record_property):
    a, b = fleet
    ensure_known(a, b, photos, "obama", "biden")
    on_a, on_b = a.http(), b.grpc()  # both protocols' UNAVAILABLE
    before = enrolled(on_a)
    assert enrolled(on_b) == before

    postgres.stop()
    try:
        for client in (on_a, on_b):
            error = expect_error(lambda: enroll(client, photos, "obama_640x480.jpg", "obama"),
                                 UNAVAILABLE)
            print(f"\n[fleet] ENROLL with PostgreSQL stopped: {error.message()}")
            expect_error(lambda: forget(client, "biden"), UNAVAILABLE)
            assert who(client, photos, "obama") == ["obama"]
            assert who(client, photos, "biden") == ["biden"]
            assert enrolled(client) == before, "a refused write changed the gallery"
    finally:
        postgres.start()
    back = time.monotonic()

    added, _ = when_back(lambda: enroll(on_a, photos, "obama_640x480.jpg", "obama"))
    assert added
    report(record_property, "write_after_restart_s", time.monotonic() - back,
           "PostgreSQL started -> first ENROLL acknowledged (A)")
    added, _ = when_back(lambda: enroll(on_b, photos, "biden_small.jpg", "biden"))
    assert added
    expected = {**before, "obama": before["obama"] + 1, "biden": before["biden"] + 1}
    for client in (on_a, on_b):
        wait_for(lambda: enrolled(client) == expected, time.monotonic(), CATCH_UP_S,
                 f"both servers holding {expected}")

    b.restart()  # a fresh B loads everything from the database
    assert list_people(b.http()) == list_people(a.http())
    assert enrolled(b.http()) == expected


# ---- the router -----------------------------------------------------------------------------

CYCLE = [("obama2_small.jpg", "obama"), ("biden_small.jpg", "biden"),
         ("obama3_small.jpg", "obama"), ("biden_smaller.jpg", "biden")]
FRAMES = 3


def plan(i: int) -> tuple[list[Step], list]:
    """Sequence i: FRAMES photos from CYCLE (rotated by i); its steps and END summary people."""
    shown = [CYCLE[(i + k) % len(CYCLE)] for k in range(FRAMES)]
    order = list(dict.fromkeys(person for _photo, person in shown))  # tracks by appearance
    steps = [Step(photo, ((person, order.index(person)),), start=k == 0, end=k == FRAMES - 1)
             for k, (photo, person) in enumerate(shown)]
    summary = [(track, person, [k for k, (_p, seen) in enumerate(shown) if seen == person])
               for track, person in enumerate(order)]
    return steps, summary


def inference_counts(servers, model: str) -> list[int]:
    return [int(model_statistics(s.http(), model)["inference_count"]) for s in servers]


def counted(servers, model: str, before: list[int], total: int) -> list[int]:
    """Per-server inferences of `model` since `before`, once they add up to `total` (the backend
    counts a request just after answering it)."""
    deadline = time.monotonic() + 10
    while True:
        grown = [n - b for n, b in zip(inference_counts(servers, model), before)]
        if sum(grown) >= total or time.monotonic() > deadline:
            return grown
        time.sleep(0.05)


def in_rounds(calls: dict, rounds: int) -> dict[object, list]:
    """calls[key](k) for k in range(rounds), one thread per key (a client is used by one thread
    only); round k starts when every thread has finished round k-1."""
    barrier = threading.Barrier(len(calls), timeout=120)

    def run(call) -> list:
        out = []
        try:
            for k in range(rounds):
                barrier.wait()
                out.append(call(k))
        except BaseException:
            barrier.abort()
            raise
        return out

    with ThreadPoolExecutor(len(calls)) as pool:
        futures = {key: pool.submit(run, call) for key, call in calls.items()}
    errors = [f.exception() for f in futures.values() if f.exception() is not None]
    # Raise a thread's own failure, not the broken barrier it left the others with.
    errors.sort(key=lambda e: isinstance(e, threading.BrokenBarrierError))
    if errors:
        raise errors[0]
    return {key: future.result() for key, future in futures.items()}


def test_router_keeps_sequences_and_spreads_stateless_requests(fleet, photos, tmp_path):
    a, b = fleet
    ensure_known(a, b, photos, "obama", "biden")
    servers = (a, b)
    router = Router(tmp_path, [s.http_port for s in servers], [s.grpc_port for s in servers])
    http_url, grpc_url = f"127.0.0.1:{router.ports[8000]}", f"127.0.0.1:{router.ports[8001]}"
    header = hashed_header()
    ids = {i: 5000 + i for i in range(20)}
    plans = {i: plan(i) for i in ids}
    # Half the sequences over HTTP, half over gRPC; 7 stateless HTTP clients without the header.
    clients = {i: httpclient.InferenceServerClient(http_url) if i % 2 == 0
               else grpcclient.InferenceServerClient(grpc_url) for i in ids}
    stateless = {f"plain{n}": httpclient.InferenceServerClient(http_url) for n in range(7)}

    def frame(i: int):
        def send(k: int) -> dict:
            step = plans[i][0][k]
            [doc] = infer(clients[i], step.tensors(photos), SEQUENCE_MODEL,
                          headers={header: str(ids[i])},
                          **sequence_request(ids[i], step.start, step.end))
            return doc
        return send

    def plain(client):
        return lambda k: names(infer(client, encoded_tensors([photos.bytes(PROBE["obama"])]))[0])

    before = {m: inference_counts(servers, m) for m in ("face", SEQUENCE_MODEL)}
    try:
        results = in_rounds({**{i: frame(i) for i in ids},
                             **{key: plain(c) for key, c in stateless.items()}}, FRAMES)
    finally:
        for client in (*clients.values(), *stateless.values()):
            client.close()
        router.stop()

    for i in ids:
        check_sequence(ids[i], plans[i][0], results[i], plans[i][1])
    assert all(results[key] == [["obama"]] * FRAMES for key in stateless)
    sequences = counted(servers, SEQUENCE_MODEL, before[SEQUENCE_MODEL], len(ids) * FRAMES)
    plain_counts = counted(servers, "face", before["face"], len(stateless) * FRAMES)
    print(f"\n[fleet] through the router: face_sequence frames per server {sequences}, "
          f"face requests per server {plain_counts}")
    # Every frame of a sequence reached the server holding its state (else it was refused as
    # not started); both servers held sequences, and the headerless requests went to both.
    assert sum(sequences) == len(ids) * FRAMES and all(n > 0 for n in sequences), sequences
    assert all(n % FRAMES == 0 for n in sequences), sequences
    assert sum(plain_counts) == len(stateless) * FRAMES, plain_counts
    assert all(n > 0 for n in plain_counts), f"stateless requests did not spread: {plain_counts}"


# ---- start-up without the database ----------------------------------------------------------

def test_a_server_without_its_database_does_not_start(suite_env, engine, tmp_path):
    """Down: nothing listens where the DSN points (with a password, which the log must not
    show). Unset: the variable the model names is missing."""
    [port] = free_ports(1)
    dsn = (f"postgresql://postgres:s3cret-pw@127.0.0.1:{port}/{SUITE_DB}"
           "?application_name=face-c")
    cases = {
        "down": ({}, {DSN_ENV: dsn}, DSN_ENV),
        "unset": ({}, {DSN_ENV: None}, DSN_ENV),
        "unset_named": ({"gallery_dsn_env": "FLEET_TEST_DSN"}, {"FLEET_TEST_DSN": None},
                        "FLEET_TEST_DSN"),
    }
    for case, (params, env, variable) in cases.items():
        (tmp_path / case).mkdir()
        server = TritonServer(suite_env, tmp_path / case, params={**FLEET, **params},
                              gallery={}, engine=engine.name, env=env)
        try:
            log = server.start_expecting_exit()
        finally:
            server.discard_library()
        [failure] = [line for line in log.splitlines()
                     if "failed to load 'face' version" in line]
        assert variable in failure, f"{case}: the load failure does not name {variable}"
        if case == "down":
            assert re.search(r"(?i)postgres.*(connect|reach)", failure), failure
            assert "s3cret-pw" not in log, "the log shows the DSN's password"
        else:
            assert "not set" in failure, failure
