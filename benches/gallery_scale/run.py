#!/usr/bin/env python3
"""End to end with a million people (issue 22), against an empty gallery, in one server run.

Two models with a shipped model's config (`face_onnx`, or `face`, dlib's, with --model face),
served by one tritonserver: the model with an empty gallery and `<model>_big` (obama enrolled
through the server, then PEOPLE rows of benches/matching's people-as-clusters embeddings of the
model's length added to its SQLite store with plain SQL, as a user's own import would). The big
gallery and its saved index are kept under WORK, so only the first run builds the index (about
25 minutes at 512-d on 2 cores); later runs load it.

Measured, and written to out/bench-gallery-scale.txt (-face.txt for dlib's):
  - a model whose gallery folder holds 2,000 photos: its first load (all embedded) and its
    next (from the store's photo cache), against the empty model's load;
  - time to ready and server RSS, each model alone in a server;
  - perf_analyzer at concurrency 1 (gRPC), one-face photos as ENCODED, both models in
    serpentine rounds: obama_640x480.jpg (obama is known in the big gallery) and biden.jpg
    (unknown everywhere: the search that finds nobody);
  - ENROLL then FORGET through the server, alternating between the models.

  python benches/gallery_scale/run.py [--model face_onnx|face] [--people 1000000] [--rounds 4]
                                      [--window-ms 4000] [--latency-only]
(--latency-only: the perf_analyzer table alone, to out/bench-gallery-scale-latency.txt: a
change to the search measured in minutes, once the big gallery is built.)
Needs assets/env.sh sourced (TRITONSERVER, PERF_ANALYZER, FACE_PHOTOS, FACE_ASSETS), the
release library built, and the data set of benches/matching/run.sh (clustered:cosine:1000000,
or clustered:euclidean:1000000 for dlib's).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

ROOT = Path(__file__).resolve().parents[2]
ONNX_FILES = ("fr_detect.onnx", "fr_landmark.onnx", "fr_feature.onnx")
# The shipped models measured (--model): their embedding length and metric, which name the
# matching bench's data set (clustered-<metric>-<dim>d-1m).
MODELS = {"face_onnx": (512, "cosine"), "face": (128, "euclidean")}
# Set by use_model: the measured model, its big and photo-folder copies.
DIM, EMPTY, BIG, PHOTOS_MODEL = 512, "face_onnx", "face_onnx_big", "face_onnx_photos"


def use_model(model: str) -> None:
    global DIM, EMPTY, BIG, PHOTOS_MODEL
    DIM = MODELS[model][0]
    EMPTY, BIG, PHOTOS_MODEL = model, f"{model}_big", f"{model}_photos"


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        sys.exit(f"{name} is not set: source assets/env.sh (scripts/setup.sh writes it)")
    return value


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def model_dir(models: Path, name: str, onnx_dir: Path, max_size: int) -> Path:
    """A model folder with the measured model's config under `name` (its ONNX files, or dlib's
    weights folder); its gallery folder is left alone."""
    d = models / name
    (d / "1").mkdir(parents=True, exist_ok=True)
    (d / "gallery").mkdir(exist_ok=True)
    text = (ROOT / f"model_repository/{EMPTY}/config.pbtxt").read_text()
    text = re.sub(r'^name: .*$', f'name: "{name}"', text, flags=re.M)
    text, n = re.subn(r'(key: "max_gallery_size" *value: \{ string_value: ")\d+', rf"\g<1>{max_size}",
                      text)
    assert n == 1, f"model_repository/{EMPTY}/config.pbtxt: no max_gallery_size"
    (d / "config.pbtxt").write_text(text)
    links = {d / "1" / f: onnx_dir / f for f in ONNX_FILES}
    if EMPTY == "face":
        links = {d / "weights": Path(env("FACE_ASSETS")) / "dlib"}
    for link, target in links.items():
        if not link.exists():
            link.symlink_to(target)
    return d


class Server:
    """One tritonserver over `repo`; ready time measured from the spawn."""

    def __init__(self, repo: Path, backends: Path, log: Path, timeout: float):
        self.http_port, self.grpc_port, metrics = free_ports(3)
        started = time.monotonic()
        self.log = log
        self.proc = subprocess.Popen(
            [env("TRITONSERVER"), f"--model-repository={repo}", f"--backend-directory={backends}",
             f"--http-port={self.http_port}", f"--grpc-port={self.grpc_port}",
             f"--metrics-port={metrics}"],
            stdout=log.open("w"), stderr=subprocess.STDOUT)
        self.client = httpclient.InferenceServerClient(f"127.0.0.1:{self.http_port}",
                                                       network_timeout=600)
        while True:
            if self.proc.poll() is not None:
                sys.exit(f"tritonserver exited ({self.proc.returncode}):\n{log.read_text()[-4000:]}")
            try:
                if self.client.is_server_ready():
                    break
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            if time.monotonic() - started > timeout:
                self.stop()
                sys.exit(f"tritonserver not ready in {timeout:.0f} s:\n{log.read_text()[-4000:]}")
            time.sleep(0.05)
        self.ready_s = time.monotonic() - started

    def rss_mib(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"^VmRSS:\s+(\d+)", status, re.M).group(1)) / 1024

    def infer(self, model: str, photo: Path, enroll: str | None = None,
              forget: str | None = None) -> dict:
        inputs = []
        if photo is not None:
            x = httpclient.InferInput("ENCODED", [1, 1], "BYTES")
            x.set_data_from_numpy(np.array([[photo.read_bytes()]], dtype=object))
            inputs.append(x)
        for name, value in (("ENROLL", enroll), ("FORGET", forget)):
            if value is not None:
                x = httpclient.InferInput(name, [1, 1], "BYTES")
                x.set_data_from_numpy(np.array([[value.encode()]], dtype=object))
                inputs.append(x)
        out = self.client.infer(model, inputs).as_numpy("RESULT")
        return json.loads(out.reshape(-1)[0])

    def stop(self) -> float:
        """SIGTERM (Triton unloads the models); the seconds until the process exited. The
        client's connection is closed first: Triton waits for open connections before unloading,
        up to its exit timeout."""
        self.client.close()
        started = time.monotonic()
        self.proc.terminate()
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return time.monotonic() - started

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def kill_while_saving(self, gallery: Path) -> None:
        """SIGTERM, then SIGKILL as soon as the unload's save shows as a temporary file."""
        self.client.close()
        self.proc.terminate()
        while not list(gallery.glob("gallery.*.index.*.tmp")):
            if self.proc.poll() is not None:
                sys.exit(f"the server exited before its save was seen:\n{self.log.read_text()[-4000:]}")
            time.sleep(0.001)
        self.kill()


