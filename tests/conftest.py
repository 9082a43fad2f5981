"""Fixtures: the located environment, the photos, and real tritonservers serving the `face` model.

- `suite_env` / `photos`: session-wide; a missing tritonserver, weight, photo or backend library
  FAILS every test with a message naming what to run (scripts/setup.sh, cargo build --release).
- `probe`: bytes of a small one-face photo, to check that a server still serves.
- `server` (+ `http`, `grpc` clients of it): one server per test module with the default config
  and gallery {obama, biden}, for tests that do not change server state. A module can override
  `server` (see test_limits.py) and keep using `http` / `grpc`.
- `start_server(params=..., gallery=...)`: function-scoped factory for tests that need their own
  config, gallery or restarts; every server it made is stopped after the test, pass or fail.
  `start_module_server` is the same with module lifetime. Both pass further keywords to
  TritonServer: `model="face_sequence"`, `config_edits=[(regex, replacement)]`, `metrics=True`.
When a test fails, the tail of each running server's log is attached to its report.
"""

from __future__ import annotations

import re

import pytest

from environment import MissingAsset, Photos, SuiteEnv, resolve_env
from triton_server import TritonServer, live_servers


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
def probe(photos) -> bytes:
    return photos.bytes("obama_640x480.jpg")


def _server_factory(suite_env, tmp_path_factory, prefix):
    started: list[TritonServer] = []

    def start(params=None, gallery=None, extra_args=(), **options) -> TritonServer:
        root = tmp_path_factory.mktemp(prefix)  # numbered: prefix0, prefix1, ...
        try:
            server = TritonServer(
                suite_env, root, params=params, gallery=gallery, extra_args=extra_args, **options
            )
        except MissingAsset as missing:  # e.g. no model_repository/<model>/config.pbtxt
            pytest.fail(str(missing), pytrace=False)
        started.append(server)
        return server.start()

    return start, started


def _stop_all(servers: list[TritonServer]) -> None:
    for server in servers:
        server.stop()


@pytest.fixture
def start_server(suite_env, tmp_path_factory, request):
    prefix = re.sub(r"[^\w.-]+", "_", request.node.name)[:40]
    start, started = _server_factory(suite_env, tmp_path_factory, prefix)
    yield start
    _stop_all(started)


@pytest.fixture(scope="module")
def start_module_server(suite_env, tmp_path_factory, request):
    """Like start_server, but the servers live until the end of the test module."""
    start, started = _server_factory(suite_env, tmp_path_factory, request.module.__name__)
    yield start
    _stop_all(started)


@pytest.fixture(scope="module")
def server(start_module_server) -> TritonServer:
    """Default config, gallery {obama.jpg, biden.jpg}. Do not enroll through it."""
    return start_module_server()


@pytest.fixture(scope="module")
def http(server):
    return server.http()


@pytest.fixture(scope="module")
def grpc(server):
    return server.grpc()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for server in live_servers():
            report.sections.append(
                (f"tritonserver log tail ({server.log_path})", server.log_tail(80))
            )
