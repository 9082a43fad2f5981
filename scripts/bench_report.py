#!/usr/bin/env python3
"""The `make bench` table: perf_analyzer CSVs (server) next to criterion's
in-process estimates (cargo bench --bench engine), with their ratios.

  bench_report.py --server face:ENCODED=enc.csv:engine/decode+analyze \
                  --server face_onnx:IMAGE=img.csv:onnx/analyze \
                  --server face_onnx_py_expert:ENCODED=py.csv:- \
                  --ratio face_onnx:ENCODED/face_onnx_py_expert:ENCODED \
                  --criterion target/criterion --out out/bench.txt

Each --server is MODEL:INPUT=CSV[,CSV...]:BENCH: the model and input
perf_analyzer sent, its `-f` CSVs, and the in-process benchmark (criterion
GROUP/NAME) doing the same work per image, or `-` for none. Several CSVs are
rounds of the same measurement (make bench interleaves the models' rounds so
that the machine's drift over the run falls on every model alike): each
column is their mean, load level by load level (so p50 and p99 are means of
the rounds' percentiles, not percentiles of all requests). A CSV's rows are load levels:
"Concurrency" (closed loop) or "Request Rate" (open loop, requests/s). If the
run's -v output is next to the CSV as .log, the batch sizes the server's
batcher formed are read from it. Without --criterion (no in-process run) the
in-process columns and table are left out.

Each --ratio A/B (two MODEL:INPUT of --server) adds a comparison table: at
each concurrency both ran, A's throughput / B's and B's latencies / A's (above
1: A is faster).
"""
import argparse
import csv
import json
import os
import re

# Criterion benchmarks (GROUP/NAME) in the in-process table, with the engine.
BENCHES = {
    "engine/decode": "JPEG -> RGB (libjpeg-turbo)",
    "engine/analyze": "dlib HOG + 5 landmarks + ResNet",
    "engine/decode+analyze": "dlib, as one ENCODED request",
    "onnx/analyze": "onnx (onnxruntime) UltraFace + 68 lm + 512-d",
    "onnx/decode+analyze": "onnx, as one ENCODED request",
    "onnx-tract/analyze": "onnx on tract (pure Rust)",
    "onnx-tract/decode+analyze": "onnx on tract, as one ENCODED request",
}
LOAD_COLUMNS = {"Concurrency": "conc {}", "Request Rate": "{} req/s"}
COMPUTE = ("Server Compute Input", "Server Compute Infer", "Server Compute Output")
SERVER_HEADER = ["model", "input", "load", "infer/s", "p50 ms", "p99 ms", "queue ms",
                 "compute ms", "batch", "server/in-process", "p50/in-process"]
RATIO_HEADER = ["A / B", "load", "A infer/s", "B infer/s", "infer/s A/B", "p50 B/A", "p99 B/A"]


def criterion_ms(root, bench, fresh_after=None):
    """Mean time per iteration in ms (criterion's estimates are in ns)."""
    path = os.path.join(root, *bench.split("/"), "new", "estimates.json")
    if fresh_after is not None and os.path.getmtime(path) < fresh_after:
        raise SystemExit(f"{path}: older than this bench run (did cargo bench skip {bench}?)")
    with open(path) as f:
        return json.load(f)["mean"]["point_estimate"] / 1e6


def load_column(path, rows):
    """The CSV's load column: Concurrency or Request Rate."""
    for column in LOAD_COLUMNS:
        if column in rows[0]:
            return column
    raise SystemExit(f"{path}: neither of {', '.join(LOAD_COLUMNS)} in {list(rows[0])}")