def fill(gallery: Path, data: Path, people: int) -> None:
    """Add `people` rows of data's base.f32 (names from labels.i64) to the store, as rows of the
    embedder that enrolled obama."""
    base = np.memmap(data / "base.f32", dtype="<f4", mode="r").reshape(-1, DIM)
    labels = np.fromfile(data / "labels.i64", dtype="<i8")
    assert len(base) >= people, f"{data} holds {len(base)} rows, not {people}"
    with closing(sqlite3.connect(gallery / "gallery.sqlite3")) as db:
        [(embedder,)] = db.execute("SELECT DISTINCT embedder FROM enrollments").fetchall()
        for start in range(0, people, 50_000):
            end = min(people, start + 50_000)
            db.executemany(
                "INSERT INTO enrollments (embedder, name, embedding, enrolled_at_ms) "
                "VALUES (?, ?, ?, 0)",
                ((embedder, f"person {labels[i]}", base[i].tobytes()) for i in range(start, end)))
        db.commit()


def saved_index(gallery: Path) -> Path | None:
    """The gallery's saved index, `gallery.<embedder's tag>.index` (src/gallery/saved.rs)."""
    return min(gallery.glob("gallery.*.index"), default=None)


def prepare_big(work: Path, repo: Path, backends: Path, data: Path, people: int, photos: Path,
                logs: Path) -> float | None:
    """The big gallery, made unless the stamp says it is there; the index build's seconds."""
    gallery = repo / BIG / "gallery"
    stamp = work / "big.stamp"
    want = json.dumps({"people": people, "data": json.loads((data / "meta.json").read_text())
                       ["created"]})
    if stamp.exists() and stamp.read_text() == want and saved_index(gallery):
        return None
    shutil.rmtree(gallery)
    gallery.mkdir()
    print(f"[scale] making the big gallery: obama, then {people:,} rows", flush=True)
    server = Server(repo, backends, logs / "make-1.log", 120)
    ack = server.infer(BIG, photos / "obama.jpg", enroll="obama")
    assert ack["enrolled"]["added"], ack
    server.stop()
    fill(gallery, data, people)
    print("[scale] the first load builds the index (about 20 minutes at 1,000,000)", flush=True)
    server = Server(repo, backends, logs / "make-2.log", 7200)
    built = server.ready_s
    # A crash right after the build: the next load (the restart table's first) uses the save the
    # build wrote at load.
    server.kill()
    assert saved_index(gallery), "the index was not saved at load"
    stamp.write_text(want)
    return built


