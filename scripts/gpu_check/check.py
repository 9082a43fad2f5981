#!/usr/bin/env python3
"""The GPU check of triton-face's offline bundle (run by gpu_check.sh, which sets up the
client and the CUDA libraries first). From the bundle alone it:

  1. writes a model repository: face_onnx_cpu (KIND_CPU) beside face_onnx_gpu, the ONNX
     engine on onnxruntime's CUDA provider, face_yunet_cpu beside face_yunet_gpu (the GPU
     example: YuNet and SFace, two model runs a face), face_sequence_gpu (the shipped
     face_onnx_sequence: the ONNX engine under Triton's sequence batcher), face_dlib_gpu
     (the dlib engine), and face_onnx_too_new (min_compute_capability above any card);
  2. starts the bundle's tritonserver on it and loads the models one by one;
  3. sends the sample photos to each CPU and GPU pair and compares the answers (same
     faces and names, boxes within 2 px, distances within 0.01), with per-stage timings;
  4. runs the sample video's frames through the sequence model against their truth;
  5. asks dlib on a KIND_GPU model who is in two photos, and the server to load the model
     whose minimum compute capability is above the card (it must refuse, and the rest
     keep serving);
  6. runs perf_analyzer on a one-face 640x480 IMAGE at concurrency 1, 8 and 32 against
     face_onnx_gpu and face_onnx_cpu;
  7. writes out/summary.md (and prints it).

With --cpu every model is KIND_CPU (no GPU needed: the suite runs it so), and what needs a
GPU is reported as not run. Exit status 1 when a check fails; the summary says which.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

BUNDLE = Path(__file__).resolve().parent.parent
PHOTOS = ["obama2.jpg", "obama3.jpg", "biden.jpg", "obama_640x480.jpg", "group5_480.jpg",
          "noface.jpg", "32bit.png", "obama_partial_face.jpg"]
GALLERY = ["obama.jpg", "biden.jpg"]
BOX_PX, DISTANCE = 2, 0.01
CONCURRENCY = [1, 8, 32]
# The GPU example pair: YuNet gives its own five points, so a one-face frame is two runs.
EXAMPLE = "face_yunet"
TOO_NEW = "99.0"


# ---- the model repository ------------------------------------------------------------------

def parameter(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'


def set_parameter(config: str, key: str, value: str) -> str:
    """`config` with parameter `key` set to `value` (replaced, or added)."""
    line = re.compile(rf'^parameters \{{ key: "{key}".*\n', re.M)
    return line.sub(parameter(key, value), config) if line.search(config) \
        else config + parameter(key, value)


def configure(template: str, name: str, kind: str, count: int, **settings) -> str:
    config = re.sub(r'^name: ".*"', f'name: "{name}"', template, count=1, flags=re.M)
    config = re.sub(r"kind: KIND_\w+", f"kind: {kind}", config)
    config = re.sub(r"count: \d+", f"count: {count}", config)
    if "max_batch_size" in settings:
        config = re.sub(r"max_batch_size: \d+", f"max_batch_size: {settings.pop('max_batch_size')}",
                        config)
    if "queue_delay_us" in settings:
        config = re.sub(r"max_queue_delay_microseconds: \d+",
                        f"max_queue_delay_microseconds: {settings.pop('queue_delay_us')}", config)
    for key, value in settings.items():
        config = set_parameter(config, key, str(value))
    return config


def write_first_model(root: Path) -> None:
    """The small CPU model a Server waits for (face_onnx_cpu): for a repository of the sweep's
    or the streams' own, where the check's is not."""
    onnx = (BUNDLE / "repos" / "face_onnx.pbtxt").read_text()
    write_model(root, "face_onnx_cpu", configure(onnx, "face_onnx_cpu", "KIND_CPU", 1,
                                                 max_batch_size=32, batch_threads=1), "onnx")


def write_model(root: Path, name: str, config: str, engine: str) -> None:
    model = root / name
    (model / "1").mkdir(parents=True)
    (model / "gallery").mkdir()
    for photo in GALLERY:
        shutil.copy2(BUNDLE / "photos" / photo, model / "gallery" / photo)
    if engine == "onnx":
        for onnx in (BUNDLE / "models" / "onnx").iterdir():
            (model / "1" / onnx.name).symlink_to(onnx)
    else:
        (model / "weights").symlink_to(BUNDLE / "models" / "dlib")
    (model / "config.pbtxt").write_text(config)


def model_repository(root: Path, gpu: str, cores: int) -> dict[str, str]:
    """The check's models, written under `root`; returns {name: what it is}."""
    templates = BUNDLE / "repos"
    onnx = (templates / "face_onnx.pbtxt").read_text()
    yunet = (templates / "face_onnx_yunet.pbtxt").read_text()
    dlib = (templates / "face.pbtxt").read_text()
    sequence = (templates / "face_onnx_sequence.pbtxt").read_text()
    # The CPU model uses every core: instances x threads, one engine per thread.
    threads = 4
    cpu_instances = max(1, cores // threads)
    models = {
        "face_onnx_cpu": (configure(onnx, "face_onnx_cpu", "KIND_CPU", cpu_instances,
                                    max_batch_size=32, batch_threads=threads), "onnx"),
        # GPU instances of one engine each: engines on one instance's threads fight over the
        # card (docs/gpu.md, "On a GPU": 4 x 1 served 2.5x what 2 x 4 did on an H100).
        "face_onnx_gpu": (configure(onnx, "face_onnx_gpu", gpu, 4, max_batch_size=32,
                                    queue_delay_us=500, batch_threads=1), "onnx"),
        "face_dlib_gpu": (configure(dlib, "face_dlib_gpu", gpu, 1), "dlib"),
    }
    for name, kind, count, threads in ((f"{EXAMPLE}_cpu", "KIND_CPU", cpu_instances, threads),
                                       (f"{EXAMPLE}_gpu", gpu, 4, 1)):
        models[name] = (configure(yunet, name, kind, count, max_batch_size=32,
                                  queue_delay_us=500, batch_threads=threads), "onnx")
    # The shipped ONNX sequence model (its cadence, its models' batch freed at load).
    models["face_sequence_gpu"] = (configure(sequence, "face_sequence_gpu", gpu, 1), "onnx")
    if gpu == "KIND_GPU":
        models["face_onnx_too_new"] = (configure(onnx, "face_onnx_too_new", gpu, 1,
                                                 min_compute_capability=TOO_NEW), "onnx")
    for name, (config, engine) in models.items():
        write_model(root, name, config, engine)
    return {name: engine for name, (_, engine) in models.items()}


# ---- the server ----------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, models: Path, out: Path):
        self.http, self.grpc, self.metrics = free_port(), free_port(), free_port()
        self.log = out / "server.log"
        command = [str(BUNDLE / "tritonserver" / "bin" / "tritonserver"),
                   f"--model-repository={models}",
                   f"--backend-directory={BUNDLE / 'backends'}",
                   "--model-control-mode=explicit", "--load-model=face_onnx_cpu",
                   f"--http-port={self.http}", f"--grpc-port={self.grpc}",
                   f"--metrics-port={self.metrics}", "--log-verbose=0"]
        print("$ " + " ".join(command), flush=True)
        self.process = subprocess.Popen(command, stdout=self.log.open("w"),
                                        stderr=subprocess.STDOUT)
        self.client = grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc}")
        deadline = time.monotonic() + 120
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"tritonserver exited ({self.process.returncode}):\n"
                                   + self.log_tail())
            try:
                if self.client.is_server_live() and self.client.is_model_ready("face_onnx_cpu"):
                    break
            except InferenceServerException:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("tritonserver not ready in 120 s:\n" + self.log_tail())
            time.sleep(0.25)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def load(self, name: str) -> str | None:
        """None when `name` loaded, else the server's reason."""
        try:
            self.client.load_model(name)
            return None
        except InferenceServerException as error:
            return error.message() or str(error)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()