def perf_rows(paths):
    """perf_analyzer -f CSV rows by increasing load, and the load column;
    latencies in us. `paths`: the rounds' CSVs, averaged per level."""
    rounds = []
    for path in paths:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        if not rows:
            raise SystemExit(f"{path}: no measurements")
        rounds.append((rows, load_column(path, rows)))
    column = rounds[0][1]
    if any(c != column for _, c in rounds):
        raise SystemExit(f"{','.join(paths)}: rounds of different load kinds")
    levels = {}
    for rows, _ in rounds:
        for row in rows:
            levels.setdefault(float(row[column]), []).append(row)
    if any(len(same) != len(rounds) for same in levels.values()):
        raise SystemExit(f"{','.join(paths)}: rounds measured different load levels")
    merged = [mean_row(same, column) for _, same in sorted(levels.items())]
    return merged, column


def mean_row(rows, column):
    """One row whose numeric columns are the mean of `rows` (the load column
    kept as written)."""
    out = dict(rows[0])
    for key in out:
        if key == column:
            continue
        try:
            out[key] = str(sum(float(r[key]) for r in rows) / len(rows))
        except (TypeError, ValueError):
            pass
    return out


def avg_batch(csv_paths, load):
    """Inference count / execution count at one load level, from the runs'
    -v output next to their CSVs (.log), or '-'."""
    inferences = executions = 0
    for csv_path in csv_paths:
        try:
            with open(os.path.splitext(csv_path)[0] + ".log") as f:
                text = f.read()
        except OSError:
            return "-"
        # "Request concurrency: 2" or "Request Rate: 8 inference requests per seconds"
        sections = re.split(r"^Request (?:concurrency|Rate): ([0-9.]+).*$", text, flags=re.M)
        counts = None
        for level, body in zip(sections[1::2], sections[2::2]):
            m = re.search(r"Inference count: (\d+)\s+Execution count: (\d+)", body)
            if float(level) == float(load) and m:
                counts = int(m[1]), int(m[2])
        if counts is None:
            return "-"
        inferences, executions = inferences + counts[0], executions + counts[1]
    return f"{inferences / executions:.2f}" if executions else "-"


def ms(row, *columns):
    """Sum of perf_analyzer CSV columns (us), in ms, formatted."""
    return f"{sum(float(row[c]) for c in columns) / 1000:.1f}"


def parse_spec(spec):
    """MODEL:INPUT=CSV[,CSV...]:BENCH -> (model, input, [csv, ...], bench)."""
    try:
        left, right = spec.split("=", 1)
        model, label = left.split(":", 1)
        path, bench = right.rsplit(":", 1)
    except ValueError:
        raise SystemExit(f"--server {spec!r}: expected MODEL:INPUT=CSV[,CSV...]:BENCH") from None
    if bench != "-" and bench not in BENCHES:
        raise SystemExit(f"--server {spec!r}: unknown benchmark {bench!r}; "
                         f"known: {', '.join(BENCHES)}")
    return model, label, path.split(","), bench


def server_rows(spec, local_ms):
    """Table rows for one --server spec."""
    model, label, paths, bench = parse_spec(spec)
    rows, column = perf_rows(paths)
    for row in rows:
        ips = float(row["Inferences/Second"])
        level = row[column]
        p50 = float(row["p50 latency"]) / 1000
        local = local_ms.get(bench)
        # Open loop: throughput is the offered rate, not what the server can do.
        ratio = f"{ips * local / 1000:.2f}x" if local and column == "Concurrency" else "-"
        yield [model, label, LOAD_COLUMNS[column].format(level), f"{ips:.2f}", f"{p50:.1f}",
               ms(row, "p99 latency"), ms(row, "Server Queue"), ms(row, *COMPUTE),
               avg_batch(paths, level), ratio, f"{p50 / local:.2f}x" if local else "-", bench]