def drop_from_page_cache(folder: Path) -> None:
    """The folder's files out of the page cache (written back first), as after a reboot."""
    os.sync()
    for f in folder.iterdir():
        if f.is_file():
            with f.open("rb") as fh:
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def restarts(folder: Path, backends: Path, logs: Path, photo: Path, built: bool) -> list[dict]:
    """The big model alone, loaded after each kind of shutdown in turn (issue 61): what came
    before, that shutdown's unload seconds, then the time to ready, RSS and the load's own line.
    Probes enrolled on the way must all be there at the end (each FORGET removes one)."""
    gallery = folder / BIG / "gallery"
    probes: list[str] = []

    def enroll(server: Server) -> None:
        probes.append(f"restart probe {len(probes) + 1}")
        assert server.infer(BIG, photo, enroll=probes[-1])["enrolled"]["added"]

    def stop_cold(server: Server) -> float:
        took = server.stop()
        drop_from_page_cache(gallery)
        return took

    steps = [
        ("the build's first load, then kill -9 right after it" if built else
         "the previous run's last stop (this run did not build)", None),
        ("a clean shutdown, nothing changed", lambda s: s.stop()),
        ("an ENROLL, then a clean shutdown", lambda s: (enroll(s), s.stop())[1]),
        ("an ENROLL, then kill -9", lambda s: (enroll(s), s.kill())[1]),
        ("an ENROLL, then kill -9 during the unload's save",
         lambda s: (enroll(s), s.kill_while_saving(gallery))[1]),
        ("a clean shutdown, the gallery's files then dropped from the page cache", stop_cold),
    ]
    rows, server = [], None
    for i, (before, shut) in enumerate(steps):
        unload = shut(server) if shut else None
        if unload is not None:
            said = [x.split("] ", 1)[-1] for x in server.log.read_text().splitlines()
                    if "gallery: index" in x]
            unload = f"{unload:.1f} s, {said[-1] if said else 'no word of the index'}"
        server = Server(folder, backends, logs / f"restart-{i}.log", 600)
        [line] = [x.split("] ", 1)[-1] for x in server.log.read_text().splitlines()
                  if "gallery index" in x][-1:]
        assert not list(gallery.glob("*.tmp")), f"temporary files left: {list(gallery.glob('*.tmp'))}"
        faces = server.infer(BIG, photo)["faces"]
        assert not probes or faces[0].get("name") in probes, faces
        rows.append({"before": before, "unload": unload, "ready": server.ready_s,
                     "rss": server.rss_mib(), "line": line})
    removed = [server.infer(BIG, None, forget=p)["forgotten"]["removed"] for p in probes]
    assert removed == [1] * len(probes), f"acknowledged probes lost: {dict(zip(probes, removed))}"
    server.stop()
    return rows


