#!/usr/bin/env python3
"""How many 10 fps video streams one machine serves, per engine: `face_sequence` (as shipped,
two instances) on dlib and on the ONNX engine, fed by `scripts/video.py --streams N --pace 10`
with the sample video, N = 1, 2, ... until a stream falls behind. A stream holds 10 fps when
it sent its frames at no less than HOLD of that rate. The client runs on the same machine
(it decodes the video and sends raw frames; --no-video: it draws and encodes nothing). Each row
also scores every stream's answers against the video's truth (scripts/video_score.py): named
right, false names, ID switches, boxes.

    python benches/video_streams.py            # -> out/bench-video-streams.txt
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))  # the suite's server harness: repository per engine

sys.path.insert(0, str(REPO_ROOT / "scripts"))
from environment import SampleVideo, resolve_env  # noqa: E402
from triton_server import TritonServer  # noqa: E402
from video_score import Score, score  # noqa: E402

PACE = 10.0
HOLD = 0.95  # of PACE


def streams_run(server: TritonServer, video: SampleVideo, streams: int,
                out: Path) -> tuple[list[float], Score, float]:
    """Frames/s each of `streams` paced streams held, their answers scored against the video's
    truth (each stream on its own, summed), and the client's CPU per stream (share of one core)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "video.py"), str(video.path), "--streams", str(streams),
         "--pace", str(PACE), "--no-video", "--quiet", "--url", f"127.0.0.1:{server.http_port}",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"video.py failed:\n{done.stdout}\n{done.stderr}")
    stem = video.path.stem
    names = [f"{stem}-{i}.json" for i in range(streams)] if streams > 1 else [f"{stem}.json"]
    reports = [json.loads((out / name).read_text()) for name in names]
    scored = sum((score(r["frames"], video.truth) for r in reports), Score())
    return [r["frames_per_second"] for r in reports], scored, cpu / wall / streams


def engine_rows(engine: str, video: SampleVideo, most: int, work: Path) -> list[tuple]:
    rows = []
    with TritonServer(resolve_env(), work / engine, model="face_sequence", engine=engine) as server:
        for streams in range(1, most + 1):
            held, scored, client = streams_run(server, video, streams, work / engine / f"n{streams}")
            rows.append((engine, streams, min(held), sum(held) / len(held), scored, client))
            print(f"{engine}: {streams} stream(s): {min(held):.2f} .. {max(held):.2f} frames/s", flush=True)
            if min(held) < HOLD * PACE:
                break
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default="dlib,onnx")
    ap.add_argument("--most", type=int, default=12, help="stop at this many streams")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench-video-streams.txt")
    args = ap.parse_args()
    video = SampleVideo.find()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for engine in args.engines.split(","):
            rows += engine_rows(engine, video, args.most, Path(work))
    lines = ["| engine | streams | slowest stream fps | mean fps | named right | false names "
             "| ID switches | boxes within IoU 0.5 | client CPU per stream |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {e} | {n} | {low:.2f} | {mean:.2f} | {s.named_share:.3f} | {s.false_names} "
              f"| {s.id_switches} | {s.box_share:.3f} | {client:.0%} |"
              for e, n, low, mean, s, client in rows]
    for engine in args.engines.split(","):
        held = [n for e, n, low, *_ in rows if e == engine and low >= HOLD * PACE]
        lines.append(f"\n{engine}: {max(held, default=0)} streams of {PACE:g} fps held")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
