#!/usr/bin/env python3
"""How the ONNX model's throughput depends on its instances, batch_threads and
max_engine_batch, and on how the frame arrives (run by `gpu_check.sh --sweep`, after the
check; also on a machine without a GPU, with --kind KIND_CPU).

Each variant is "[cpu:|gpu:]NxT[bB][+KEY=VALUE...]": N instances of T batch_threads,
max_engine_batch B (default: the backend's), on the CPU or the GPU (default: --kind), with
any other model parameters set (`+run_sizes=8+cudnn_conv_algo_search=exhaustive`). Every variant is a model
of the same server (max_batch_size and queue delay from the flags), loaded alone in its
turn; for each input (`image`: a one-face 640x480 frame as IMAGE, `image-shm`: the same
through system shared memory, so that perf_analyzer's own sending is not the limit,
`encoded`: the JPEG as ENCODED) and each concurrency, perf_analyzer measures frames/s, p50
and p99, Triton's queue and compute time, while nvidia-smi is read every half second (GPU
busy %, mean, and the most memory used). With --rounds R every variant is measured R times,
in serpentine order (forward, then backward), so that a machine that drifts does not favour
one variant; the table gives each round.

--pipeline picks the shipped config the variants are made from (face_onnx, the default, or
face_onnx_yunet). Writes OUT/NAME.md; the rest goes to OUT/NAME/ (NAME: --name, default sweep)."""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import check  # check.py beside this file: the model repository, the server

COLUMNS = ("| variant | input | concurrency | round | frames/s | p50 ms | p99 ms | queue ms "
           "| compute ms | GPU busy | GPU memory |")
# perf_analyzer's shared memory refuses a model with optional inputs: the frames sent through
# it go to a copy of the variant that takes IMAGE alone.
IMAGE_ONLY = """input [
  {
    name: "IMAGE"
    data_type: TYPE_UINT8
    dims: [ -1, -1, 3 ]
    allow_ragged_batch: true
  }
]
"""
SHM = "image-shm"
# The bundle's ONNX configs a sweep can be made from: the sample (three runs a one-face
# frame) and the GPU example, YuNet and SFace (two: YuNet gives its own five points).
PIPELINES = ("face_onnx", "face_onnx_yunet")
RUN_LIMIT_S = 180  # one perf_analyzer run
INPUTS = {  # input name -> (perf_analyzer input file, --shape, extra arguments)
    "image": ("obama_640x480-IMAGE.json", "IMAGE:480,640,3", []),
    "image-shm": ("obama_640x480-IMAGE.json", "IMAGE:480,640,3",
                  ["--shared-memory", "system", "--output-shared-memory-size", "65536"]),
    "encoded": ("obama_640x480-ENCODED.json", "ENCODED:1", []),
}


@dataclass(frozen=True)
class Variant:
    kind: str  # KIND_CPU or KIND_GPU
    instances: int
    threads: int
    batch: int | None  # max_engine_batch; None: the backend's default
    params: tuple[tuple[str, str], ...] = ()  # other model parameters

    @staticmethod
    def parse(text: str, default_kind: str) -> "Variant":
        found = re.fullmatch(r"(?:(cpu|gpu):)?(\d+)x(\d+)(?:b(\d+))?((?:\+\w+=[\w,.]+)*)", text)
        if not found:
            raise SystemExit(f"variant {text!r}: expected [cpu:|gpu:]NxT[bB][+KEY=VALUE...], "
                             "e.g. 4x1b32+run_sizes=32")
        kind, n, t, b, extra = found.groups()
        kind = {"cpu": "KIND_CPU", "gpu": "KIND_GPU", None: default_kind}[kind]
        params = tuple(tuple(p.split("=", 1)) for p in extra.split("+") if p)
        return Variant(kind, int(n), int(t), int(b) if b else None, params)

    @property
    def model(self) -> str:
        batch = f"b{self.batch}" if self.batch else ""
        extra = "".join(f"_{k}_{v}" for k, v in self.params).replace(",", "_").replace(".", "_")
        where = 'c' if self.kind == 'KIND_CPU' else 'g'
        return f"{where}{self.instances}x{self.threads}{batch}{extra}"

    @property
    def label(self) -> str:
        batch = f", batch {self.batch}" if self.batch else ""
        where = "CPU" if self.kind == "KIND_CPU" else "GPU"
        extra = "".join(f", {k} {v}" for k, v in self.params)
        return f"{where} {self.instances} x {self.threads}{batch}{extra}"


class GpuSampler:
    """nvidia-smi read every half second while a run lasts: mean busy %, most memory."""

    def __init__(self):
        self.busy: list[float] = []
        self.memory: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> "GpuSampler":
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            try:
                done = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                                       "--format=csv,noheader,nounits"],
                                      capture_output=True, text=True, timeout=5)
            except (FileNotFoundError, subprocess.TimeoutExpired):
                return
            if done.returncode != 0 or not done.stdout.strip():
                return
            busy, memory = done.stdout.strip().splitlines()[0].split(",")[:2]
            self.busy.append(float(busy))
            self.memory.append(float(memory))

    def columns(self) -> str:
        if not self.busy:
            return "- | -"
        return f"{sum(self.busy) / len(self.busy):.0f}% | {max(self.memory):,.0f} MiB"


