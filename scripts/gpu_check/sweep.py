#!/usr/bin/env python3
"""How a GPU model's throughput depends on its instances and batch_threads (run by
`gpu_check.sh --sweep`, after the check). For each variant "NxT" (N instances of T threads,
max_batch_size 32, 0.5 ms queue delay) it loads the ONNX model alone, runs perf_analyzer on a
one-face 640x480 IMAGE at each concurrency, reads the GPU's memory and load, and unloads it.
Writes OUT/sweep.md; the rest goes to OUT/sweep/."""
from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
import time
from pathlib import Path

import check  # check.py beside this file: the model repository, the server

COLUMNS = "| instances x threads | concurrency | frames/s | p50 ms | queue ms | compute ms | GPU |"


def perf(server: check.Server, model: str, concurrency: int, out: Path, perf_ms: int) -> str:
    name = out / f"{model}-c{concurrency}"
    command = check.perf_command(server, model, concurrency, Path(f"{name}.csv"), perf_ms,
                                 warmup=4, trials=5)
    with open(f"{name}.log", "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=300)
    if done.returncode != 0:
        return f"| {label(model)} | {concurrency} | failed (see {name.name}.log) | | | | |"
    with open(f"{name}.csv") as f:
        row = next(csv.DictReader(f))
    ms = {k: float(row[k]) / 1000 for k in ("p50 latency", "Server Queue", "Server Compute Infer")}
    return (f"| {label(model)} | {concurrency} | {float(row['Inferences/Second']):.1f} | "
            f"{ms['p50 latency']:.1f} | {ms['Server Queue']:.1f} | "
            f"{ms['Server Compute Infer']:.1f} | {gpu_state()} |")


def label(model: str) -> str:
    """g4x1 -> 4 x 1"""
    return model[1:].replace("x", " x ")


def gpu_state() -> str:
    """Memory used and utilisation, as nvidia-smi reads them now ('-' without a GPU)."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,utilization.gpu",
                               "--format=csv,noheader"], capture_output=True, text=True)
    except FileNotFoundError:
        return "-"
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--kind", default="KIND_GPU")
    parser.add_argument("--variants", default="1x1 2x1 4x1 8x1 2x4")
    parser.add_argument("--concurrency", default="8 32 64")
    parser.add_argument("--perf-ms", type=int, default=2000)
    args = parser.parse_args()
    out = Path(args.out).resolve()
    work = out / "sweep"  # its server's log, perf_analyzer's files, the models
    shutil.rmtree(work, ignore_errors=True)
    models = work / "models"
    onnx = (check.BUNDLE / "repos" / "face_onnx.pbtxt").read_text()
    # The server starts with one small CPU model loaded, as the check's.
    check.write_model(models, "face_onnx_cpu", check.configure(
        onnx, "face_onnx_cpu", "KIND_CPU", 1, max_batch_size=32, batch_threads=1), "onnx")
    variants = [tuple(int(x) for x in v.split("x")) for v in args.variants.split()]
    for n, t in variants:
        check.write_model(models, f"g{n}x{t}", check.configure(
            onnx, f"g{n}x{t}", args.kind, n, max_batch_size=32, queue_delay_us=500,
            batch_threads=t), "onnx")
    lines = [COLUMNS, "|---|---|---|---|---|---|---|"]
    failed = False
    server = check.Server(models, work)
    try:
        for n, t in variants:
            model = f"g{n}x{t}"
            began = time.monotonic()
            why = server.load(model)
            if why:
                lines.append(f"| {label(model)} | | load failed: {' '.join(why.split())} | | | | |")
                failed = True
                continue
            print(f"{model}: loaded in {time.monotonic() - began:.0f} s", flush=True)
            for concurrency in (int(c) for c in args.concurrency.split()):
                lines.append(perf(server, model, concurrency, work, args.perf_ms))
                failed |= "failed" in lines[-1]
                print(lines[-1], flush=True)
            server.client.unload_model(model)
            while server.client.is_model_ready(model):
                time.sleep(0.2)
    finally:
        server.stop()
    text = "\n".join(lines) + "\n"
    (out / "sweep.md").write_text(text)
    print("\n" + text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
