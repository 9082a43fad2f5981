"""GPU instances on a machine without a GPU: everything that can be checked without one.

- The real tritonserver, `--model-control-mode=explicit`: loading a KIND_GPU copy of `face` fails
  with a message naming the instance group, and the server and the CPU model keep serving.
  (Triton refuses KIND_GPU itself when it sees no GPU, before the backend is asked: the backend's
  own check is reached only on a machine with a GPU; below, it runs outside the server.)
- KIND_CPU instances never load the CUDA driver library: a server is started with a stand-in
  driver (tests/fake_cuda/libcuda.c) on LD_LIBRARY_PATH that records every call, serves requests,
  and the record stays empty.
- The backend's own instance-init decision (`triton_face::gpu::Gpu::open`, the call a KIND_GPU
  instance makes) through examples/gpu_probe: with no driver at all (this machine), and with the
  stand-in driver reporting devices of chosen compute capability. The stand-in fakes the hardware;
  the code under test (cudarc loading the library at run time, the capability rule, binding the
  device, the device-to-host copy used for CUDA shared-memory inputs) is the backend's own.
The servers here run the dlib engine only: it is the engine that can use a GPU (the ONNX engine,
tract, always runs on the CPU), and instance kinds do not depend on the engine.

Which tests run depends on what this machine's NVIDIA driver reports, and the report says so:
the tests marked `needs_gpu` are SKIPPED with the driver's answer as the reason when there is no
GPU (CI here: the `-ra` summary of .ci/run lists them), the `needs_no_gpu` ones when there is.
FACE_REQUIRE_GPU=1 (for the GPU workflow) turns the GPU tests' skip into a failure.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from tritonclient.utils import InferenceServerException

from engines import DLIB, ENGINES
from face_client import (assert_person, encoded_tensors, infer, infer_encoded,
                         success_count)
from triton_server import TritonServer, rename_model


def visible_gpus() -> tuple[int, str]:
    """(GPUs the NVIDIA driver of this machine reports, the driver's answer in words); no
    driver, as on CI here, is (0, ...)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        return 0, f"no NVIDIA driver on this machine ({error})"
    result = cuda.cuInit(0)
    if result != 0:
        return 0, f"the NVIDIA driver's cuInit(0) returned CUresult {result}"
    count = ctypes.c_int(0)
    result = cuda.cuDeviceGetCount(ctypes.byref(count))
    if result != 0:
        return 0, f"the NVIDIA driver's cuDeviceGetCount returned CUresult {result}"
    return count.value, f"the NVIDIA driver reports {count.value} GPU(s)"


GPUS, DRIVER_REPORT = visible_gpus()
REQUIRE_GPU = os.environ.get("FACE_REQUIRE_GPU") == "1"
needs_gpu = pytest.mark.skipif(
    GPUS == 0 and not REQUIRE_GPU,
    reason=f"needs a GPU, and {DRIVER_REPORT}: runs in .github/workflows/gpu.yml "
           f"(FACE_REQUIRE_GPU=1 makes it run, and fail, here)",
)
needs_no_gpu = pytest.mark.skipif(
    GPUS > 0,
    reason=f"checks the no-GPU path, and {DRIVER_REPORT}: runs on machines without a GPU (.ci/run)",
)


def assert_gpu_visible() -> None:
    """First line of a needs_gpu test: with FACE_REQUIRE_GPU=1 and no GPU, fail right away."""
    assert GPUS > 0, f"FACE_REQUIRE_GPU=1 but {DRIVER_REPORT}"


FAKE_CUDA_SOURCE = Path(__file__).parent / "fake_cuda" / "libcuda.c"


@pytest.fixture(scope="module")
def gpu_probe(example) -> Path:
    return example("gpu_probe")


@pytest.fixture(scope="module")
def fake_cuda(tmp_path_factory) -> Path:
    """A directory holding the stand-in libcuda.so, for LD_LIBRARY_PATH."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.fail("no C compiler (cc/gcc) to build tests/fake_cuda: apt-get install gcc",
                    pytrace=False)
    out = tmp_path_factory.mktemp("fake_cuda")
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-o", str(out / "libcuda.so"), str(FAKE_CUDA_SOURCE)],
        check=True,
    )
    return out


def with_fake(fake: Path) -> str:
    """LD_LIBRARY_PATH with the stand-in first (the image's own paths kept after it)."""
    return os.pathsep.join(p for p in (str(fake), os.environ.get("LD_LIBRARY_PATH", "")) if p)


def probe(binary: Path, *args: str, expect: int, fake: Path | None = None,
          **fake_env: str) -> str:
    """Run gpu_probe, which must exit with code `expect` (0: OK, 1: refused) and write nothing
    to stderr (no panic, not even a caught one); returns its one or two output lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_CUDA_")}
    if fake is not None:
        env["LD_LIBRARY_PATH"] = with_fake(fake)
        env.update(fake_env)
    done = subprocess.run([str(binary), *args], env=env, capture_output=True, text=True,
                          timeout=60)
    report = (f"gpu_probe {' '.join(args)} ({fake_env or 'no stand-in driver'}): exit code "
              f"{done.returncode}, expected {expect}\nstdout: {done.stdout!r}\n"
              f"stderr: {done.stderr!r}")
    assert done.returncode == expect, report
    assert done.stderr == "", report
    return done.stdout.strip()


# ---- the real server ------------------------------------------------------------------------

def add_gpu_model(server: TritonServer, name: str = "face_gpu") -> Path:
    """A copy of the server's `face` model named `name`, with one KIND_GPU instance (and the
    same model files in its version folder: the ONNX engine's are links there)."""
    model_dir = server.root / "models" / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "gallery").mkdir()
    for linked in (server.model_dir / "1").iterdir():
        (model_dir / "1" / linked.name).symlink_to(linked.resolve())
    shutil.copy2(server.model_dir / "libtriton_face.so", model_dir / "libtriton_face.so")
    config = rename_model((server.model_dir / "config.pbtxt").read_text(), name)
    config, kinds = re.subn(r"kind:\s*KIND_CPU", "kind: KIND_GPU", config)
    config = re.sub(r"count:\s*\d+", "count: 1", config)
    assert kinds == 1, "face config.pbtxt: expected one KIND_CPU instance group"
    (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def explicit_server(suite_env, tmp_path, engine: str = "dlib") -> TritonServer:
    """A server with `face` loaded and a KIND_GPU copy `face_gpu` not loaded yet."""
    server = TritonServer(
        suite_env, tmp_path, engine=engine, params={"distance_decimals": "6"},
        extra_args=("--model-control-mode=explicit", "--load-model=face"),
    )
    add_gpu_model(server)
    return server


def instance_kinds(client, model: str) -> list[tuple[str, int]]:
    """(kind, count) of each instance group of `model`, as the server configured it."""
    return [(group["kind"], group["count"])
            for group in client.get_model_config(model)["instance_group"]]


@needs_no_gpu
@pytest.mark.parametrize("engine_name", ["dlib", "onnx"])
def test_kind_gpu_model_fails_to_load_without_gpu(suite_env, tmp_path, photos, engine_name):
    """No GPU (CI here): the load fails clearly, the rest keeps serving."""
    with explicit_server(suite_env, tmp_path, engine_name) as server:
        client = server.http()
        assert client.is_model_ready("face")
        with pytest.raises(InferenceServerException) as info:
            client.load_model("face_gpu")
        message = info.value.message() or str(info.value)
        assert "face_gpu" in message and "KIND_GPU" in message, message
        assert "no GPUs are available" in message, message
        assert not client.is_model_ready("face_gpu")
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["face_gpu"].get("state") == "UNAVAILABLE", index["face_gpu"]
        assert "KIND_GPU" in index["face_gpu"].get("reason", ""), index["face_gpu"]

        # The failed load touched nothing else: the server and `face` still serve. (With
        # Triton's default --strict-readiness, /v2/health/ready now reports false because a model
        # it was asked to load is unavailable; liveness and the other models are unaffected.)
        assert client.is_server_live()
        assert client.is_model_ready("face")
        assert index["face"].get("state") == "READY", index["face"]
        [doc] = infer_encoded(client, [photos.bytes("obama.jpg")])
        assert_person(doc, "obama", ENGINES[engine_name])
        assert success_count(client, "face", at_least=1) == 1
        assert server.running


@needs_gpu
def test_kind_gpu_onnx_model_runs_on_cuda(suite_env, tmp_path, photos):
    """With a GPU (the GPU workflow, whose image points ORT_DYLIB_PATH at the tritonserver
    image's CUDA build of onnxruntime): the ONNX engine's KIND_GPU copy runs on onnxruntime's
    CUDA provider and answers as the CPU model does."""
    assert_gpu_visible()
    server = explicit_server(suite_env, tmp_path, "onnx")
    shutil.copy2(photos.path("obama.jpg"), server.root / "models" / "face_gpu" / "gallery")
    with server:
        client = server.http()
        client.load_model("face_gpu")
        assert instance_kinds(client, "face_gpu") == [("KIND_GPU", 1)]
        [cpu] = infer_encoded(client, [photos.bytes("obama2.jpg")])
        [gpu] = infer(client, encoded_tensors([photos.bytes("obama2.jpg")]), model="face_gpu")
        assert_person(gpu, "obama", ENGINES["onnx"])
        assert abs(cpu["faces"][0]["distance"] - gpu["faces"][0]["distance"]) < 1e-3
        log = server.log_text()
        assert re.search(r"'face_gpu'.* engine on GPU 0 \(onnxruntime CUDA\)", log), log


@needs_gpu
def test_kind_gpu_model_serves_on_gpu(suite_env, tmp_path, photos):
    """With a GPU (the GPU workflow): the KIND_GPU copy loads, binds GPU 0 and serves."""
    assert_gpu_visible()
    with explicit_server(suite_env, tmp_path) as server:
        client = server.http()
        client.load_model("face_gpu")
        assert client.is_model_ready("face_gpu")
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["face_gpu"].get("state") == "READY", index["face_gpu"]
        assert instance_kinds(client, "face_gpu") == [("KIND_GPU", 1)]
        [doc] = infer(client, encoded_tensors([photos.bytes("obama.jpg")]), model="face_gpu")
        assert_person(doc, "unknown", DLIB)  # its gallery is empty
        assert success_count(client, "face_gpu", at_least=1) == 1
        # Which device the instance bound and where dlib runs are the backend's own news: the
        # server has no structured signal for them, so the log is what is checked.
        log = server.log_text()
        assert re.search(r"instance 'face_gpu_0_0': GPU 0 '.+' \(compute capability", log), log
        assert re.search(r"'face_gpu'.* engine on (GPU 0|CPU \(dlib without CUDA\))", log), log


def test_kind_cpu_instances_never_load_the_cuda_driver(suite_env, tmp_path, photos, fake_cuda,
                                                       gpu_probe, monkeypatch):
    record = tmp_path / "cuda-calls.txt"
    # The record works: code that does use CUDA leaves its calls in it.
    out = probe(gpu_probe, "0", "6.0", expect=0, fake=fake_cuda, FAKE_CUDA_LOG=str(record))
    assert out == "OK GPU 0 'Fake GPU' (compute capability 8.6, 16384 MiB)", out
    assert "cuInit" in record.read_text()
    record.unlink()

    monkeypatch.setenv("LD_LIBRARY_PATH", with_fake(fake_cuda))
    monkeypatch.setenv("FAKE_CUDA_LOG", str(record))
    server = TritonServer(suite_env, tmp_path / "server")  # `face`: two KIND_CPU instances
    with server:
        client = server.http()
        assert instance_kinds(client, "face") == [("KIND_CPU", 2)]
        for name in ("obama.jpg", "biden.jpg"):
            [doc] = infer_encoded(client, [photos.bytes(name)])
            assert_person(doc, name.removesuffix(".jpg"), DLIB)
        assert success_count(client, "face", at_least=2) == 2
    # Where the engine runs is the backend's own news (no structured signal): its log line.
    log = server.log_text()
    # A CUDA-built dlib (Dockerfile.build) says its networks use GPU 0 anyway.
    assert re.search(r"engine on (CPU|GPU 0 \(dlib built with CUDA\))", log), (
        "instances should log where their engine runs"
    )
    assert not record.exists(), f"a KIND_CPU server called the CUDA driver: {record.read_text()}"


# ---- the backend's decision, outside the server ---------------------------------------------

@needs_no_gpu
def test_this_machines_driver_refuses_gpu_instances(gpu_probe):
    """Without a driver (CI here): a KIND_GPU instance is refused, saying why and what to do."""
    out = probe(gpu_probe, "0", "6.0", expect=1)
    assert out == (
        "ERR Unavailable: instance 'gpu_probe' is KIND_GPU (device 0) but no CUDA driver was "
        "found (libcuda.so could not be loaded); install the NVIDIA driver or use KIND_CPU"
    ), out


@needs_gpu
def test_this_machines_driver_accepts_gpu_0(gpu_probe):
    """With a driver and a GPU: GPU 0 passes the rule (6.0 is the default minimum)."""
    assert_gpu_visible()
    out = probe(gpu_probe, "0", "6.0", expect=0)
    assert re.fullmatch(r"OK GPU 0 '.+' \(compute capability \d+\.\d+, \d+ MiB\)", out), out


@pytest.mark.parametrize(
    "device_cc, minimum, accepted",
    [("3.7", "6.0", False), ("5.2", "6.0", False), ("6.0", "6.0", True), ("8.6", "6.0", True),
     ("7.0", "7.5", False), ("10.0", "9.0", True)],
)
def test_compute_capability_rule(gpu_probe, fake_cuda, device_cc, minimum, accepted):
    out = probe(gpu_probe, "0", minimum, expect=0 if accepted else 1, fake=fake_cuda,
                FAKE_CUDA_CC=device_cc, FAKE_CUDA_NAME="Tesla Test")
    device = f"GPU 0 'Tesla Test' (compute capability {device_cc}, 16384 MiB)"
    if accepted:
        assert out == f"OK {device}", out
    else:
        assert out == (
            f"ERR Unsupported: instance 'gpu_probe': {device} is below the minimum compute "
            f"capability {minimum} (model parameter min_compute_capability)"
        ), out


def test_missing_device_is_refused(gpu_probe, fake_cuda):
    out = probe(gpu_probe, "2", "6.0", expect=1, fake=fake_cuda, FAKE_CUDA_DEVICES="2")
    assert out == (
        "ERR Unavailable: instance 'gpu_probe' is KIND_GPU but CUDA device 2 could not be "
        "opened: CUDA_ERROR_INVALID_DEVICE: invalid device ordinal"
    ), out

    out = probe(gpu_probe, "0", "6.0", expect=1, fake=fake_cuda, FAKE_CUDA_DEVICES="0")
    assert out == (
        "ERR Unavailable: instance 'gpu_probe' is KIND_GPU but CUDA device 0 could not be "
        "opened: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected"
    ), out


def test_gpu_memory_input_is_copied_to_host(gpu_probe, fake_cuda):
    """An input on another GPU than the instance's: copied, and the instance's device stays
    current for the engine (the stand-in's "device memory" is host memory)."""
    out = probe(gpu_probe, "1", "6.0", "--copy-from", "0", expect=0, fake=fake_cuda,
                FAKE_CUDA_DEVICES="2")
    assert out.splitlines() == [
        "OK GPU 1 'Fake GPU' (compute capability 8.6, 16384 MiB)",
        "COPY OK 256 bytes from GPU 0; GPU 1 still current",
    ], out
