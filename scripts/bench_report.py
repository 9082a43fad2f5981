#!/usr/bin/env python3
"""The `make bench` table: perf_analyzer CSVs (server) next to criterion's
in-process estimates (cargo bench --bench engine), with their ratio.

  bench_report.py --server ENCODED=enc.csv:decode+analyze \
                  --server IMAGE=img.csv:analyze \
                  --criterion target/criterion/engine --out out/bench.txt

Each --server is LABEL=CSV:BENCH: the perf_analyzer run's label, its `-f`
CSV, and the in-process benchmark doing the same work per image. If the run's
-v output is next to the CSV as .log, the batch sizes the server's dynamic
batcher formed are read from it.
"""
import argparse
import csv
import json
import os
import re


def criterion_ms(group_dir, bench):
    """Mean time per iteration in ms (criterion's estimates are in ns)."""
    path = os.path.join(group_dir, bench, "new", "estimates.json")
    with open(path) as f:
        return json.load(f)["mean"]["point_estimate"] / 1e6


def perf_rows(path):
    """perf_analyzer -f CSV rows, by increasing concurrency; latencies in us."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise SystemExit(f"{path}: no measurements")
    return sorted(rows, key=lambda r: int(r["Concurrency"]))


def avg_batch(csv_path, concurrency):
    """Inference count / execution count at one concurrency, from the run's
    -v output next to the CSV (.log), or '-'."""
    try:
        with open(os.path.splitext(csv_path)[0] + ".log") as f:
            text = f.read()
    except OSError:
        return "-"
    sections = re.split(r"^Request concurrency: (\d+)$", text, flags=re.M)
    counts = None
    for conc, body in zip(sections[1::2], sections[2::2]):
        m = re.search(r"Inference count: (\d+)\s+Execution count: (\d+)", body)
        if conc == concurrency and m:
            counts = int(m[1]), int(m[2])
    return f"{counts[0] / counts[1]:.2f}" if counts and counts[1] else "-"


COMPUTE = ("Server Compute Input", "Server Compute Infer", "Server Compute Output")
SERVER_HEADER = ["input", "conc", "infer/s", "p50 ms", "p99 ms", "queue ms", "compute ms", "batch",
                 "server/in-process"]
BENCHES = ["decode", "analyze", "decode+analyze"]


def ms(row, *columns):
    """Sum of perf_analyzer CSV columns (us), in ms, formatted."""
    return f"{sum(float(row[c]) for c in columns) / 1000:.1f}"


def server_rows(spec, local_ms):
    """Table rows for one --server LABEL=CSV:BENCH."""
    label, rest = spec.split("=", 1)
    path, bench = rest.rsplit(":", 1)
    for row in perf_rows(path):
        ips = float(row["Inferences/Second"])
        conc = row["Concurrency"]
        yield [label, conc, f"{ips:.2f}", ms(row, "p50 latency"), ms(row, "p99 latency"),
               ms(row, "Server Queue"), ms(row, *COMPUTE), avg_batch(path, conc),
               f"{ips * local_ms[bench] / 1000:.2f}x {bench}"]


def table(header, rows):
    """Aligned text lines: first column left, the others right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in [header, *rows]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", action="append", default=[], metavar="LABEL=CSV:BENCH")
    ap.add_argument("--criterion", required=True,
                    help="criterion group dir (target/criterion/engine)")
    ap.add_argument("--title", default="")
    ap.add_argument("--note", action="append", default=[], help="a line under the table")
    ap.add_argument("--out")
    args = ap.parse_args()

    local_ms = {b: criterion_ms(args.criterion, b) for b in BENCHES}
    server = [row for spec in args.server for row in server_rows(spec, local_ms)]
    local = [[b, f"{local_ms[b]:.1f}", f"{1000 / local_ms[b]:.2f}"] for b in BENCHES]

    lines = [args.title] if args.title else []
    lines += ["", "Server: perf_analyzer -> tritonserver (model face), same machine"]
    lines += table(SERVER_HEADER, server)
    lines += ["", "In-process: cargo bench --bench engine "
              "(one DlibEngine, one caller thread; criterion mean)"]
    lines += table(["benchmark", "ms/image", "images/s"], local)
    lines += [
        "",
        "server/in-process = server infer/s / in-process images/s of the same work.",
        "The model runs 2 CPU instances: at concurrency 2 the ratio can exceed 1.",
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