def restart_lines(rows: list[dict]) -> list[str]:
    lines = ["restarts (issue 61): the big model alone, loaded after each kind of shutdown in turn"]
    for r in rows:
        unload = "" if r["unload"] is None else f" (that unload: {r['unload']})"
        lines.append(f"  {r['before']}{unload}: ready in {r['ready']:.1f} s, RSS {r['rss']:.0f} MiB")
        lines.append(f"    log: {r['line']}")
    return lines


def folder_photos(gallery: Path, photos: Path, count: int) -> None:
    """`count` distinct one-face photos, p0000.jpg..., made from the sample photos (cropped,
    scaled and lit a little differently each), unless they are there."""
    from PIL import Image, ImageEnhance

    if len(list(gallery.glob("p*.jpg"))) == count:
        return
    rng = np.random.default_rng(22)
    sources = [Image.open(photos / f).convert("RGB")
               for f in ("obama.jpg", "obama2.jpg", "obama3.jpg", "biden.jpg")]
    for i in range(count):
        img = sources[i % len(sources)]
        w, h = img.size
        dx, dy = (int(v) for v in rng.integers(0, [w // 20 + 1, h // 20 + 1]))
        img = img.crop((dx, dy, w - dx, h - dy))
        img = img.resize((int(img.width * rng.uniform(0.8, 1.0)), int(img.height * rng.uniform(0.8, 1.0))))
        img = ImageEnhance.Brightness(img).enhance(rng.uniform(0.85, 1.15))
        img.save(gallery / f"p{i:04d}.jpg", quality=90)


def perf(server: Server, model: str, inputs: Path, window_ms: int, out: Path) -> dict:
    """One perf_analyzer run at concurrency 1 over gRPC; p50/p99 in ms."""
    subprocess.run(
        [env("PERF_ANALYZER"), "-m", model, "-u", f"127.0.0.1:{server.grpc_port}", "-i", "grpc",
         "--input-data", str(inputs), "--warmup-request-count", "4", "--concurrency-range", "1:1",
         "--measurement-interval", str(window_ms), "--max-trials", "3",
         "--stability-percentage", "1000", "-f", str(out)],
        check=True, stdout=(out.with_suffix(".log")).open("w"), stderr=subprocess.STDOUT)
    with out.open() as f:
        row = next(csv.DictReader(f))
    return {"p50": int(row["p50 latency"]) / 1000, "p99": int(row["p99 latency"]) / 1000}


def perf_inputs(server: Server, model: str, photo: Path, work: Path) -> Path:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts/perf_input.py"), "--url",
         f"127.0.0.1:{server.http_port}", "--model", model, "--variants", "encoded",
         "--photo", str(photo), "--out", str(work)], check=True, stdout=subprocess.DEVNULL)
    named = work / f"{model}-{photo.stem}.json"
    (work / f"{model}-encoded.json").rename(named)
    return named


def enroll_cost(server: Server, photo: Path, rounds: int) -> dict[str, float]:
    """Median ms of ENROLL and of FORGET of a new person, alternating between the models."""
    times: dict[str, list[float]] = {}
    for i in range(rounds):
        for model in (EMPTY, BIG) if i % 2 == 0 else (BIG, EMPTY):
            t = time.perf_counter()
            ack = server.infer(model, photo, enroll="probe")
            times.setdefault(f"{model} enroll", []).append(time.perf_counter() - t)
            assert ack["enrolled"]["added"], ack
            t = time.perf_counter()
            server.infer(model, None, forget="probe")
            times.setdefault(f"{model} forget", []).append(time.perf_counter() - t)
    return {k: statistics.median(v) * 1000 for k, v in times.items()}


def latencies(repo: Path, backends: Path, logs: Path, photos: Path, work: Path, args) -> tuple:
    """perf_analyzer's rows per (model, photo), ENROLL and FORGET costs, and each answer."""
    server = Server(repo, backends, logs / "both.log", 600)
    try:
        cases = [(m, p) for p in ("obama_640x480.jpg", "biden.jpg") for m in (EMPTY, BIG)]
        inputs = {c: perf_inputs(server, c[0], photos / c[1], work) for c in cases}
        got: dict = {}
        for r in range(args.rounds):
            for c in cases if r % 2 == 0 else cases[::-1]:
                out = logs / f"{c[0]}-{Path(c[1]).stem}-r{r}.csv"
                got.setdefault(c, []).append(perf(server, c[0], inputs[c], args.window_ms // args.rounds, out))
        costs = enroll_cost(server, photos / "biden.jpg", 20)
        answers = {c: [(f.get("name"), f.get("distance")) for f in
                       server.infer(c[0], photos / c[1])["faces"]] for c in cases}
    finally:
        server.stop()
    return got, costs, answers


def latency_lines(got: dict, costs: dict, answers: dict, people: int, window_ms: int) -> list[str]:
    rounds = len(next(iter(got.values())))
    cpu = next((x.split(":", 1)[1].strip() for x in Path("/proc/cpuinfo").read_text().splitlines()
                if x.startswith("model name")), "?")
    lines = [f"perf_analyzer, gRPC, concurrency 1, ENCODED, {rounds} serpentine rounds x 3 "
             f"windows x {window_ms // rounds} ms; median of the rounds' p50 / p99 (ms) ({cpu}, {os.cpu_count()} CPUs, "
             f"{time.strftime('%F %T')}):"]
    for photo in ("obama_640x480.jpg", "biden.jpg"):
        e, b = got[(EMPTY, photo)], got[(BIG, photo)]
        med = lambda rows, k: statistics.median(x[k] for x in rows)  # noqa: E731
        lines.append(f"  {photo:<18} empty {med(e, 'p50'):6.2f} / {med(e, 'p99'):6.2f}   "
                     f"{people + 1:,} people {med(b, 'p50'):6.2f} / {med(b, 'p99'):6.2f}   "
                     f"ratio p50 {med(b, 'p50') / med(e, 'p50'):.3f}")
        [(name, distance)] = answers[(BIG, photo)] or [(None, None)]
        lines.append(f"    the {people + 1:,}-person gallery answers {name!r}"
                     + (f" (nearest at {distance:.3f})" if distance is not None else ""))
    lines.append("ENROLL and FORGET through the server (biden.jpg), alternating, median of 20 (ms):")
    for what in ("enroll", "forget"):
        e, b = costs[f"{EMPTY} {what}"], costs[f"{BIG} {what}"]
        lines.append(f"  {what:<7} empty {e:6.2f}   big {b:6.2f}   ratio {b / e:.3f}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="face_onnx")
    ap.add_argument("--people", type=int, default=1_000_000)
    ap.add_argument("--data", type=Path, help="default: out/matching/<the model's data set>")
    ap.add_argument("--work", type=Path, help="default: out/gallery-scale[-face]")
    ap.add_argument("--library", type=Path, default=ROOT / "target/release/libtriton_face.so")
    ap.add_argument("--photos", type=int, default=2000, help="gallery folder photos")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--window-ms", type=int, default=4000)
    ap.add_argument("--latency-only", action="store_true")
    args = ap.parse_args()
    use_model(args.model)
    suffix = "" if args.model == "face_onnx" else f"-{args.model}"
    dim, metric = MODELS[args.model]
    args.data = args.data or ROOT / f"out/matching/clustered-{metric}-{dim}d-1m"
    args.work = args.work or ROOT / f"out/gallery-scale{suffix}"
    photos = Path(env("FACE_PHOTOS"))
    onnx_dir = Path(os.environ.get("FACE_ONNX_DIR") or Path(env("FACE_ASSETS")) / "onnx")
    if not (args.data / "base.f32").exists():
        sys.exit(f"{args.data}: no data set; make it with benches/matching/run.sh or "
                 f"BENCH_MATCHING_SETS=clustered:{metric}:1000000 bash benches/matching/run.sh")
    work, logs = args.work, args.work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    backends = work / "backends"
    (backends / "face").mkdir(parents=True, exist_ok=True)
    shutil.copy2(args.library, backends / "face/libtriton_face.so")
    repo = work / "models"
    # Each model alone in a repository of its own: ready time and memory without the other.
    alone = {m: work / f"models-{m}-alone" for m in (EMPTY, BIG)}
    max_size = args.people + 100
    model_dir(repo, BIG, onnx_dir, max_size)
    empty = model_dir(repo, EMPTY, onnx_dir, max_size)
    shutil.rmtree(empty / "gallery")
    (empty / "gallery").mkdir()
    for model, folder in alone.items():
        folder.mkdir(exist_ok=True)
        if not (folder / model).exists():
            (folder / model).symlink_to(repo / model)

    built = prepare_big(work, repo, backends, args.data, args.people, photos, logs)
    if args.latency_only:
        lines = latency_lines(*latencies(repo, backends, logs, photos, work, args), args.people,
                              args.window_ms)
        text = "\n".join(lines) + "\n"
        print(text)
        (ROOT / f"out/bench-gallery-scale{suffix}-latency.txt").write_text(text)
        return
    restarted = restarts(alone[BIG], backends, logs, photos / "biden.jpg", built is not None)
    ready, rss = {}, {}
    for model in (EMPTY, BIG):
        server = Server(alone[model], backends, logs / f"{model}-alone.log", 600)
        ready[model], rss[model] = server.ready_s, server.rss_mib()
        loaded = [x for x in server.log.read_text().splitlines() if "gallery index" in x]
        server.stop()
    # A gallery folder of PHOTOS photos: loaded once (every photo embedded), then again (the
    # store's photo cache), each against the empty model's load.
    photo_repo = work / "models-photos"
    gallery = model_dir(photo_repo, PHOTOS_MODEL, onnx_dir, max_size) / "gallery"
    for f in gallery.glob("gallery.*"):
        f.unlink()
    folder_photos(gallery, photos, args.photos)
    for run in ("first", "again"):
        server = Server(photo_repo, backends, logs / f"photos-{run}.log", 1800)
        ready[f"photos {run}"] = server.ready_s
        counts = re.findall(r"gallery photos: .*?(?=\")", server.log.read_text())
        ready[f"photos {run} log"] = counts[-1] if counts else "?"
        server.stop()
    got, costs, answers = latencies(repo, backends, logs, photos, work, args)
    cpu = next((x.split(":", 1)[1].strip() for x in Path("/proc/cpuinfo").read_text().splitlines()
                if x.startswith("model name")), "?")
    lines = [f"gallery at scale, end to end: {EMPTY} with an empty gallery and with "
             f"{args.people + 1:,} people, one server run ({cpu}, {os.cpu_count()} CPUs, "
             f"{time.strftime('%F %T')})",
             f"time to ready, each model alone in a server: empty {ready[EMPTY]:.1f} s, "
             f"{args.people + 1:,} people {ready[BIG]:.1f} s"
             + (f" (its index was built by this run's first load, in {built:.0f} s)" if built
                else ""),
             f"a gallery folder of {args.photos:,} photos: first load {ready['photos first']:.1f} s "
             f"({ready['photos first log']}), again {ready['photos again']:.1f} s "
             f"({ready['photos again log']}): {ready['photos again'] / ready[EMPTY]:.2f}x the "
             f"empty model's",
             f"server RSS, each model alone: empty {rss[EMPTY]:.0f} MiB, {args.people + 1:,} "
             f"people {rss[BIG]:.0f} MiB: the gallery adds {rss[BIG] - rss[EMPTY]:.0f} MiB",
             *(f"  log: {x.split('] ', 1)[-1]}" for x in loaded),
             *restart_lines(restarted),
             *latency_lines(got, costs, answers, args.people, args.window_ms)]
    text = "\n".join(lines) + "\n"
    print(text)
    (ROOT / f"out/bench-gallery-scale{suffix}.txt").write_text(text)


if __name__ == "__main__":
    main()