def perf(server: check.Server, variant: Variant, source: str, concurrency: int, round_: int,
         work: Path, perf_ms: int) -> str:
    name = work / f"{variant.model}-{source}-c{concurrency}-r{round_}"
    data, shape, extra = INPUTS[source]
    model = shm_model(variant.model) if source == SHM else variant.model
    command = [str(check.BUNDLE / "perf_analyzer" / "run"), "-m", model, "-i", "grpc",
               "-u", f"127.0.0.1:{server.grpc}",
               "--input-data", str(check.BUNDLE / "perf" / data), "--shape", shape,
               "--concurrency-range", f"{concurrency}:{concurrency}",
               "--warmup-request-count", str(4 * concurrency),
               "--measurement-interval", str(perf_ms), "--max-trials", "5",
               "--stability-percentage", "1000", "-f", f"{name}.csv", *extra]
    head = f"| {variant.label} | {source} | {concurrency} | {round_} |"
    measured = measure(command, name)
    if measured is None:
        return f"{head} failed (see {work.name}/{name.name}.log) | | | | | | |"
    per_second, ms, gpu = measured
    return (f"{head} {per_second:.1f} | {ms['p50']:.1f} | {ms['p99']:.1f} | "
            f"{ms['queue']:.1f} | {ms['compute']:.1f} | {gpu} |")


def measure(command: list[str], name: Path) -> tuple[float, dict[str, float], str] | None:
    """perf_analyzer's `command` (its output to NAME.log, its table to NAME.csv) with the GPU
    sampled while it runs: inferences/s, check.perf_figures' times and the GPU columns; None
    when it failed or ran past RUN_LIMIT_S (a lent machine's command has 10 minutes)."""
    with open(f"{name}.log", "w") as log, GpuSampler() as gpu:
        try:
            done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=RUN_LIMIT_S)
        except subprocess.TimeoutExpired:
            return None
    if done.returncode != 0:
        return None
    per_second, ms = check.perf_figures(Path(f"{name}.csv"))
    return per_second, ms, gpu.columns()


def shm_model(model: str) -> str:
    return f"{model}_shm"


def write_models(models: Path, variants: list[Variant], args, shm: bool) -> None:
    onnx = (check.BUNDLE / "repos" / f"{args.pipeline}.pbtxt").read_text()
    check.write_first_model(models)
    for v in variants:
        settings = {"batch_threads": v.threads, **dict(v.params)}
        if v.batch:
            settings["max_engine_batch"] = v.batch
        config = check.configure(onnx, v.model, v.kind, v.instances,
                                 max_batch_size=args.max_batch_size,
                                 queue_delay_us=args.queue_delay_us, **settings)
        check.write_model(models, v.model, config, "onnx")
        if shm:
            config = re.sub(r'^name: ".*"', f'name: "{shm_model(v.model)}"', config, flags=re.M)
            config = re.sub(r"^input \[.*?^\]\n", IMAGE_ONLY, config, count=1, flags=re.M | re.S)
            check.write_model(models, shm_model(v.model), config, "onnx")


def serpentine(variants: list[Variant], rounds: int):
    for round_ in range(1, rounds + 1):
        order = variants if round_ % 2 else variants[::-1]
        for v in order:
            yield round_, v


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--kind", default="KIND_GPU", help="of variants without cpu: or gpu:")
    parser.add_argument("--variants", default="4x1 4x1b8 2x1 1x1 cpu:4x4")
    parser.add_argument("--inputs", default="image-shm encoded")
    parser.add_argument("--concurrency", default="8 32 64 128")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--queue-delay-us", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--perf-ms", type=int, default=2000)
    parser.add_argument("--name", default="sweep", help="of the table and the work folder")
    parser.add_argument("--pipeline", default="face_onnx", choices=PIPELINES,
                        help="the shipped config every variant is made from")
    args = parser.parse_args()
    variants = list(dict.fromkeys(Variant.parse(v, args.kind) for v in args.variants.split()))
    sources = args.inputs.split()
    unknown = [s for s in sources if s not in INPUTS]
    if unknown:
        raise SystemExit(f"--inputs: unknown {unknown}; known: {', '.join(INPUTS)}")
    out = Path(args.out).resolve()
    work = out / args.name  # its server's log, perf_analyzer's files, the models
    shutil.rmtree(work, ignore_errors=True)
    write_models(work / "models", variants, args, SHM in sources)
    lines = [COLUMNS, "|---|---|---|---|---|---|---|---|---|---|---|"]
    failed = False
    server = check.Server(work / "models", work)
    try:
        for round_, variant in serpentine(variants, args.rounds):
            began = time.monotonic()
            loaded = [variant.model] + ([shm_model(variant.model)] if SHM in sources else [])
            why = next(filter(None, map(server.load, loaded)), None)
            if why:
                lines.append(f"| {variant.label} | | | {round_} | load failed: "
                             f"{' '.join(why.split())} | | | | | | |")
                failed = True
                continue
            print(f"{variant.model}: loaded in {time.monotonic() - began:.0f} s", flush=True)
            for source in sources:
                for concurrency in (int(c) for c in args.concurrency.split()):
                    lines.append(perf(server, variant, source, concurrency, round_, work,
                                      args.perf_ms))
                    failed |= "failed" in lines[-1]
                    print(lines[-1], flush=True)
            for model in loaded:
                server.client.unload_model(model)
                while server.client.is_model_ready(model):
                    time.sleep(0.2)
    finally:
        server.stop()
    settings = (f"{args.pipeline}'s models, max_batch_size {args.max_batch_size}, "
                f"queue delay {args.queue_delay_us} us, {args.perf_ms} ms windows")
    check.write_table(out / f"{args.name}.md", settings, lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