# ---- requests ------------------------------------------------------------------------------

def encoded(data: bytes) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("ENCODED", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[data]], dtype=object))
    return tensor


def ask(client, model: str, data: bytes, **options) -> dict:
    result = client.infer(model, [encoded(data)], parameters=options or None)
    return json.loads(result.as_numpy("RESULT").reshape(-1)[0])


def named(faces: list[dict]) -> list[str]:
    return sorted(f["name"] for f in faces if f["name"] != "unknown")


def compare(cpu: dict, gpu: dict) -> tuple[bool, float, float, str]:
    """(equal within the tolerances, largest box difference, largest distance difference,
    what differs)."""
    a, b = cpu["faces"], gpu["faces"]
    if len(a) != len(b):
        return False, float("inf"), float("inf"), f"{len(a)} faces on the CPU, {len(b)} on the GPU"
    box = max((abs(x["box"][k] - y["box"][k]) for x, y in zip(a, b) for k in x["box"]),
              default=0.0)
    dist = max((abs((x["distance"] or 0) - (y["distance"] or 0)) for x, y in zip(a, b)),
               default=0.0)
    names = [x["name"] for x in a] == [y["name"] for y in b]
    ok = names and box <= BOX_PX and dist <= DISTANCE
    why = "" if names else f"names {[x['name'] for x in a]} vs {[y['name'] for y in b]}"
    return ok, box, dist, why


