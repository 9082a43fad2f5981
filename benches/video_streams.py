#!/usr/bin/env python3
"""How many 10 fps video streams one machine serves, per engine: `face_sequence` (as shipped,
two instances) on dlib and on the ONNX engine, fed by `scripts/video.py --streams N --pace 10`
with the sample video, N = 1, 2, ... until a stream falls behind. A stream holds 10 fps when
it sent its frames at no less than HOLD of that rate. The client runs on the same machine
(it decodes the video and sends raw frames; --no-video: it draws and encodes nothing).

    python benches/video_streams.py            # -> out/bench-video-streams.txt
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))  # the suite's server harness: repository per engine

from environment import SampleVideo, resolve_env  # noqa: E402
from triton_server import TritonServer  # noqa: E402

PACE = 10.0
HOLD = 0.95  # of PACE


def streams_run(server: TritonServer, video: Path, streams: int, out: Path) -> list[float]:
    """Frames/s each of `streams` paced streams held."""
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "video.py"), str(video), "--streams", str(streams),
         "--pace", str(PACE), "--no-video", "--quiet", "--url", f"127.0.0.1:{server.http_port}",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"video.py failed:\n{done.stdout}\n{done.stderr}")
    stem = video.stem
    names = [f"{stem}-{i}.json" for i in range(streams)] if streams > 1 else [f"{stem}.json"]
    return [json.loads((out / name).read_text())["frames_per_second"] for name in names]


def engine_rows(engine: str, video: Path, most: int, work: Path) -> list[tuple]:
    rows = []
    with TritonServer(resolve_env(), work / engine, model="face_sequence", engine=engine) as server:
        for streams in range(1, most + 1):
            held = streams_run(server, video, streams, work / engine / f"n{streams}")
            rows.append((engine, streams, min(held), sum(held) / len(held)))
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
    video = SampleVideo.find().path
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for engine in args.engines.split(","):
            rows += engine_rows(engine, video, args.most, Path(work))
    lines = ["| engine | streams | slowest stream fps | mean fps |", "|---|---|---|---|"]
    lines += [f"| {e} | {n} | {low:.2f} | {mean:.2f} |" for e, n, low, mean in rows]
    for engine in args.engines.split(","):
        held = [n for e, n, low, _ in rows if e == engine and low >= HOLD * PACE]
        lines.append(f"\n{engine}: {max(held, default=0)} streams of {PACE:g} fps held")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
