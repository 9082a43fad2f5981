"""Fixtures: the located environment, the photos, and real tritonservers serving the `face` model.

- `suite_env` / `photos`: session-wide; a missing tritonserver, weight, ONNX model, photo or
  backend library FAILS every test with a message naming what to run (scripts/setup.sh,
  cargo build --release).
- `engine`: the face engine the servers of a test run (an entry of tests/engines.py). Every test
  that uses a server through the fixtures below runs once per engine, as test_x[dlib] and
  test_x[onnx], grouped by engine within its module (so module servers are shared per engine);
  `@pytest.mark.engines("dlib")` limits a test (or, as `pytestmark`, a module) to the engines
  named. A test asks for `engine` itself to read its expectations (threshold, distances).
- `sample_video`: the sample video (assets/video/sample.mp4) and which person is in view in
  which of its frames.
- `probe`: bytes of a small one-face photo, to check that a server still serves.
- `server` (+ `http`, `grpc` clients of it, `client`: each of them in turn): one server per
  test module and engine with the
  default config and gallery {obama, biden}, for tests that do not change server state. A module
  can override `server` (see test_limits.py) and keep using `http` / `grpc`.
- `start_server(params=..., gallery=...)`: function-scoped factory for tests that need their own
  config, gallery or restarts; every server it made is stopped after the test, pass or fail.
  `start_module_server` is the same with module lifetime. Both serve the `engine` and pass further
  keywords to TritonServer: `model="face_sequence"`, `config_edits=[(regex, replacement)]`,
  `metrics=True`.
When a test fails, the tail of each running server's log is attached to its report.

The inner loop (scripts/quick.sh): with FACE_TEST_SERVER set, `server` is the dev server of its
engine that keeps running between commands (tests/dev_server.py), when one runs; and
FACE_TEST_ENGINES=onnx (names, comma-separated) runs only those engines' tests.
"""

from __future__ import annotations

import os
import re

import pytest

import dev_server
from engines import ENGINES, Engine
from environment import REPO_ROOT, MissingAsset, Photos, SampleVideo, SuiteEnv, resolve_env
from postgres_server import SUITE_DB, PostgresServer
from triton_server import TritonServer, live_servers


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "engines(*names): run the test only against these face engines (tests/engines.py)",
    )


# The longest modules first (module times of one run, docs/development.md): with two workers
# taking whole modules in collection order, a long module collected last would run alone at
# the end. The two CPU-bound ones are kept apart (each takes twice as long beside the other).
LONGEST_FIRST = (
    "test_gallery_scale.py", "test_app.py", "test_gpu_bundle.py", "test_manage.py",
    "test_sequence.py", "test_gallery.py", "test_face_options.py", "test_erasure.py",
    "test_folder_cache.py", "test_fleet_join.py",
)


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
    items.sort(key=rank)  # stable: the order within a module is kept
    wanted = _engines_wanted()
    if wanted is not None:
        def other(item) -> bool:
            params = getattr(item, "callspec", None)
            return params is not None and params.params.get("engine", wanted[0]) not in wanted
        dropped = [item for item in items if other(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if not other(item)]


def _engines_wanted() -> list[str] | None:
    """FACE_TEST_ENGINES (the inner loop's): the engines whose tests run; None: all."""
    value = os.environ.get("FACE_TEST_ENGINES", "").strip()
    if not value:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in ENGINES]
    if unknown:
        raise pytest.UsageError(
            f"FACE_TEST_ENGINES={value}: unknown {', '.join(unknown)}; known: {', '.join(ENGINES)}"
        )
    return names


@pytest.hookimpl(tryfirst=True)  # first, so that the engine leads the test id: test_x[onnx-...]
def pytest_generate_tests(metafunc):
    """Parametrise every test that uses the `engine` fixture (directly or through a server
    fixture) over the engines, or over those its `engines` marker names."""
    if "engine" not in metafunc.fixturenames:
        return
    names = list(ENGINES)
    marker = metafunc.definition.get_closest_marker("engines")
    if marker is not None:
        unknown = [name for name in marker.args if name not in ENGINES]
        if unknown or not marker.args:
            raise pytest.UsageError(
                f"{metafunc.definition.nodeid}: engines marker {marker.args}: "
                f"name one or more of {', '.join(ENGINES)}"
            )
        names = list(marker.args)
    # Module scope: the tests of a module run grouped by engine, so that module-scoped servers
    # are started once per engine.
    metafunc.parametrize("engine", names, ids=names, indirect=True, scope="module")