def median(values: list[float]) -> float:
    return float(np.median(values)) if values else float("nan")


def perf_command(server: Server, model: str, concurrency: int, csv_path: Path, perf_ms: int,
                 warmup: int = 2, trials: int = 3) -> list[str]:
    """perf_analyzer on a one-face 640x480 IMAGE at `concurrency`, its table to `csv_path`."""
    return [str(BUNDLE / "perf_analyzer" / "run"), "-m", model, "-i", "grpc",
            "-u", f"127.0.0.1:{server.grpc}",
            "--input-data", str(BUNDLE / "perf" / "obama_640x480-IMAGE.json"),
            "--shape", "IMAGE:480,640,3", "--concurrency-range", f"{concurrency}:{concurrency}",
            "--warmup-request-count", str(warmup * concurrency),
            "--measurement-interval", str(perf_ms), "--max-trials", str(trials),
            "--stability-percentage", "1000", "-f", str(csv_path)]


def perf_figures(csv_path: Path) -> tuple[float, dict[str, float]]:
    """perf_analyzer's table (`-f`): inferences/s, and p50, p99, Triton's queue and compute
    time in ms (keys "p50", "p99", "queue", "compute")."""
    with csv_path.open() as f:
        row = next(csv.DictReader(f))
    names = {"p50": "p50 latency", "p99": "p99 latency", "queue": "Server Queue",
             "compute": "Server Compute Infer"}
    return float(row["Inferences/Second"]), {k: float(row[v]) / 1000 for k, v in names.items()}


def write_table(path: Path, settings: str, lines: list[str]) -> None:
    """A measurement's table under its settings, to `path` and printed."""
    text = f"{settings}\n\n" + "\n".join(lines) + "\n"
    path.write_text(text)
    print("\n" + text)


# ---- the checks ----------------------------------------------------------------------------

