#!/usr/bin/env python3
"""Video through a sequence model: every frame of INPUT (a video file, a camera index or an
RTSP/HTTP stream URL) goes to `face_sequence` as one sequence, with a progress bar and the
frames/s held; out come the annotated video (boxes, names, track numbers) and a JSON file with
each frame's faces and the END summary (who appeared, in which frames, best distance).

    python scripts/video.py assets/video/sample.mp4 --url localhost:8000 --out out/video
    python scripts/video.py 0                      # the first camera (/dev/video0)
    python scripts/video.py rtsp://host/stream --every 3
    python scripts/video.py sample.mp4 --streams 4 --pace 10   # 4 copies as 10 fps live streams
    python scripts/video.py sample.mp4 --detect-every 1 --reidentify-every 1   # every frame in full

With no server at a local --url it starts one on model_repository/ (stopped when it exits).
Frames go to a server on this machine through Triton's system shared memory (no copy in an
HTTP body; --shared-memory no sends them in the body, as to a remote server).
Ctrl-C, a broken stream or a refused frame end the sequence at once (END), so the server drops
its state; what was processed so far is written. Exit status: 0 when every input ran to its end,
1 when one broke or failed, 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import av
from tqdm import tqdm

import face_api
import local_server

# Seconds to wait for a stream to open or to give its next packet before calling it broken.
STREAM_TIMEOUT_S = 10.0
# Frames whose faces the report keeps (about 300 bytes each with one face: 30 MB); a camera left
# running sends more, which are counted but not kept.
KEEP_FRAMES = 100_000


def open_input(source: str):
    """A container for a file path, a camera index ("0" -> /dev/video0) or a stream URL."""
    if source.isdigit():
        return av.open(f"/dev/video{source}", format="v4l2", timeout=STREAM_TIMEOUT_S)
    return av.open(source, timeout=STREAM_TIMEOUT_S)


def frame_rate(container) -> float:
    rate = container.streams.video[0].average_rate or container.streams.video[0].guessed_rate
    return float(rate) if rate else 10.0


def frame_count(container) -> int | None:
    """Frames in the input if it says (files do; cameras and most streams do not)."""
    return container.streams.video[0].frames or None


def frames(container, every: int = 1, threads: int = 0):
    """(index, H x W x 3 RGB uint8) of every `every`-th frame, in order, decoded on `threads`
    threads (0: FFmpeg's choice, one per core)."""
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    stream.thread_count = threads
    for index, frame in enumerate(container.decode(stream)):
        if index % every == 0:
            yield index, frame.to_ndarray(format="rgb24")


class Annotated:
    """The annotated video: H.264 in MP4 (yuv420p, so browsers play it), written as frames come;
    the file is opened at the first frame, whose size it takes."""

    def __init__(self, path: Path, fps: float):
        self.path, self.fps = path, fps
        self.container = self.stream = None

    def _open(self, width: int, height: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.container = av.open(str(self.path), "w", format="mp4", options={"movflags": "+faststart"})
        self.stream = self.container.add_stream("libx264", rate=max(1, round(self.fps)))
        # yuv420p needs even sides.
        self.stream.width, self.stream.height = width - width % 2, height - height % 2
        self.stream.pix_fmt = "yuv420p"
        self.stream.options = {"crf": "23", "preset": "veryfast"}

    def write(self, image) -> None:
        if self.container is None:
            self._open(image.width, image.height)
        frame = av.VideoFrame.from_image(image).reformat(
            width=self.stream.width, height=self.stream.height, format="yuv420p")
        self.container.mux(self.stream.encode(frame))

    def close(self) -> None:
        if self.container is not None:
            self.container.mux(self.stream.encode())
            self.container.close()


@dataclass
class Run:
    """One input's run: what was sent and how it ended."""
    source: str
    video: Path | None  # None: no annotated video (throughput runs)
    report: Path
    sequence_id: int = 0
    total: int | None = None  # frames to send, when the input says
    sent: int = 0
    seconds: float = 0.0
    ended: str = "not started"
    transport: str = "http"
    failed: bool = False
    faces: list = field(default_factory=list)
    summary: dict | None = None

    @property
    def fps(self) -> float:
        return self.sent / self.seconds if self.seconds else 0.0

    def document(self, model: str) -> dict:
        return {
            "input": self.source, "model": model, "sequence_id": self.sequence_id,
            "frames_sent": self.sent, "frames_per_second": round(self.fps, 2), "ended": self.ended,
            "transport": self.transport,
            "video": self.video and str(self.video), "frames": self.faces,
            "summary": (self.summary or {}).get("summary"),
        }


def face_row(face: dict) -> dict:
    return {k: face.get(k) for k in ("name", "distance", "track", "box", "source", "embedded")}


@dataclass
class Sending:
    """How frames travel: `shared` memory ("no": in the HTTP body; "yes"; "auto": shared,
    falling back to the body if the server cannot map it; see `sending`) and the decoder's
    threads (0: FFmpeg's choice)."""
    shared: str = "no"
    threads: int = 0


def sending(shared: str, url: str, streams: int) -> Sending:
    """What --shared-memory asks (auto: only with a server on this machine), and the cores
    shared out among the streams' decoders (one thread each when they are many)."""
    if shared == "auto" and not local_server.is_local(url):
        shared = "no"
    return Sending(shared, max(1, (os.cpu_count() or 1) // streams))


def process(client, model: str, run: Run, every: int = 1, pace: float = 0.0,
            stop: threading.Event | None = None, on_frame=None,
            parameters: dict | None = None, sending: Sending | None = None) -> Run:
    """Send `run.source`'s frames as one sequence and write the annotated video; the sequence
    is ENDed however this returns. `on_frame(run, index, image, doc)` sees each answered frame
    (for progress; `image` is the annotated frame, None without a video). `parameters` go with
    every frame (e.g. detect_every)."""
    stop, sending = stop or threading.Event(), sending or Sending()
    start = time.monotonic()
    try:
        container = open_input(run.source)
    except (av.FFmpegError, OSError) as e:
        run.ended, run.failed = f"cannot open the input: {e}", True
        return run
    shared = shared_frames(client, sending.shared)
    try:
        with container, face_api.Sequence(client, model, parameters, shared) as sequence:
            run.sequence_id = sequence.id
            if frame_count(container):
                run.total = -(-frame_count(container) // every)
            writer = Annotated(run.video, frame_rate(container) / every) if run.video else None
            try:
                run.ended = send_frames(sequence, frames(container, every, sending.threads), run,
                                        pace, stop, on_frame, writer)
            finally:
                if writer is not None:
                    writer.close()
            run.failed = run.ended.startswith("broken")
            run.summary = sequence.end()
    except Exception as e:  # noqa: BLE001 - the server refused or went away: say so, keep the rest
        run.ended, run.failed = face_api.readable(e), True
    finally:
        run.seconds = time.monotonic() - start
        if shared is not None:
            run.transport = f"http ({shared.unavailable})" if shared.unavailable else "shared memory"
            close_quietly(shared, run)
    return run


def shared_frames(client, shared: str) -> face_api.SharedFrames | None:
    """The shared memory frames go through, if any (see `Sending`)."""
    if shared == "no":
        return None
    return face_api.SharedFrames(client, fallback=shared == "auto")


def close_quietly(shared: face_api.SharedFrames, run: Run) -> None:
    """Remove the stream's shared memory; a server gone by now is already said in `run.ended`."""
    try:
        shared.close()
    except Exception as e:  # noqa: BLE001 - the region is ours to remove, whatever the server says
        if not run.failed:
            run.ended, run.failed = f"could not remove its shared memory: {face_api.readable(e)}", True


def send_frames(sequence, source, run: Run, pace: float, stop, on_frame,
                writer: Annotated | None) -> str:
    """The frame loop of `process`; returns how the input ended."""
    from PIL import Image

    start = time.monotonic()
    while not stop.is_set():
        try:
            index, rgb = next(source)
        except StopIteration:
            return "end of input"
        except (av.FFmpegError, OSError) as e:  # the input broke off: keep what was sent
            return f"broken stream: {e}"
        if pace:  # a live source: no faster than `pace` frames/s
            time.sleep(max(0.0, start + run.sent / pace - time.monotonic()))
        doc = sequence.send(image=rgb)
        image = None
        if writer is not None:
            image = face_api.draw(Image.fromarray(rgb), doc["faces"], tracks=True)
            writer.write(image)
        if len(run.faces) < KEEP_FRAMES:
            run.faces.append({"frame": index, "faces": [face_row(f) for f in doc["faces"]]})
        run.sent += 1
        run.seconds = time.monotonic() - start
        if on_frame:
            on_frame(run, index, image, doc)
    return "interrupted"


def write_report(run: Run, model: str) -> None:
    run.report.parent.mkdir(parents=True, exist_ok=True)
    run.report.write_text(json.dumps(run.document(model), indent=1) + "\n")


def people_table(run: Run) -> list[dict]:
    """The END summary's people, one row per track: name, the input's frames it was in (as
    ranges), best distance."""
    rows = []
    sent = [f["frame"] for f in run.faces]  # the sequence's frame n is the input's sent[n]
    for person in (run.summary or {}).get("summary", {}).get("people", []):
        frames = [sent[n] for n in person["frames"] if n < len(sent)]
        rows.append({
            "track": person["track"], "name": person["name"],
            "frames": ranges(frames), "count": len(frames),
            "best_distance": person.get("best_distance"),
        })
    return rows


def ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8"."""
    parts, run_start = [], None
    for i, n in enumerate(numbers):
        if run_start is None:
            run_start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(str(run_start) if run_start == n else f"{run_start}-{n}")
            run_start = None
    return ", ".join(parts)


def progress_of(bar):
    """An on_frame for `process` that moves a tqdm bar and shows the frames/s held."""
    def on_frame(run: Run, *_):
        if bar.total is None and run.total:
            bar.total = run.total
        bar.update(1)
        bar.set_postfix(fps=f"{run.fps:.1f}", refresh=False)
    return on_frame


def on_ctrl_c(stop: threading.Event) -> None:
    if stop.is_set():
        raise KeyboardInterrupt
    print("\nCtrl-C: ending the sequence(s); Ctrl-C again quits at once", file=sys.stderr)
    stop.set()


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        local_server.ensure(args.url, announce=lambda text: print(text, file=sys.stderr))
    except local_server.NotStarted as e:
        print(e, file=sys.stderr)
        return 1
    sources = args.inputs * args.streams if len(args.inputs) == 1 else args.inputs
    runs = []
    for i, source in enumerate(sources):
        stem = f"{Path(source).stem or 'stream'}" + (f"-{i}" if len(sources) > 1 else "")
        video = None if args.no_video else args.out / f"{stem}.mp4"
        runs.append(Run(source, video, args.out / f"{stem}.json"))
    stop = threading.Event()
    bars, threads = [], []
    for i, run in enumerate(runs):
        bars.append(tqdm(desc=f"{i}: {Path(run.source).name}", unit="frame", position=i,
                         leave=True, disable=args.quiet))
        worker = threading.Thread(
            target=process, daemon=True,
            args=(face_api.connect(args.url), args.model, run, args.every, args.pace, stop,
                  progress_of(bars[i]), cadence(args),
                  sending(args.shared_memory, args.url, len(runs))))
        threads.append(worker)
    # Ctrl-C asks every stream to stop and END its sequence (a second one quits at once). A
    # handler of our own, not KeyboardInterrupt: that could land in any thread's request.
    signal.signal(signal.SIGINT, lambda *_: on_ctrl_c(stop))
    for worker in threads:
        worker.start()
    for worker in threads:
        worker.join()
    interrupted = stop.is_set()
    for bar in bars:
        bar.close()
    for run in runs:
        write_report(run, args.model)
        names = ", ".join(f"{r['name']} (#{r['track']}: {r['frames']})" for r in people_table(run))
        print(f"{run.source}: {run.sent} frames at {run.fps:.1f}/s, {run.ended}; {names or 'no one'}")
        print(f"   annotated: {run.video or '(not written)'}   report: {run.report}   "
              f"frames sent by: {run.transport}")
    if len(runs) > 1:
        held = [run.fps for run in runs]
        print(f"{len(runs)} streams: each held {min(held):.1f} to {max(held):.1f} frames/s "
              f"({sum(held):.1f} in all)")
    if interrupted:
        return 130
    return 1 if any(run.failed for run in runs) else 0


def cadence(args) -> dict | None:
    """The request parameters --detect-every and --reidentify-every ask for, if any."""
    asked = {"detect_every": args.detect_every, "reidentify_every": args.reidentify_every}
    return {k: v for k, v in asked.items() if v is not None} or None


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", metavar="INPUT", help="video file, camera index or stream URL")
    ap.add_argument("--url", default="localhost:8000", help="the server's HTTP address")
    ap.add_argument("--model", default="face_sequence", help="a sequence model")
    ap.add_argument("--out", type=Path, default=Path("out/video"), help="folder for videos and reports")
    ap.add_argument("--every", type=int, default=1, help="send every n-th frame (long videos)")
    ap.add_argument("--streams", type=int, default=1, help="copies of one INPUT run at once")
    ap.add_argument("--pace", type=float, default=0.0,
                    help="send at most this many frames/s per stream, as a live camera would")
    ap.add_argument("--no-video", action="store_true",
                    help="write no annotated video (the client then only decodes and sends)")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    ap.add_argument("--shared-memory", choices=("auto", "yes", "no"), default="auto",
                    help="send frames through Triton's system shared memory instead of the HTTP "
                         "body (auto: when the server is on this machine and can map it)")
    ap.add_argument("--detect-every", type=int, metavar="N",
                    help="the server detects on every N-th frame of the sequence, tracks between "
                         "(default: the model's)")
    ap.add_argument("--reidentify-every", type=int, metavar="N",
                    help="a followed face is embedded again at least every N frames (default: "
                         "the model's)")
    args = ap.parse_args(argv)
    if args.every < 1 or args.streams < 1 or args.pace < 0:
        ap.error("--every and --streams must be at least 1, --pace not negative")
    return args


if __name__ == "__main__":
    sys.exit(main())
