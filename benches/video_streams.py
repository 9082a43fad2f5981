#!/usr/bin/env python3
"""How many 10 fps video streams one machine serves, per engine and cadence: `face_sequence`
(dlib) and `face_onnx_sequence` (as shipped, two instances each), with every frame detected and
embedded (`detect_every` = `reidentify_every` = 1) and with their shipped cadence, fed by `scripts/video.py --streams N --pace 10`
with the sample video, N = 1, 2, ... until a stream falls behind. A stream holds 10 fps when
it sent its frames at no less than HOLD of that rate. The client runs on the same machine
(it decodes the video and sends raw frames; --no-video: it draws and encodes nothing). Each row
also scores every stream's answers against the video's truth (scripts/video_score.py): named
right, false names, ID switches, boxes. Each engine and cadence also runs, as one stream, the
other scenes made the same way (`sample_video.py --scene crossing`: two faces crossing, one above
the other; `camera`: a face walking towards the camera, swaying and growing, then two side by
side; `approach`, `offsets`, `behind`: faces entering at 50 px, small faces between the
detector's cells, a face passing behind another), scored the same way. `--video SCENE` runs the
streams on that scene instead. Each row gives the client's CPU per stream and the server's per
frame; a last table gives a frame's stages (the `timings` of one unpaced stream), on detected
frames and on the frames between.

    python benches/video_streams.py            # -> out/bench-video-streams.txt
    python benches/video_streams.py --engines onnx --cadences shipped --start 20
    python benches/video_streams.py --engines dlib --cadences shipped --video camera
    python benches/video_streams.py --engines dlib --cadences shipped --param smallest_face=0
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))  # the suite's server harness: repository per engine

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import face_api  # noqa: E402
import sample_video  # noqa: E402
import video as video_client  # noqa: E402
from environment import SampleVideo, resolve_env  # noqa: E402
from triton_server import TritonServer  # noqa: E402
from video_score import Score, score  # noqa: E402

PACE = 10.0
HOLD = 0.95  # of PACE
# Model parameters of each cadence ("shipped": the model's own).
CADENCES = {"every frame": {"detect_every": "1", "reidentify_every": "1"}, "shipped": {}}


def server_cpu(server: TritonServer) -> float:
    """Seconds of CPU the server process has used (user and system)."""
    fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def streams_run(server: TritonServer, video: SampleVideo, streams: int,
                out: Path) -> tuple[list[float], Score, float, float]:
    """Frames/s each of `streams` paced streams held, their answers scored against the video's
    truth (each stream on its own, summed), the client's CPU per stream (share of one core) and
    the server's CPU per frame (ms)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = server_cpu(server)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "video.py"), str(video.path), "--streams", str(streams),
         "--pace", str(PACE), "--no-video", "--quiet", "--url", f"127.0.0.1:{server.http_port}",
         "--shared-memory", "yes",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - started
    server_used = server_cpu(server) - server_before
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"video.py failed:\n{done.stdout}\n{done.stderr}")
    stem = video.path.stem
    names = [f"{stem}-{i}.json" for i in range(streams)] if streams > 1 else [f"{stem}.json"]
    reports = [json.loads((out / name).read_text()) for name in names]
    scored = sum((score(r["frames"], video.truth) for r in reports), Score())
    frames = sum(r["frames_sent"] for r in reports)
    return ([r["frames_per_second"] for r in reports], scored, cpu / wall / streams,
            1e3 * server_used / frames)


STAGES = ("decode", "detection", "landmarks", "embedding", "matching")


def frame_costs(server: TritonServer, video: SampleVideo) -> tuple[float, dict, dict]:
    """One stream, unpaced, with the `timings` parameter (the second pass over the video; the
    first warms the server): the share of frames detected, and each stage's mean ms on detected
    frames and on the frames between (there `landmarks` is the tracker's work: the box carried
    and the landmarks at it)."""
    client = face_api.connect(f"127.0.0.1:{server.http_port}")
    timings = []
    for _ in range(2):
        timings.clear()
        container = video_client.open_input(str(video.path))
        with container, face_api.Sequence(client, "face_sequence", {"timings": True}) as sequence:
            for _, rgb in video_client.frames(container):
                timings.append(sequence.send(image=rgb)["timings_ms"])
    detected = [t for t in timings if t["detection"] > 0]
    between = [t for t in timings if t["detection"] == 0]

    def means(frames: list[dict]) -> dict:
        return {k: sum(t[k] for t in frames) / max(1, len(frames)) for k in STAGES}
    return len(detected) / len(timings), means(detected), means(between)


