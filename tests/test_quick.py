"""The inner loop (scripts/quick.sh): the unit tests and a module against a dev server that keeps
running between calls, reused while the library is the same, started again when it changed,
stopped by --stop."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import tritonclient.http as httpclient

from environment import REPO_ROOT

MODULE = ["tests/test_top_k.py", "-k", "bad_top_k", "-p", "no:cacheprovider"]


def _run(command: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(command)} failed ({done.returncode}):\n{output}"
    return output


def _served(state_dir: Path) -> tuple[int, int]:
    """(pid, successful inferences of `face`) of the dev server of onnx."""
    state = json.loads((state_dir / "onnx.json").read_text())
    client = httpclient.InferenceServerClient(f"127.0.0.1:{state['http_port']}")
    try:
        [stats] = client.get_inference_statistics("face")["model_stats"]
    finally:
        client.close()
    return state["pid"], int(stats["inference_stats"]["success"]["count"])


def _alive(pid: int) -> bool:
    """Runs (a zombie waiting for init to reap it has stopped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_quick_runs_unit_tests_and_a_module_on_a_server_kept_running(tmp_path, suite_env):
    state_dir = tmp_path / "dev"
    env = dict(os.environ, FACE_TEST_SERVER=str(state_dir))
    env.pop("PYTEST_XDIST_WORKER", None)
    try:
        out = _run(["bash", "scripts/quick.sh", *MODULE, f"--basetemp={tmp_path / 'bt1'}"], env)
        assert "test result: ok." in out, out  # cargo's unit tests
        assert "dev server (onnx) started" in out, out
        assert "2 passed" in out and "deselected" in out, out  # the dlib ones deselected
        pid, count = _served(state_dir)
        assert count > 0, "the module's requests went to the dev server"

        out = _run(["bash", "scripts/quick.sh", *MODULE, f"--basetemp={tmp_path / 'bt2'}"], env)
        assert "dev server (onnx) running, reused" in out, out
        again, more = _served(state_dir)
        assert again == pid and more > count, (pid, again, count, more)

        # Another library (one byte more): the server that serves the old one is replaced.
        changed = tmp_path / "libtriton_face.so"
        shutil.copy2(suite_env.backend_lib, changed)
        with open(changed, "ab") as lib:
            lib.write(b"\0")
        start = [os.environ.get("PYTHON", "python3"), "tests/dev_server.py", "start"]
        out = _run(start, dict(env, FACE_BACKEND_LIB=str(changed)))
        assert "dev server (onnx) started" in out, out
        new, _ = _served(state_dir)
        assert new != pid and not _alive(pid), "the old server was stopped"
    finally:
        out = _run(["bash", "scripts/quick.sh", "--stop"], env)
    assert "dev server (onnx) stopped" in out, out
    assert not _alive(new) and not (state_dir / "onnx.json").exists()
