"""scripts/video.py end to end: the sample video through `face_sequence` on a real server, as a
file, as a stream that breaks off, interrupted with Ctrl-C, and as several streams at once.

Each run must leave the server with no live sequence (`face_live_sequences` back to 0) well
before the model's idle timeout (10 s), so the client ENDed its sequence itself.
"""

from __future__ import annotations

import http.server
import json
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import av
import pytest

from environment import REPO_ROOT
from face_client import SEQUENCE_MODEL

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import video_score  # noqa: E402

pytestmark = pytest.mark.engines("dlib", "onnx")

SCRIPT = REPO_ROOT / "scripts" / "video.py"
# Well under the model's max_sequence_idle_microseconds (10 s): only an END clears it this fast.
ENDED_WITHIN_S = 3.0


@pytest.fixture(scope="module")
def sequence_server(start_module_server):
    return start_module_server(model=SEQUENCE_MODEL, metrics=True)


def command(server, *args: str, out: Path) -> list[str]:
    return [sys.executable, str(SCRIPT), *args, "--url", f"127.0.0.1:{server.http_port}",
            "--model", SEQUENCE_MODEL, "--out", str(out), "--quiet"]


def run_video(server, *args: str, out: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(command(server, *args, out=out), cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout)


def live_sequences(server) -> float | None:
    return server.metric("face_live_sequences", model=SEQUENCE_MODEL)


def assert_no_live_sequence(server) -> None:
    """The gauge is 0 within ENDED_WITHIN_S (it may lag an Execute behind)."""
    deadline = time.monotonic() + ENDED_WITHIN_S
    while (value := live_sequences(server)) != 0:
        assert time.monotonic() < deadline, f"face_live_sequences = {value}: the sequence was not ENDed"
        time.sleep(0.1)


def named(faces: list[dict]) -> list[str]:
    return sorted(f["name"] for f in faces if f["name"] != "unknown")


def test_sample_video_tracks_and_summary(sequence_server, sample_video, tmp_path):
    done = run_video(sequence_server, str(sample_video.path), out=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "sample.json").read_text())
    assert report["ended"] == "end of input"
    assert report["frames_sent"] == sample_video.frames == len(report["frames"])
    assert report["transport"] == "shared memory", "a local server gets frames in place"

    # Against the truth (scripts/video_score.py): every person in view named, nobody named
    # wrongly, no track switching while a person stays in view, boxes on the faces.
    scored = video_score.score(report["frames"], sample_video.truth)
    print(scored.row())
    assert scored.named_share >= 0.95 and scored.false_names == 0, scored.row()
    assert scored.id_switches == 0 and scored.box_share >= 0.9, scored.row()

    # One track per person within a scene: obama keeps one track while biden comes in beside him.
    tracks = {name: {face["track"] for f in report["frames"][30:80] for face in f["faces"]
                     if face["name"] == name} for name in ("obama", "biden")}
    assert len(tracks["obama"]) == 1 and len(tracks["biden"]) == 1, tracks
    assert tracks["obama"] != tracks["biden"]

    # The END summary: who appeared and in which frames.
    people = report["summary"]["people"]
    assert {p["name"] for p in people} >= {"obama", "biden"}, people
    for name in ("obama", "biden"):
        seen = {i for p in people if p["name"] == name for i in p["frames"]}
        truth = {i for i in range(sample_video.frames) if name in sample_video.names_in(i)}
        assert len(seen & truth) >= 0.9 * len(truth), f"{name}: {sorted(truth - seen)} missed"
        assert all(p["best_distance"] is not None for p in people if p["name"] == name)

    # The annotated video plays: every frame, at the input's size.
    with av.open(str(tmp_path / "sample.mp4")) as annotated:
        frames = [f for f in annotated.decode(video=0)]
    assert len(frames) == sample_video.frames
    assert (frames[0].width, frames[0].height) == (sample_video.truth["width"], sample_video.truth["height"])
    assert_no_live_sequence(sequence_server)


