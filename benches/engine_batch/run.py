#!/usr/bin/env python3
"""The ONNX engine one item a run against runs of several, end to end, in one server (issue 57).

Models with the shipped `face_onnx` config, served together by one tritonserver:
  - `face_onnx`: as shipped (on KIND_CPU: one item a run, max_engine_batch's CPU default);
  - `face_onnx_bB` for each --batches B: the same with `max_engine_batch: B`;
  - with --before LIB, `face_onnx_before`: another build of libtriton_face.so (the commit
    before batching, say) with the same config less the parameters it did not know yet, its
    library in its own model folder (Triton initialises each library path once; both run in
    one process).
perf_analyzer (gRPC) on a one-face 640x480 photo as IMAGE and as ENCODED at each
--concurrency, the models in serpentine rounds (forward, then backward) so that the
machine's drift falls on all alike; every response checked against the model's first answer.
Writes out/bench-engine-batch.txt: frames/s, p50 and p99 per model, input and concurrency
(mean of the rounds), and each model's frames/s as a ratio of `face_onnx`'s.

  python benches/engine_batch/run.py [--before LIB] [--batches "8"] [--concurrency "1 8 32"]
                                     [--rounds 2] [--window-ms 3000]
Needs assets/env.sh sourced and the release library built (scripts/build.sh).
"""

from __future__ import annotations

import argparse
import csv
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benches" / "gallery_scale"))
from run import Server, env  # noqa: E402  (the scale bench's server, reused)

SHIPPED = "face_onnx"
ONNX_FILES = ("fr_detect.onnx", "fr_landmark.onnx", "fr_feature.onnx")
INPUTS = ("image", "encoded")


def model(models: Path, name: str, onnx_dir: Path, batch: int | None,
          library: Path | None = None) -> None:
    d = models / name
    (d / "1").mkdir(parents=True)
    (d / "gallery").mkdir()
    text = (ROOT / f"model_repository/{SHIPPED}/config.pbtxt").read_text()
    text = re.sub(r"^name: .*$", f'name: "{name}"', text, flags=re.M)
    if library:  # an earlier build: the parameters of batching are new
        text = re.sub(r'^parameters \{ key: "free_batch".*\n', "", text, flags=re.M)
    if batch:
        text += f'parameters {{ key: "max_engine_batch" value: {{ string_value: "{batch}" }} }}\n'
    (d / "config.pbtxt").write_text(text)
    for f in ONNX_FILES:
        (d / "1" / f).symlink_to(onnx_dir / f)
    photos = Path(env("FACE_PHOTOS"))
    for photo in ("obama.jpg", "biden.jpg"):
        shutil.copy2(photos / photo, d / "gallery" / photo)
    if library:
        shutil.copy2(library, d / "libtriton_face.so")


def perf_input(server: Server, name: str, photo: Path, work: Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts/perf_input.py"), "--url",
         f"127.0.0.1:{server.http_port}", "--model", name, "--photo", str(photo),
         "--out", str(work)], check=True, stdout=subprocess.DEVNULL)


def perf(server: Server, name: str, source: str, concurrency: int, window_ms: int,
         work: Path, out: Path) -> dict[str, float]:
    done = subprocess.run(
        [env("PERF_ANALYZER"), "-m", name, "-u", f"127.0.0.1:{server.grpc_port}", "-i", "grpc",
         "--input-data", str(work / f"{name}-{source}.json"),
         "--warmup-request-count", str(2 * concurrency),
         "--concurrency-range", f"{concurrency}:{concurrency}",
         "--measurement-interval", str(window_ms), "--max-trials", "3",
         "--stability-percentage", "1000", "-f", str(out)],
        stdout=out.with_suffix(".log").open("w"), stderr=subprocess.STDOUT)
    if done.returncode != 0:
        sys.exit(f"perf_analyzer failed: {name} {source} c{concurrency}: see {out.with_suffix('.log')}")
    with out.open() as f:
        row = next(csv.DictReader(f))
    return {"fps": float(row["Inferences/Second"]), "p50": int(row["p50 latency"]) / 1000,
            "p99": int(row["p99 latency"]) / 1000}


