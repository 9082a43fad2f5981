"""The offline GPU bundle (scripts/gpu_bundle.sh), on this machine: it builds, it comes in parts
of at most 60 MB that match their SHA-256 list, it unpacks with cat, xz and tar alone, the
backend in it needs nothing from the system beyond glibc and the C++ runtime, and its check
(`gpu_check.sh --cpu`) serves the sample photos, the sample video, the dlib engine and
perf_analyzer (its sweep, and the video streams without the check) from the unpacked bundle
alone, in a bare environment: no .venv, no assets/, no path of the checkout, LD_LIBRARY_PATH
empty.

The suite packs with `xz -0` (GPU_BUNDLE_XZ) and without onnxruntime's CUDA provider
(GPU_BUNDLE_CUDA_PROVIDER=0: 271 MB that the CPU check never loads): the same parts and the
same unpacking in about 15 s instead of 3 minutes; a real bundle has it and uses xz -6.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest

from environment import REPO_ROOT

NAME = "triton-face-gpu"
PART_BYTES = 60_000_000
# What every x86-64 Linux has; everything else the backend loads must come from the bundle.
BASE = re.compile(r"^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|lib(c|m|mvec|dl|pthread|rt|resolv)"
                  r"\.so\.\d|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$")


def bare_env(home: Path) -> dict[str, str]:
    """A shell's bare minimum: no variable of the suite, the venv or assets/env.sh."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle")
    env = dict(os.environ, GPU_BUNDLE_XZ="-0", GPU_BUNDLE_CUDA_PROVIDER="0")
    done = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu_bundle.sh"), "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def bundle(parts, tmp_path_factory) -> Path:
    """The parts unpacked in an empty folder by cat, xz and tar, in a bare environment."""
    where = tmp_path_factory.mktemp("unpacked")
    for part in parts.iterdir():
        (where / part.name).write_bytes(part.read_bytes())
    done = subprocess.run(
        ["bash", "-c", f"sha256sum -c SHA256SUMS && cat {NAME}.tar.xz.part-* | xz -d | tar -x"],
        cwd=where, env=bare_env(where), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return where / NAME


def test_parts_are_at_most_60_mb_and_match_their_list(parts):
    names = sorted(p.name for p in parts.glob(f"{NAME}.tar.xz.part-*"))
    assert len(names) >= 2, names
    listed = {}
    for line in (parts / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name] = digest
    assert sorted(listed) == names
    for name in names:
        data = (parts / name).read_bytes()
        assert len(data) <= PART_BYTES, f"{name}: {len(data)} bytes"
        assert hashlib.sha256(data).hexdigest() == listed[name], name
    assert "xz -d | tar -x" in (parts / "UNPACK.txt").read_text()


def test_the_backend_needs_only_glibc_and_libstdcxx_from_the_system(bundle):
    """ldd of the bundle's backend: each library resolves inside the bundle or is of the base
    system; none is missing (what libtriton_face.so carries is in triton_face.libs/)."""
    lib = bundle / "backends" / "face" / "libtriton_face.so"
    done = subprocess.run(["ldd", str(lib)], env=bare_env(bundle), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    outside = []
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>":
            soname, path = parts[0], parts[2]
            if not BASE.match(soname) and not path.startswith(str(lib.parent) + "/"):
                outside.append(f"{soname} => {path}")
    assert not outside, f"resolved outside the bundle: {outside}\n{done.stdout}"
    carried = sorted(p.name for p in (lib.parent / "triton_face.libs").iterdir())
    assert "libdlib.so.19.1" in carried and "libturbojpeg.so.0" in carried, carried
    assert not [name for name in carried if "opencv" in name], carried


def test_gpu_check_cpu_serves_from_the_bundle_alone(bundle):
    """gpu_check.sh --cpu, started with nothing of the checkout: every check passes."""
    done = subprocess.run(["bash", "gpu_check.sh", "--cpu", "--perf-ms", "500", "--sweep", "1x1b2",
                           "--sweep-inputs", "image image-shm encoded", "--sweep-concurrency", "4"],
                          cwd=bundle,
                          env=bare_env(bundle), capture_output=True, text=True, timeout=600)
    summary_file = bundle / "out" / "summary.md"
    summary = summary_file.read_text() if summary_file.exists() else "(no summary.md)"
    assert done.returncode == 0, summary + "\n" + done.stdout[-4000:] + done.stderr[-2000:]
    assert "All checks passed." in summary, summary
    for check in ("sample photos: face_onnx_gpu answers as face_onnx_cpu",
                  "sample photos: face_yunet_gpu answers as face_yunet_cpu",
                  "sample photos: names on face_yunet_gpu", "sample video through "
                  "face_sequence_gpu", "dlib engine on face_dlib_gpu", "perf_analyzer"):
        assert re.search(rf"\| {re.escape(check)}.*\| yes \|", summary), (check, summary)
    # The sweep (--sweep) measured its one variant, batched, with each input.
    sweep = (bundle / "out" / "sweep.md").read_text()
    for source in ("image", "image-shm", "encoded"):
        row = rf"^\| CPU 1 x 1, batch 2 \| {source} \| 4 \| 1 \| \d+\.\d \|"
        assert re.search(row, sweep, re.M), sweep
    # Nothing of the checkout was used: the server loaded the bundle's own libraries.
    log = (bundle / "out" / "server.log").read_text()
    assert str(REPO_ROOT) not in log, "the server log names a path of the checkout"
    assert f"onnxruntime 1.31.1 from {bundle}/backends/face/" in log, log[-2000:]


def test_gpu_check_measures_streams_without_the_check(bundle):
    """gpu_check.sh --skip-check --streams: the video streams alone (a second call on a GPU
    machine whose commands have a time limit), from the bundle alone."""
    done = subprocess.run(["bash", "gpu_check.sh", "--cpu", "--skip-check", "--out", "out-streams",
                           "--perf-ms", "500", "--streams", "2", "--streams-instances", "1"],
                          cwd=bundle, env=bare_env(bundle), capture_output=True, text=True,
                          timeout=600)
    out = bundle / "out-streams"
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert not (out / "summary.md").exists(), "the check ran"
    # 2 sequences of the video's JPEG frames at 20 requests/s in all, answered (whether 95%
    # were is the machine's: not asserted).
    streams = (out / "streams.md").read_text()
    assert "150 JPEG frames" in streams, streams
    row = re.search(r"^\| 2 \| 20 \| (\d+\.\d) \| (yes|no) \|", streams, re.M)
    assert row and float(row[1]) > 0, streams
    # With nothing asked beside it, --skip-check refuses.
    done = subprocess.run(["bash", "gpu_check.sh", "--cpu", "--skip-check", "--out", "out-none"],
                          cwd=bundle, env=bare_env(bundle), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "nothing to do" in done.stderr, done.stderr
