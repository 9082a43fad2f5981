"""A test server that keeps running between commands: the inner loop's (scripts/quick.sh).

    python tests/dev_server.py start --engine onnx   # started, or the running one reused
    python tests/dev_server.py stop                   # every engine's

It is the server the `server` fixture would start (tests/conftest.py: default config, gallery
{obama, biden}), in `$FACE_TEST_SERVER` (default out/dev_server): `<engine>/` holds its model
repository and log, `<engine>.json` its process and ports. `start` reuses a running one only
while it serves the library `target/release` holds now (byte for byte), else starts it again.
With FACE_TEST_SERVER set, the suite's `server` fixture attaches to the running server of its
engine (`attach`) instead of starting one, while it serves the library under test; tests that
need their own config still start theirs.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from environment import REPO_ROOT, MissingAsset, SuiteEnv, resolve_env
from triton_server import _LIVE, ENGINE_NAMES, MODEL, TritonServer

STATE_DIR_VAR = "FACE_TEST_SERVER"


def state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_VAR) or REPO_ROOT / "out" / "dev_server").resolve()


class RunningServer(TritonServer):
    """A server an earlier command started (`start` below). Tests talk to it like to their own,
    but never stop, kill or restart it: it is not theirs."""

    def __init__(self, suite: SuiteEnv, state: dict):  # no repository is built: it exists
        self.env = suite
        self.root = Path(state["root"])
        self.model = MODEL
        self.models = (MODEL,)
        self.engine = state["engine"]
        self.model_dir = self.root / "models" / MODEL
        self.gallery_dir = self.model_dir / "gallery"
        self.extra_args = ()
        self.metrics = False
        self.process_env = {}
        self.detached = True
        self.proc = None
        self.pid = int(state["pid"])
        self.log_path = Path(state["log"])
        self.http_port, self.grpc_port = int(state["http_port"]), int(state["grpc_port"])
        self.metrics_port = 0
        self._runs = 1
        self.exited_early = False
        self._clients = []

    @property
    def running(self) -> bool:
        return _alive(self.pid, self.root)

    def start(self, timeout: float = 0) -> "TritonServer":
        raise AssertionError("a running dev server is not started by a test")

    def stop(self, timeout: float = 0) -> int | None:
        self._close_clients()  # the server itself keeps running for the next command
        return None

    def kill(self) -> int | None:
        raise AssertionError("a test may not kill the running dev server: use start_server")

    def restart(self) -> "TritonServer":
        raise AssertionError("a test may not restart the running dev server: use start_server")

    def discard_library(self) -> None:
        pass

    def rss_kib(self) -> int:
        status = Path(f"/proc/{self.pid}/status").read_text()
        return int(status.split("VmRSS:")[1].split()[0])


def _alive(pid: int, root: Path) -> bool:
    """The process `pid` runs and is a tritonserver on `root`'s repository (not a reused pid)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"--model-repository={root / 'models'}".encode() in command


def _read_state(engine: str) -> dict | None:
    path = state_dir() / f"{engine}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def attach(suite: SuiteEnv, engine: str) -> RunningServer | None:
    """The running dev server of `engine` when FACE_TEST_SERVER is set and one answers ready."""
    if not os.environ.get(STATE_DIR_VAR):
        return None
    state = _read_state(engine)
    if state is None:
        return None
    server = RunningServer(suite, state)
    return server if _serves(server, suite) else None


def _serves(server: RunningServer, suite: SuiteEnv) -> bool:
    """It runs, is ready, and serves the library the suite tests now, byte for byte."""
    served = server.model_dir / "libtriton_face.so"
    return (server.running and server.is_ready() and served.is_file()
            and filecmp.cmp(served, suite.backend_lib, shallow=False))


def stop(engine: str) -> bool:
    """Stops the dev server of `engine` (SIGTERM, SIGKILL after 15 s); True if one ran."""
    state = _read_state(engine)
    (state_dir() / f"{engine}.json").unlink(missing_ok=True)
    if state is None or not _alive(int(state["pid"]), Path(state["root"])):
        return False
    pid = int(state["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while _alive(pid, Path(state["root"])) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid, Path(state["root"])):
        os.kill(pid, signal.SIGKILL)
    return True


def start(suite: SuiteEnv, engine: str) -> tuple[RunningServer, bool]:
    """The running dev server of `engine` when it serves today's library; else a new one.
    Returns it and whether it was reused."""
    state = _read_state(engine)
    if state is not None:
        server = RunningServer(suite, state)
        if _serves(server, suite):
            return server, True
    stop(engine)
    root = state_dir() / engine
    shutil.rmtree(root, ignore_errors=True)
    new = TritonServer(suite, root, engine=engine, detached=True).start()
    _LIVE.discard(new)  # it outlives this command: no kill at exit
    state = {
        "engine": engine, "pid": new.proc.pid, "root": str(root), "log": str(new.log_path),
        "http_port": new.http_port, "grpc_port": new.grpc_port,
    }
    (state_dir() / f"{engine}.json").write_text(json.dumps(state, indent=1) + "\n")
    return RunningServer(suite, state), False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--engine", choices=ENGINE_NAMES, default="onnx")
    parser.add_argument("--all", action="store_true", help="stop: every engine's server")
    args = parser.parse_args()
    state_dir().mkdir(parents=True, exist_ok=True)
    if args.action == "stop":
        for engine in ENGINE_NAMES if args.all else (args.engine,):
            if stop(engine):
                print(f"dev server ({engine}) stopped")
        return 0
    try:
        suite = resolve_env()
    except MissingAsset as missing:
        print(f"dev_server: {missing}", file=sys.stderr)
        return 2
    try:
        server, reused = start(suite, args.engine)
    except pytest.fail.Exception as failed:  # TritonServer.start's report, with the log
        print(f"dev_server: {failed.msg}", file=sys.stderr)
        return 1
    what = "running, reused" if reused else "started"
    print(
        f"dev server ({args.engine}) {what}: pid {server.pid}, HTTP 127.0.0.1:{server.http_port}, "
        f"gRPC 127.0.0.1:{server.grpc_port}, log {server.log_path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