def serve_and_measure(models: Path, backends: Path, names: list[str], cells: list[tuple[str, int]],
                      args: argparse.Namespace, work: Path, prefix: Path) -> dict:
    """One server over `models`, a one-face 640x480 photo for each model, then rounds()."""
    prefix.parent.mkdir(exist_ok=True)
    server = Server(models, backends, Path(f"{prefix}-server.log"), 300)
    try:
        photo = Path(env("FACE_PHOTOS")) / "obama_640x480.jpg"
        for name in names:
            perf_input(server, name, photo, work)
        return rounds(server, names, cells, args, work, prefix)
    finally:
        server.stop()


def rounds(server: Server, names: list[str], cells: list[tuple[str, int]],
           args: argparse.Namespace, work: Path, prefix: Path) -> dict:
    """Every cell for every model, `args.rounds` serpentine rounds (forward, then backward, so
    the machine's drift falls on all alike): {(model, input, concurrency): [figures a round]}."""
    results: dict[tuple[str, str, int], list[dict[str, float]]] = {}
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for source, concurrency in cells:
            for name in order:
                got = perf(server, name, source, concurrency, args.window_ms, work,
                           Path(f"{prefix}-{name}-{source}-c{concurrency}-r{r}.csv"))
                results.setdefault((name, source, concurrency), []).append(got)
                print(f"round {r + 1}: {name} {source} c{concurrency}: {got['fps']:.1f}/s "
                      f"p50 {got['p50']:.1f} ms p99 {got['p99']:.1f} ms", flush=True)
    return results


def table(results: dict, cells: list[tuple[str, int]], names: list[str], anchors: list[str],
          model_first: bool = False) -> list[str]:
    """Markdown rows: each model's mean frames/s, p50 and p99 a cell, and its frames/s as a
    ratio of each anchor's."""
    mean = lambda runs, k: sum(r[k] for r in runs) / len(runs)  # noqa: E731
    rows = []
    for source, concurrency in cells:
        for name in names:
            runs = results[(name, source, concurrency)]
            fps = mean(runs, "fps")
            ratios = [fps / mean(results[(a, source, concurrency)], "fps") for a in anchors]
            cell = [source.upper(), str(concurrency)]
            head = [name, *cell] if model_first else [*cell, name]
            rows.append("| " + " | ".join(
                [*head, f"{fps:.1f}", f"{mean(runs, 'p50'):.1f}", f"{mean(runs, 'p99'):.1f}",
                 *(f"{r:.2f}" + ("" if model_first else "×") for r in ratios)]) + " |")
    return rows


def report(path: Path, args: argparse.Namespace, work: Path, head: str, rows: list[str]) -> None:
    """The table written to `path` and printed; the work folder removed."""
    lines = [f"one-face 640x480 frames, {args.rounds} rounds of {args.window_ms} ms windows", "",
             head, "|" + "---|" * head.count(" | ") + "---|", *rows]
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    print("\n" + text)
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another libtriton_face.so to serve beside")
    parser.add_argument("--batches", default="8")
    parser.add_argument("--concurrency", default="1 8 32")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--window-ms", type=int, default=3000)
    args = parser.parse_args()
    onnx_dir = Path(env("FACE_ASSETS")) / "onnx"
    names = [SHIPPED] + [f"{SHIPPED}_b{b}" for b in args.batches.split()]
    work = Path(tempfile.mkdtemp(prefix="engine-batch-"))
    models, backends = work / "models", work / "backends" / "face"
    backends.mkdir(parents=True)
    shutil.copy2(ROOT / "target/release/libtriton_face.so", backends / "libtriton_face.so")
    model(models, SHIPPED, onnx_dir, None)
    for b in args.batches.split():
        model(models, f"{SHIPPED}_b{b}", onnx_dir, int(b))
    if args.before:
        names.append(f"{SHIPPED}_before")
        model(models, names[-1], onnx_dir, None, args.before.resolve())
    cells = [(s, c) for s in INPUTS for c in (int(x) for x in args.concurrency.split())]
    out = ROOT / "out"
    results = serve_and_measure(models, backends.parent, names, cells, args, work,
                                out / "bench-engine-batch")
    report(out / "bench-engine-batch.txt", args, work,
           "| model | input | concurrency | frames/s | p50 ms | p99 ms | frames/s vs face_onnx |",
           table(results, cells, names, [SHIPPED], model_first=True))


if __name__ == "__main__":
    main()
