"""The C boundary fails closed, checked outside the server and on the built library itself.

- A stand-in host (tests/fake_server/host.c) loads the built backend into a process that provides
  only part of the Triton C API, as an older or foreign server would, and calls its entry points:
  each must return an error that names the missing symbol and the server version needed, never
  NULL (success). Without even the error API, the backend must stop the process with a message
  rather than report success.
- `nm -D` of the library: it exports the TRITONBACKEND_* entry points and nothing else.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import pytest

HOST_SOURCE = Path(__file__).parent / "fake_server" / "host.c"
ENTRY_POINTS = {
    "TRITONBACKEND_Initialize",
    "TRITONBACKEND_Finalize",
    "TRITONBACKEND_ModelInitialize",
    "TRITONBACKEND_ModelFinalize",
    "TRITONBACKEND_ModelInstanceInitialize",
    "TRITONBACKEND_ModelInstanceFinalize",
    "TRITONBACKEND_ModelInstanceExecute",
}
TRITONSERVER_ERROR_UNSUPPORTED = 5


def _tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"`{name}` is needed for this test: apt-get install {package}", pytrace=False)
    return path


def _build_host(out: Path, *defines: str) -> Path:
    compiler = shutil.which("cc") or _tool("gcc", "gcc")
    # -rdynamic: the host's functions are visible to dlsym, like tritonserver's.
    cmd = [compiler, "-O1", "-rdynamic", *defines, "-o", str(out), str(HOST_SOURCE), "-ldl"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="module")
def partial_host(tmp_path_factory) -> Path:
    return _build_host(tmp_path_factory.mktemp("host") / "host")


@pytest.fixture(scope="module")
def errorless_host(tmp_path_factory) -> Path:
    return _build_host(tmp_path_factory.mktemp("host") / "host-no-errors", "-DNO_ERROR_API")


def _run(host: Path, lib: Path, entry: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(host), str(lib), entry], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("entry", ["init", "model", "execute"])
def test_missing_server_symbols_fail_the_entry_point(suite_env, partial_host, entry):
    done = _run(partial_host, suite_env.backend_lib, entry)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.startswith(f"ERROR {TRITONSERVER_ERROR_UNSUPPORTED}: "), done.stdout
    # Names the first symbol it could not find and the server it needs.
    assert "undefined symbol: TRITON" in done.stdout, done.stdout
    assert "24.10" in done.stdout and "TRITONBACKEND API 1.19" in done.stdout, done.stdout


def test_without_the_error_api_the_backend_stops_instead_of_succeeding(suite_env, errorless_host):
    done = _run(errorless_host, suite_env.backend_lib, "init")
    assert "SUCCESS" not in done.stdout
    assert done.returncode == -signal.SIGABRT, f"exit {done.returncode}\n{done.stderr}"
    assert "cannot report an error to the server" in done.stderr, done.stderr


def test_only_the_entry_points_are_exported(suite_env):
    nm = _tool("nm", "binutils")
    out = subprocess.run([nm, "-D", "--defined-only", str(suite_env.backend_lib)],
                         check=True, capture_output=True, text=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert exported == ENTRY_POINTS, f"unexpected exports: {sorted(exported ^ ENTRY_POINTS)}"