def ratio_rows(spec, csvs):
    """Comparison rows for one --ratio A/B: per concurrency level both ran."""
    try:
        a, b = spec.split("/")
        runs = [perf_rows(csvs[a]), perf_rows(csvs[b])]
    except ValueError:
        raise SystemExit(f"--ratio {spec!r}: expected MODEL:INPUT/MODEL:INPUT") from None
    except KeyError as e:
        raise SystemExit(f"--ratio {spec!r}: no --server for {e.args[0]}") from None
    (rows_a, col_a), (rows_b, col_b) = runs
    if col_a != "Concurrency" or col_b != "Concurrency":
        raise SystemExit(f"--ratio {spec!r}: both runs must be closed loop (concurrency)")
    by_level = {float(r[col_b]): r for r in rows_b}
    for ra in rows_a:
        rb = by_level.get(float(ra[col_a]))
        if rb is None:
            continue
        ips_a, ips_b = float(ra["Inferences/Second"]), float(rb["Inferences/Second"])
        slower = lambda c: f"{float(rb[c]) / float(ra[c]):.2f}x"  # noqa: E731
        yield [f"{a.split(':')[0]} / {b.split(':')[0]}", f"conc {ra[col_a]}", f"{ips_a:.2f}",
               f"{ips_b:.2f}", f"{ips_a / ips_b:.2f}x", slower("p50 latency"),
               slower("p99 latency")]


def table(header, rows, left=1):
    """Aligned text lines: the first `left` columns (text) left, the others right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) if i < left else c.rjust(w)
                      for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in [header, *rows]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", action="append", default=[],
                    metavar="MODEL:INPUT=CSV[,CSV...]:BENCH")
    ap.add_argument("--ratio", action="append", default=[], metavar="MODEL:INPUT/MODEL:INPUT",
                    help="compare two --server runs (A/B)")
    ap.add_argument("--criterion",
                    help="criterion output dir (target/criterion); none: no in-process columns")
    ap.add_argument("--fresh-after", type=float, metavar="EPOCH",
                    help="fail if a criterion estimate is older (a benchmark that did not run)")
    ap.add_argument("--title", default="")
    ap.add_argument("--note", action="append", default=[], help="a line under the table")
    ap.add_argument("--out")
    args = ap.parse_args()

    local_ms = {}
    if args.criterion:
        local_ms = {b: criterion_ms(args.criterion, b, args.fresh_after) for b in BENCHES}
    server = [row for spec in args.server for row in server_rows(spec, local_ms)]
    # Which rows each in-process benchmark is the reference for.
    compared = {}
    csvs = {}
    for spec in args.server:
        model, label, paths, bench = parse_spec(spec)
        compared.setdefault(bench, []).append(f"{model} {label}")
        csvs[f"{model}:{label}"] = paths
    ratios = [row for spec in args.ratio for row in ratio_rows(spec, csvs)]
    header = SERVER_HEADER if local_ms else SERVER_HEADER[:-2]
    server = [row[:len(header)] for row in server]

    lines = [args.title] if args.title else []
    lines += ["", "Server: perf_analyzer -> tritonserver, same machine"]
    lines += table(header, server, left=2)
    if ratios:
        lines += ["", "A / B: the same requests to two models of that server, same run "
                  "(above 1: A is faster)"]
        lines += table(RATIO_HEADER, ratios, left=1)
    if local_ms:
        local = [[b, what, f"{local_ms[b]:.1f}", f"{1000 / local_ms[b]:.2f}"]
                 for b, what in BENCHES.items()]
        lines += ["", "In-process: cargo bench --bench engine "
                  "(one engine, one caller thread; criterion mean)"]
        lines += table(["benchmark", "work", "ms/image", "images/s"], local, left=2)
        lines += [
            "",
            "Each server row is compared with the in-process benchmark doing the same work:",
            *(f"  {bench}: {', '.join(dict.fromkeys(compared[bench]))}"
              for bench in BENCHES if bench in compared),
            "server/in-process = server infer/s / in-process images/s (closed loop only: at a",
            "  fixed request rate infer/s is the offered rate). p50/in-process = p50 latency /",
            "  in-process ms.",
            "Every model runs 2 CPU instances: at concurrency 2 the throughput ratio can exceed 1.",
        ]
    else:
        lines += ["", "No in-process run (no --criterion): no server/in-process columns."]
    lines += [
        "queue/compute: server-side means per request; batch: requests per model execution.",
        *args.note,
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