class Check:
    def __init__(self, args):
        self.args = args
        self.out = Path(args.out).resolve()
        self.rows: list[tuple[str, str, str]] = []  # (check, result, passed: yes/no/n-a)
        self.failed = False
        self.gpu = "KIND_CPU" if args.cpu else "KIND_GPU"
        self.perf_table = ""  # perf_analyzer's table, once it ran

    def row(self, what: str, result: str, passed: bool | None) -> None:
        result = " ".join(result.split())  # one line: a table cell
        mark = "n/a" if passed is None else ("yes" if passed else "NO")
        if passed is False:
            self.failed = True
        self.rows.append((what, result, mark))
        print(f"[{mark:>3}] {what}: {result}", flush=True)

    def run(self) -> int:
        work = self.out / "models"
        if work.exists():
            shutil.rmtree(work)
        cores = os.cpu_count() or 2
        models = model_repository(work, self.gpu, cores)
        self.row("machine", f"{cores} CPU cores; {self.args.device}", None)
        server = None
        try:
            server = Server(work, self.out)
            self.load_models(server, models)
            for check in (self.device_lines, self.answers, self.sequence, self.dlib,
                          self.refusal, self.perf, self.gpu_memory):
                check(server)
        except Exception as error:  # noqa: BLE001 - any failure goes into the summary
            self.row("the check stopped", f"{type(error).__name__}: {error}", False)
            if server is not None:
                print("server log, last lines:\n" + server.log_tail())
        finally:
            if server is not None:
                server.stop()
            self.write_summary()
        return 1 if self.failed else 0

    def load_models(self, server: Server, models: dict[str, str]) -> None:
        for name in models:
            if name in ("face_onnx_cpu", "face_onnx_too_new"):
                continue
            reason = server.load(name)
            self.row(f"load {name}", "ready" if reason is None else reason, reason is None)
        if self.failed:
            raise RuntimeError("a model failed to load (server.log)")

    def device_lines(self, server: Server) -> None:
        """What the backend logged about devices: the capability check, the providers."""
        lines = [line for line in server.log_text().splitlines()
                 if re.search(r"compute capability|onnxruntime CUDA|engine on|dlib without CUDA|"
                              r"GPU \d", line)]
        (self.out / "device-lines.log").write_text("\n".join(lines) + "\n")
        for line in lines[:12]:
            print("    " + line)
        if self.args.cpu:
            self.row("device check in the log", "not run (--cpu: no KIND_GPU instance)", None)
            return
        passed = [line for line in lines if "compute capability" in line]
        self.row("compute-capability check on the card", passed[0].split("] ", 1)[-1]
                 if passed else "no log line about the compute capability", bool(passed))
        cuda = [line for line in lines if "onnxruntime CUDA" in line]
        self.row("face_onnx_gpu on onnxruntime's CUDA provider",
                 "log: " + cuda[0].split("] ", 1)[-1] if cuda else "no such log line", bool(cuda))

    def answers(self, server: Server) -> None:
        for pipeline in ("face_onnx", EXAMPLE):
            self.pair_answers(server, pipeline)

    def pair_answers(self, server: Server, pipeline: str) -> None:
        """The GPU model of `pipeline` answers the sample photos as its CPU twin."""
        client, rows, worst = server.client, [], (0.0, 0.0)
        cpu_model, gpu_model = f"{pipeline}_cpu", f"{pipeline}_gpu"
        all_equal = True
        for photo in PHOTOS:
            data = (BUNDLE / "photos" / photo).read_bytes()
            cpu = ask(client, cpu_model, data, timings=True)
            gpu = ask(client, gpu_model, data, timings=True)
            equal, box, dist, why = compare(cpu, gpu)
            all_equal &= equal
            worst = (max(worst[0], box), max(worst[1], dist))
            rows.append({"photo": photo, "cpu": cpu, "gpu": gpu, "equal": equal})
            print(f"    {pipeline} {photo}: CPU {named(cpu['faces'])} GPU {named(gpu['faces'])} "
                  f"box diff {box:.1f} px, distance diff {dist:.4f} {why}")
        (self.out / f"answers-{pipeline}.json").write_text(json.dumps(rows, indent=1))
        self.row(f"sample photos: {gpu_model} answers as {cpu_model}", f"{len(PHOTOS)} photos; "
                 f"boxes within {worst[0]:.1f} px, distances within {worst[1]:.4f}", all_equal)
        expected = {"obama2.jpg": ["obama"], "biden.jpg": ["biden"], "noface.jpg": []}
        right = all(named(r["gpu"]["faces"]) == expected[r["photo"]]
                    for r in rows if r["photo"] in expected)
        self.row(f"sample photos: names on {gpu_model}", "obama2 obama, biden biden, noface "
                 f"none" if right else f"a wrong name (answers-{pipeline}.json)", right)
        # Per-stage times of the one-face 640x480 photo, median of 10 requests each.
        data = (BUNDLE / "photos" / "obama_640x480.jpg").read_bytes()
        timings: dict[str, dict[str, list[float]]] = {gpu_model: {}, cpu_model: {}}
        for model in timings:
            for _ in range(10):
                for stage, ms in ask(client, model, data, timings=True)["timings_ms"].items():
                    timings[model].setdefault(stage, []).append(ms)
        table = ", ".join(f"{s} {median(timings[gpu_model][s]):.2f} / "
                          f"{median(timings[cpu_model].get(s, [])):.2f}"
                          for s in timings[gpu_model])
        self.row(f"timings_ms, {gpu_model} / {cpu_model} (obama_640x480.jpg, median of 10)",
                 table, None)

    def sequence(self, server: Server) -> None:
        truth = json.loads((BUNDLE / "video" / "truth.json").read_text())["frames"]
        frames = sorted((BUNDLE / "video" / "frames").glob("*.jpg"))
        wrong, last = [], len(frames) - 1
        for i, frame in enumerate(frames):
            result = server.client.infer("face_sequence_gpu", [encoded(frame.read_bytes())],
                                         sequence_id=7, sequence_start=i == 0,
                                         sequence_end=i == last)
            doc = json.loads(result.as_numpy("RESULT").reshape(-1)[0])
            want = sorted(p["name"] for p in truth[i])
            # A face half out of the frame may go either way (as tests/test_video.py).
            if named(doc["faces"]) != want and len(doc["faces"]) == len(truth[i]):
                wrong.append(i)
        ok = len(frames) == len(truth) and len(wrong) <= len(frames) // 20
        self.row("sample video through face_sequence_gpu", f"{len(frames)} frames, "
                 f"{len(wrong)} named wrong (at most {len(frames) // 20} allowed)", ok)

    def dlib(self, server: Server) -> None:
        names = [named(ask(server.client, "face_dlib_gpu",
                           (BUNDLE / "photos" / p).read_bytes())["faces"])
                 for p in ("obama2.jpg", "biden.jpg")]
        self.row("dlib engine on face_dlib_gpu", f"obama2.jpg {names[0]}, biden.jpg {names[1]}",
                 names == [["obama"], ["biden"]])
        if self.args.cpu:
            self.row("dlib's warning on a KIND_GPU instance", "not run (--cpu)", None)
            return
        warning = [line for line in server.log_text().splitlines()
                   if "face_dlib_gpu" in line and "built without CUDA" in line]
        self.row("dlib's warning on a KIND_GPU instance",
                 warning[0].split("] ", 1)[-1] if warning else "no warning logged", bool(warning))

    def refusal(self, server: Server) -> None:
        if self.args.cpu:
            self.row("a model above the card's compute capability is refused",
                     "not run (--cpu: Triton itself refuses KIND_GPU without a GPU)", None)
            return
        reason = server.load("face_onnx_too_new")
        refused = reason is not None and f"below the minimum compute capability {TOO_NEW}" in reason
        self.row("a model above the card's compute capability is refused",
                 reason or "it loaded", refused)
        still = server.client.is_model_ready("face_onnx_gpu") and named(ask(
            server.client, "face_onnx_gpu", (BUNDLE / "photos" / "obama2.jpg").read_bytes())[
                "faces"]) == ["obama"]
        self.row("the other models keep serving after the refusal",
                 "face_onnx_gpu ready, names obama2.jpg" if still else "face_onnx_gpu stopped",
                 still)

    def perf(self, server: Server) -> None:
        results = []
        # face_onnx, the quick sample: the example's CPU twin at concurrency 32 outlasts a
        # short window on a small machine (the suite's --cpu run); serve.md measures it.
        gpu_model, cpu_model = "face_onnx_gpu", "face_onnx_cpu"
        for model in (gpu_model, cpu_model):
            for concurrency in CONCURRENCY:
                name = f"perf-{model}-c{concurrency}"
                command = perf_command(server, model, concurrency, self.out / f"{name}.csv",
                                       self.args.perf_ms)
                log = self.out / f"{name}.log"
                done = subprocess.run(command, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                      timeout=300)
                if done.returncode != 0:
                    self.row(f"perf_analyzer {model} c{concurrency}",
                             "failed: " + log.read_text()[-400:], False)
                    continue
                per_second, ms = perf_figures(self.out / f"{name}.csv")
                results.append((model, concurrency, per_second, ms["p50"], ms["p99"]))
        lines = ["| model | concurrency | frames/s | p50 ms | p99 ms |", "|---|---|---|---|---|"]
        lines += [f"| {m} | {c} | {fps:.1f} | {p50:.1f} | {p99:.1f} |"
                  for m, c, fps, p50, p99 in results]
        self.perf_table = "\n".join(lines)
        print(self.perf_table)
        best = {m: max((r[2] for r in results if r[0] == m), default=0.0)
                for m in (gpu_model, cpu_model)}
        ratio = best[gpu_model] / best[cpu_model] if best[cpu_model] else 0.0
        self.row(f"perf_analyzer, one-face 640x480 IMAGE, best throughput {gpu_model} / "
                 f"{cpu_model}", f"{best[gpu_model]:.1f} / {best[cpu_model]:.1f} frames/s "
                 f"({ratio:.2f}x)", len(results) == 2 * len(CONCURRENCY))

    def gpu_memory(self, server: Server) -> None:
        if self.args.cpu:
            self.row("the server's GPU memory (nvidia-smi)", "not run (--cpu)", None)
            return
        query = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"]
        done = subprocess.run(query, capture_output=True, text=True)
        apps = done.stdout.strip().splitlines()
        mine = [line for line in apps if line.split(",")[0].strip() == str(server.process.pid)]
        if mine:
            self.row("the server's GPU memory (nvidia-smi)", mine[0].split(",")[1].strip(), True)
            return
        # In a container the driver may list other process ids, or none: say what it saw.
        total = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader"],
                               capture_output=True, text=True).stdout.strip()
        self.row("the server's GPU memory (nvidia-smi)", f"pid {server.process.pid} not listed "
                 f"(processes: {'; '.join(apps) or 'none'}); the GPU's memory in use: {total}",
                 None)

    def write_summary(self) -> None:
        lines = [f"# triton-face GPU check ({'--cpu' if self.args.cpu else 'GPU'}), "
                 f"{time.strftime('%Y-%m-%d %H:%M')}", "",
                 "| check | result | passed |", "|---|---|---|"]
        lines += [f"| {w} | {r.replace('|', '/')} | {p} |" for w, r, p in self.rows]
        lines += ["", self.perf_table, "",
                  "FAILED" if self.failed else "All checks passed."]
        text = "\n".join(lines) + "\n"
        (self.out / "summary.md").write_text(text)
        print("\n" + text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="every model KIND_CPU (no GPU)")
    parser.add_argument("--out", required=True, help="folder for the logs and the summary")
    parser.add_argument("--perf-ms", type=int, default=3000,
                        help="perf_analyzer's measurement window (3 per run)")
    parser.add_argument("--device", default="no GPU", help="the card, as nvidia-smi names it")
    return Check(parser.parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