@pytest.fixture(scope="module")
def engine(request) -> Engine:
    """The engine under test (parametrised by pytest_generate_tests)."""
    return ENGINES[request.param]


@pytest.fixture(scope="session")
def suite_env() -> SuiteEnv:
    try:
        return resolve_env()
    except MissingAsset as missing:
        problem = str(missing)
    pytest.fail(f"test environment incomplete:\n{problem}", pytrace=False)


@pytest.fixture(scope="session")
def photos(suite_env, tmp_path_factory) -> Photos:
    return Photos(suite_env.photos, tmp_path_factory.mktemp("photos"))


@pytest.fixture(scope="session")
def example():
    """`example(name)`: the path of a tool built from examples/ (onnx_run, gpu_probe); FAILS with
    how to build it if it is not there."""
    def find(name: str):
        path = REPO_ROOT / "target" / "release" / "examples" / name
        if not os.access(path, os.X_OK):
            pytest.fail(
                f"{path} not found: run `cargo build --release --examples` (scripts/test.sh does)",
                pytrace=False,
            )
        return path
    return find


@pytest.fixture(scope="session")
def sample_video() -> SampleVideo:
    """The sample video setup makes (scripts/sample_video.py) and its truth; FAILS with how to
    make it when it is missing."""
    try:
        return SampleVideo.find()
    except MissingAsset as missing:
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture(scope="session")
def probe(photos) -> bytes:
    return photos.bytes("obama_640x480.jpg")


def _server_factory(suite_env, tmp_path_factory, prefix, engine: Engine):
    started: list[TritonServer] = []

    def start(params=None, gallery=None, extra_args=(), **options) -> TritonServer:
        root = tmp_path_factory.mktemp(prefix)  # numbered: prefix0, prefix1, ...
        try:
            server = TritonServer(
                suite_env, root, params=params, gallery=gallery, extra_args=extra_args,
                engine=engine.name, **options,
            )
        except MissingAsset as missing:  # e.g. no model_repository/<model>/config.pbtxt
            pytest.fail(str(missing), pytrace=False)
        started.append(server)
        return server.start()

    return start, started


def _stop_all(servers: list[TritonServer]) -> None:
    for server in servers:
        server.stop()
        server.discard_library()


@pytest.fixture
def start_server(suite_env, tmp_path_factory, request, engine):
    prefix = re.sub(r"[^\w.-]+", "_", request.node.name)[:40]
    start, started = _server_factory(suite_env, tmp_path_factory, prefix, engine)
    yield start
    _stop_all(started)


@pytest.fixture(scope="module")
def start_module_server(suite_env, tmp_path_factory, request, engine):
    """Like start_server, but the servers live until the end of the test module (per engine)."""
    prefix = f"{request.module.__name__}_{engine.name}"
    start, started = _server_factory(suite_env, tmp_path_factory, prefix, engine)
    yield start
    _stop_all(started)


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    """A real PostgreSQL 15 for the test module, with the database SUITE_DB."""
    db = PostgresServer(tmp_path_factory.mktemp("postgres"))
    try:
        db.start()
        db.create_database(SUITE_DB)
        yield db
    finally:
        db.stop()


@pytest.fixture(scope="module")
def server(suite_env, engine, start_module_server) -> TritonServer:
    """Default config, gallery {obama.jpg, biden.jpg}. Do not enroll through it. With
    FACE_TEST_SERVER, the dev server of this engine when one runs (scripts/quick.sh)."""
    running = dev_server.attach(suite_env, engine.name)
    if running is not None:
        return running
    return start_module_server()


@pytest.fixture(scope="module")
def http(server):
    return server.http()


@pytest.fixture(scope="module")
def grpc(server):
    return server.grpc()


@pytest.fixture(params=["http", "grpc"])
def client(request, server):
    """`http` and `grpc` in turn: the test runs once per protocol (test_x[...-http])."""
    return request.getfixturevalue(request.param)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for server in live_servers():
            report.sections.append(
                (f"tritonserver log tail ({server.log_path})", server.log_tail(80))
            )