class BreakingStream:
    """An HTTP server that sends a video as MPEG-TS (a live-stream format), then resets the
    connection after a share of its bytes: a stream that breaks off."""

    def __init__(self, video: Path, share: float, folder: Path):
        ts = folder / "stream.ts"
        with av.open(str(video)) as src, av.open(str(ts), "w", format="mpegts") as dst:
            out = dst.add_stream_from_template(src.streams.video[0])
            for packet in src.demux(src.streams.video[0]):
                if packet.dts is not None:
                    packet.stream = out
                    dst.mux(packet)
        data = ts.read_bytes()
        cut = int(len(data) * share)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "video/mp2t")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[:cut])
                self.wfile.flush()
                # SO_LINGER 0: close with a reset, as a dropped connection does.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/stream.ts"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_broken_stream_ends_the_sequence(sequence_server, sample_video, tmp_path):
    stream = BreakingStream(sample_video.path, 0.4, tmp_path)
    try:
        done = run_video(sequence_server, stream.url, out=tmp_path)
    finally:
        stream.close()
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads((tmp_path / "stream.json").read_text())
    assert report["ended"].startswith("broken stream"), report["ended"]
    assert 0 < report["frames_sent"] < sample_video.frames
    # What was sent before the break is kept: the summary and the video so far.
    assert report["summary"]["frames"] == report["frames_sent"]
    assert (tmp_path / "stream.mp4").stat().st_size > 0
    assert_no_live_sequence(sequence_server)


def test_ctrl_c_ends_the_sequence(sequence_server, sample_video, tmp_path):
    # --pace 5: 30 s for the video, so Ctrl-C lands in the middle.
    proc = subprocess.Popen(command(sequence_server, str(sample_video.path), "--pace", "5", out=tmp_path),
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while live_sequences(sequence_server) != 1:  # the sequence is open on the server
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
            time.sleep(0.1)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, output
    report = json.loads((tmp_path / "sample.json").read_text())
    assert report["ended"] == "interrupted"
    assert 0 < report["frames_sent"] < sample_video.frames
    assert report["summary"] is not None, "no END summary after Ctrl-C"
    assert_no_live_sequence(sequence_server)


def test_missing_input_is_a_message(sequence_server, tmp_path):
    done = run_video(sequence_server, str(tmp_path / "nothing.mp4"), out=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads((tmp_path / "nothing.json").read_text())
    assert report["ended"].startswith("cannot open the input"), report["ended"]
    assert report["frames_sent"] == 0 and report["summary"] is None
    assert "Traceback" not in done.stderr


def test_streams_at_once(sequence_server, sample_video, tmp_path):
    done = run_video(sequence_server, str(sample_video.path), "--streams", "2", "--every", "5",
                     out=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    ids = set()
    for i in range(2):
        report = json.loads((tmp_path / f"sample-{i}.json").read_text())
        assert report["frames_sent"] == sample_video.frames // 5
        assert {p["name"] for p in report["summary"]["people"]} >= {"obama", "biden"}
        ids.add(report["sequence_id"])
    assert len(ids) == 2, "two streams shared a correlation ID"
    assert "2 streams: each held" in done.stdout
    assert_no_live_sequence(sequence_server)


def test_frames_through_shared_memory_or_the_body(sequence_server, sample_video, tmp_path):
    """Frames in shared memory (a local server) and in the HTTP body (as to a remote one) get the
    same answers; the regions are gone from the server and from /dev/shm afterwards."""
    reports = {}
    for shared in ("yes", "no"):
        done = run_video(sequence_server, str(sample_video.path), "--every", "5",
                         "--shared-memory", shared, out=tmp_path / shared)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "leaked shared_memory" not in done.stderr, "a region was not removed"
        reports[shared] = json.loads((tmp_path / shared / "sample.json").read_text())
    assert reports["yes"]["transport"] == "shared memory"
    assert reports["no"]["transport"] == "http"

    def answers(report):
        return [[(f["name"], f["track"], f["box"]) for f in frame["faces"]]
                for frame in report["frames"]]

    assert answers(reports["yes"]) == answers(reports["no"])
    assert len(reports["yes"]["frames"]) == -(-sample_video.frames // 5)
    assert sequence_server.http().get_system_shared_memory_status() == [], "still registered"
