"""A tritonserver on this machine for a client that found none: serves model_repository/ on the
ports a local URL names, stopped when the process that started it exits.

The binary is $TRITONSERVER (assets/env.sh, written by scripts/setup.sh); the models need
libtriton_face.so in their folders (scripts/app.sh and scripts/run.sh put it there).
"""

from __future__ import annotations

import atexit
import os
import subprocess
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCAL_HOSTS = ("localhost", "127.0.0.1")
READY_TIMEOUT_S = 180.0


class NotStarted(Exception):
    """Why no server could be started (a sentence for a person)."""


def is_local(url: str) -> bool:
    return url.rsplit(":", 1)[0] in LOCAL_HOSTS


def is_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{url}/v2/health/ready", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


# Servers started by this process, stopped when it exits.
STARTED: list[subprocess.Popen] = []


def stop_all() -> None:
    while STARTED:
        server = STARTED.pop()
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


atexit.register(stop_all)


def ensure(url: str, announce=lambda text: None) -> None:
    """A server answers at `url` afterwards: one is started (and `announce`d) when none does and
    the URL is local; NotStarted says why not."""
    if is_ready(url):
        return
    if not is_local(url):
        raise NotStarted(f"No Triton server answers at {url}.")
    announce(f"No server at {url}: starting tritonserver on model_repository/ ...")
    try:
        start(url)
    except NotStarted as e:
        raise NotStarted(f"Could not start a server at {url}: {e}") from None


def start(url: str, repository: Path = REPO_ROOT / "model_repository",
          log: Path = REPO_ROOT / "out" / "app-tritonserver.log") -> subprocess.Popen:
    """Start tritonserver for `url` (host:port; gRPC and metrics on the next two ports) and wait
    until it is ready; raises NotStarted with the log's last lines if it is not."""
    binary = os.environ.get("TRITONSERVER", "")
    if not binary or not os.access(binary, os.X_OK):
        raise NotStarted(
            "no tritonserver to start: TRITONSERVER is not set; run the app with "
            "`bash scripts/app.sh` (it sets up, builds and sets it)")
    port = int(url.rsplit(":", 1)[1])
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [binary, f"--model-store={repository}", f"--http-port={port}",
             f"--grpc-port={port + 1}", f"--metrics-port={port + 2}"],
            stdout=out, stderr=subprocess.STDOUT)
    STARTED.append(server)
    if wait_ready(url, lambda: server.poll() is None, READY_TIMEOUT_S):
        return server
    STARTED.remove(server)
    if server.poll() is not None:
        raise NotStarted(f"tritonserver exited ({server.returncode}):\n{tail(log)}")
    server.kill()
    raise NotStarted(f"tritonserver not ready after {READY_TIMEOUT_S:.0f} s:\n{tail(log)}")


def wait_ready(url: str, alive, timeout: float) -> bool:
    """Whether the server at `url` became ready within `timeout` s; False at once when
    `alive()` says its process is gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_ready(url):
            return True
        if not alive():
            return False
        time.sleep(0.3)
    return False


def tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {log})"
