#!/usr/bin/env python3
"""face_onnx_int8 against its float twin face_onnx_resnet and against face_onnx, end to end,
in one server (issue 74).

The three shipped models (model_repository/, their version folders' files as scripts/setup.sh
and scripts/models.sh made them) served together by one tritonserver; perf_analyzer (gRPC) on
a one-face 640x480 photo as ENCODED (JPEG) and IMAGE at each --concurrency, the models in
serpentine rounds (forward, then backward) so that the machine's drift falls on all alike.
Writes out/bench-int8.txt: frames/s, p50 and p99 per model, input and concurrency (mean of the
rounds), and each model's frames/s as a ratio of face_onnx_resnet's and face_onnx's.

  python benches/int8/serve.py [--concurrency "1 8"] [--rounds 2] [--window-ms 3000]
Needs assets/env.sh sourced and the release library built (scripts/build.sh).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_spec = importlib.util.spec_from_file_location("engine_batch", ROOT / "benches/engine_batch/run.py")
engine_batch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(engine_batch)

MODELS = ("face_onnx", "face_onnx_resnet", "face_onnx_int8")
INPUTS = ("encoded", "image")


def copy_model(models: Path, name: str) -> None:
    """The shipped model folder: its config, its version folder's files (links followed)."""
    src, d = ROOT / "model_repository" / name, models / name
    (d / "1").mkdir(parents=True)
    shutil.copy2(src / "config.pbtxt", d / "config.pbtxt")
    for f in (src / "1").glob("*.onnx"):
        if f.exists():
            (d / "1" / f.name).symlink_to(f.resolve())
    shutil.copytree(src / "gallery", d / "gallery")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1 8")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--window-ms", type=int, default=3000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-int8-"))
    models, backends = work / "models", work / "backends" / "face"
    backends.mkdir(parents=True)
    shutil.copy2(ROOT / "target/release/libtriton_face.so", backends / "libtriton_face.so")
    for name in MODELS:
        copy_model(models, name)
    cells = [(s, c) for s in INPUTS for c in (int(x) for x in args.concurrency.split())]
    out = ROOT / "out"
    results = engine_batch.serve_and_measure(models, backends.parent, list(MODELS), cells, args,
                                             work, out / "bench-int8")
    engine_batch.report(
        out / "bench-int8.txt", args, work,
        "| input | concurrency | model | frames/s | p50 ms | p99 ms | vs face_onnx_resnet | vs face_onnx |",
        engine_batch.table(results, cells, list(MODELS), ["face_onnx_resnet", "face_onnx"]))

if __name__ == "__main__":
    main()
