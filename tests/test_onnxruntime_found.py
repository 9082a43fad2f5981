"""onnxruntime found without set-up: with neither the model parameter `onnxruntime_library` nor
ORT_DYLIB_PATH, the ONNX engine loads the library beside libtriton_face.so, else the one in
Triton's own onnxruntime backend folder (`<backend-directory>/onnxruntime/`, as every NGC image
has it), logs which one it loaded and its version, and when there is none the model fails with
an error that lists every place tried. A plain tritonserver, the variable removed from its
environment; the library is the one scripts/setup.sh installed (the PyPI wheel's)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from face_client import infer_encoded
from triton_server import TritonServer

NO_VARIABLE = {"ORT_DYLIB_PATH": None}


@pytest.fixture(scope="module")
def wheel_library() -> Path:
    path = os.environ.get("ORT_DYLIB_PATH")
    if not path or not Path(path).is_file():
        pytest.fail("ORT_DYLIB_PATH names no library: run through scripts/test.sh "
                    "(scripts/setup.sh installs onnxruntime from PyPI)", pytrace=False)
    return Path(path)


def _names(server: TritonServer, photos) -> list[str]:
    [doc] = infer_encoded(server.http(), [photos.bytes("obama2.jpg")])
    return [face["name"] for face in doc["faces"]]


def _loaded_line(log: str) -> str:
    lines = [line for line in log.splitlines() if "onnx (onnxruntime " in line]
    assert lines, f"no log line names the onnxruntime loaded:\n{log[-3000:]}"
    return lines[0]


def test_found_in_tritons_onnxruntime_backend(suite_env, tmp_path, photos, wheel_library):
    server = TritonServer(suite_env, tmp_path, engine="onnx", env=NO_VARIABLE)
    folder = tmp_path / "backends" / "onnxruntime"
    folder.mkdir()
    # Triton's folder holds it under the plain name.
    (folder / "libonnxruntime.so").symlink_to(wheel_library)
    try:
        server.start()
        assert _names(server, photos) == ["obama"]
        line = _loaded_line(server.log_text())
        found = re.search(r"onnx \(onnxruntime (\d+\.\d+\.\d+) from (\S+);", line)
        assert found and found[2] == str(folder / "libonnxruntime.so"), line
        # The wheel's file name carries its version (an image's plain name does not).
        named = re.fullmatch(r"libonnxruntime\.so\.(\d+\.\d+\.\d+)", wheel_library.name)
        if named:
            assert found[1] == named[1], line
    finally:
        server.stop()


def test_found_beside_the_backend_library(suite_env, tmp_path, photos, wheel_library):
    server = TritonServer(suite_env, tmp_path, engine="onnx", env=NO_VARIABLE)
    # The wheel's own, versioned name, dropped beside libtriton_face.so; Triton's folder is
    # there too and comes second.
    beside = server.model_dir / wheel_library.name
    beside.symlink_to(wheel_library)
    (tmp_path / "backends" / "onnxruntime").mkdir()
    (tmp_path / "backends" / "onnxruntime" / "libonnxruntime.so").symlink_to(wheel_library)
    try:
        server.start()
        assert _names(server, photos) == ["obama"]
        assert f"from {beside};" in _loaded_line(server.log_text())
    finally:
        server.stop()


def test_none_found_lists_every_place_tried(suite_env, tmp_path):
    server = TritonServer(suite_env, tmp_path, engine="onnx", env=NO_VARIABLE)
    log = server.start_expecting_exit()
    assert "no library found" in log, log[-3000:]
    for place in ("onnxruntime_library", "ORT_DYLIB_PATH",
                  f"{server.model_dir}/libonnxruntime.so* (beside libtriton_face.so)",
                  f"{tmp_path / 'backends'}/onnxruntime/libonnxruntime.so* "
                  "(Triton's onnxruntime backend)"):
        assert place in log, f"{place!r} not in the error:\n{log[-3000:]}"