def engine_rows(engine: str, cadence: str, videos: list[SampleVideo], streams_from: range,
                work: Path, params: dict[str, str],
                drop: list[str]) -> tuple[list[tuple], list[Score], tuple]:
    """The streams rows on the first video, each other video's score as one stream, and the
    first video's cost per frame (`frame_costs`)."""
    video, others = videos[0], videos[1:]
    rows = []
    folder = work / f"{engine}-{cadence.replace(' ', '-')}"
    # The suite's harness: face_sequence with the engine's shipped sequence config.
    edits = [(rf'(?m)^parameters {{ key: "{key}" .*\n', "") for key in drop]
    with TritonServer(resolve_env(), folder, model="face_sequence", engine=engine,
                      params=params, config_edits=edits) as server:
        for streams in streams_from:
            held, scored, client, server_ms = streams_run(server, video, streams,
                                                          folder / f"n{streams}")
            rows.append((engine, cadence, streams, min(held), sum(held) / len(held), scored, client,
                         server_ms))
            print(f"{engine}, {cadence}: {streams} stream(s): {min(held):.2f} .. {max(held):.2f} "
                  f"frames/s", flush=True)
            if min(held) < HOLD * PACE:
                break
        scores = [streams_run(server, other, 1, folder / other.path.stem)[1] for other in others]
        costs = frame_costs(server, video)
    return rows, scores, costs


def tables(rows: list[tuple], others: list[tuple], costs: list[tuple], video: str) -> list[str]:
    """The report's three tables: streams, the other scenes, the cost of a frame."""
    lines = ["| engine | cadence | streams | slowest stream fps | mean fps | named right "
             "| false names | ID switches | boxes within IoU 0.5 | client CPU per stream "
             "| server CPU per frame |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {e} | {c} | {n} | {low:.2f} | {mean:.2f} | {s.named_share:.3f} "
              f"| {s.false_names} | {s.id_switches} | {s.box_share:.3f} | {client:.0%} "
              f"| {server_ms:.2f} ms |"
              for e, c, n, low, mean, s, client, server_ms in rows]
    lines += ["", f"Streams on the {video} video. The other scenes, one stream each:", "",
              "| scene | engine | cadence | named right | false names | ID switches "
              "| boxes within IoU 0.5 |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {name} | {e} | {c} | {s.named_share:.3f} | {s.false_names} | {s.id_switches} "
              f"| {s.box_share:.3f} |" for e, c, name, s in others]
    lines += ["", f"A frame's stages (ms, mean), one unpaced stream of the {video} video with "
              "`timings`; between detections `landmarks` is the tracker's work:", "",
              "| engine | cadence | frames detected | frame | " + " | ".join(STAGES) + " |",
              "|---|---|---|---|" + "---|" * len(STAGES)]
    for e, c, share, detected, between in costs:
        for kind, stages in (("detected", detected), ("between", between)):
            if kind == "between" and share == 1.0:
                continue
            lines.append(f"| {e} | {c} | {share:.0%} | {kind} | "
                         + " | ".join(f"{stages[k]:.2f}" for k in STAGES) + " |")
    lines.append("")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default="dlib,onnx")
    ap.add_argument("--cadences", default=",".join(CADENCES), help=f"of {', '.join(CADENCES)}")
    ap.add_argument("--start", type=int, default=1, help="start at this many streams")
    ap.add_argument("--most", type=int, default=40, help="stop at this many streams")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="a model parameter for every server, over the cadence's (repeatable)")
    ap.add_argument("--drop", action="append", default=[], metavar="KEY",
                    help="a parameter of the shipped config left out (repeatable; with "
                         "FACE_BACKEND_LIB, a build from before the parameter)")
    ap.add_argument("--video", choices=sorted(sample_video.SCENES), default="sample",
                    help="the video the streams run on (a sample_video.py scene)")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench-video-streams.txt")
    args = ap.parse_args()
    video = SampleVideo.find()
    rows, others, costs = [], [], []
    extra = dict(p.split("=", 1) for p in args.param)
    runs = [(e, c) for e in args.engines.split(",") for c in args.cadences.split(",")]
    with tempfile.TemporaryDirectory() as work:
        scenes = {}
        for scene in (s for s in sample_video.SCENES if s != "sample"):
            path = Path(work) / f"{scene}.mp4"
            scenes[scene] = SampleVideo(path, sample_video.write(resolve_env().photos, path, scene))
        if args.video != "sample":
            video, scenes["sample"] = scenes.pop(args.video), video
        videos = [video, *scenes.values()]
        for engine, cadence in runs:
            streams, scores, cost = engine_rows(engine, cadence, videos,
                                                range(args.start, args.most + 1), Path(work),
                                                {**CADENCES[cadence], **extra}, args.drop)
            rows += streams
            others += [(engine, cadence, name, s) for name, s in zip(scenes, scores)]
            costs.append((engine, cadence, *cost))
    lines = tables(rows, others, costs, args.video)
    for engine, cadence in runs:
        held = [n for e, c, n, low, *_ in rows if (e, c) == (engine, cadence) and low >= HOLD * PACE]
        lines.append(f"{engine}, {cadence}: {max(held, default=0)} streams of {PACE:g} fps held")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
