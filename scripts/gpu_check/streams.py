#!/usr/bin/env python3
"""How many video streams of 10 fps the sequence model holds (run by `gpu_check.sh --streams`,
after the check; also on a machine without a GPU, with --kind KIND_CPU).

The model is the check's face_sequence_gpu (the shipped face_onnx_sequence: the ONNX engine
under Triton's sequence batcher, with its cadence), here with --instances instances of one
engine each, batches of up to --max-batch-size frames, and a candidate slot for every stream.
Its input is the sample video: its 150 frames as JPEG (ENCODED), so that the backend decodes
every frame on this machine.
For each N of --streams, perf_analyzer plays N sequences of that video at 10 x N requests/s
in all. This is its request-rate mode: each frame is sent on its schedule, answered or not.
A row gives the frames/s answered, p50 and p99, Triton's queue and compute time, the GPU busy %
and the most GPU memory. N streams are held when at least 95% of the 10 x N frames/s asked for
are answered (as benches/video_streams.py counts) with a p99 under a second: perf_analyzer
does not wait for answers, so a server a little short of the rate builds a queue that grows
for as long as the run lasts.

Writes OUT/streams.md; everything else goes to OUT/streams/."""
from __future__ import annotations

import argparse
import base64
import json
import re
import shutil
import struct
import sys
from pathlib import Path

import check  # check.py beside this file: the model repository, the server
from sweep import measure

MODEL = "face_sequence_streams"
FPS = 10.0
HOLD = 0.95  # of the frames/s asked for
HOLD_P99_MS = 1000.0  # perf_analyzer does not wait for answers: a queue that grows shows here
COLUMNS = ("| streams | frames/s asked | frames/s answered | held | p50 ms | p99 ms | queue ms "
           "| compute ms | GPU busy | GPU memory |")


def video_input(path: Path) -> int:
    """perf_analyzer's input: one data stream, the video's frames in order, each as Triton's
    BYTES wire form (a u32 little-endian length, then the JPEG). Returns the frame count."""
    frames = sorted((check.BUNDLE / "video" / "frames").glob("*.jpg"))
    steps = []
    for frame in frames:
        jpeg = frame.read_bytes()
        raw = struct.pack("<I", len(jpeg)) + jpeg
        steps.append({"ENCODED": {"b64": base64.b64encode(raw).decode("ascii"), "shape": [1]}})
    path.write_text(json.dumps({"data": [steps]}))
    return len(frames)


def write_models(models: Path, args, streams: int) -> None:
    """The server's first model, and the streams' sequence model."""
    check.write_first_model(models)
    sequence = (check.BUNDLE / "repos" / "face_onnx_sequence.pbtxt").read_text()
    config = check.configure(sequence, MODEL, args.kind, args.instances,
                             max_batch_size=args.max_batch_size, batch_threads=1,
                             max_sequences=max(1024, streams))
    # Every stream a candidate at once; batches as large as the model takes.
    config = re.sub(r"max_candidate_sequences: \d+", f"max_candidate_sequences: {streams}", config)
    config = re.sub(r"preferred_batch_size: \[[^\]]*\]",
                    f"preferred_batch_size: [ {args.max_batch_size} ]", config)
    check.write_model(models, MODEL, config, "onnx")


def perf(server: check.Server, streams: int, data: Path, work: Path, perf_ms: int) -> str:
    """One row: `streams` sequences of the video at FPS each."""
    name = work / f"streams-{streams}"
    rate = int(FPS * streams)
    command = [str(check.BUNDLE / "perf_analyzer" / "run"), "-m", MODEL, "-i", "grpc",
               "-u", f"127.0.0.1:{server.grpc}", "--input-data", str(data),
               "--request-rate-range", f"{rate}:{rate}", "--num-of-sequences", str(streams),
               "--max-threads", "16",
               "--measurement-interval", str(perf_ms), "--max-trials", "3",
               "--stability-percentage", "1000", "-f", f"{name}.csv"]
    head = f"| {streams} | {rate} |"
    measured = measure(command, name)
    if measured is None:
        return f"{head} failed (see streams/{name.name}.log) | | | | | | | |"
    answered, ms, gpu = measured
    held = "yes" if answered >= HOLD * rate and ms["p99"] <= HOLD_P99_MS else "no"
    return (f"{head} {answered:.1f} | {held} | {ms['p50']:.1f} | {ms['p99']:.1f} | "
            f"{ms['queue']:.1f} | {ms['compute']:.1f} | {gpu} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--kind", default="KIND_GPU")
    parser.add_argument("--streams", default="50 100 200 300")
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--perf-ms", type=int, default=5000)
    args = parser.parse_args()
    counts = [int(n) for n in args.streams.split()]
    if not counts or min(counts) < 1:
        raise SystemExit(f"--streams {args.streams!r}: expected stream counts, e.g. '100 200'")
    out = Path(args.out).resolve()
    work = out / "streams"  # its server's log, perf_analyzer's files, the model
    shutil.rmtree(work, ignore_errors=True)
    write_models(work / "models", args, max(counts))
    data = work / "video-ENCODED.json"
    frames = video_input(data)
    lines = [COLUMNS, "|---|---|---|---|---|---|---|---|---|---|"]
    failed = False
    server = check.Server(work / "models", work)
    try:
        why = server.load(MODEL)
        if why:
            lines.append(f"| | | load failed: {' '.join(why.split())} | | | | | | | |")
            failed = True
        else:
            for streams in counts:
                lines.append(perf(server, streams, data, work, args.perf_ms))
                failed |= "failed" in lines[-1]
                print(lines[-1], flush=True)
    finally:
        server.stop()
    kind = "GPU" if args.kind == "KIND_GPU" else "CPU"
    settings = (f"{MODEL}: {args.instances} {kind} instances x 1 engine, max_batch_size "
                f"{args.max_batch_size}; the sample video ({frames} JPEG frames) at {FPS:.0f} "
                f"fps a stream; {args.perf_ms} ms windows")
    check.write_table(out / "streams.md", settings, lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
