#!/usr/bin/env python3
"""The faiss side of the vector-matching benchmark (issue 22).

Gallery matching may move behind an approximate index (usearch HNSW, in Rust); this gives
the reference numbers of faiss-cpu on the same vectors (a folder written by data.py):
the exact scan (IndexFlatIP for cosine on normalised vectors, IndexFlatL2 for euclidean)
and IndexHNSWFlat (M=32) with efSearch swept. Per index and setting: build, save and load
time, resident memory the loaded index adds, p50/p99 latency of one query at a time on
one thread (what one request of the backend does), recall@1 against exact.i64 and the
share of queries whose planted row comes first (planted.i64).

  assets/matching-venv/bin/python benches/matching/faiss_bench.py DATA_DIR \
      [--json OUT] [--indexes flat,hnsw] [--m 32] [--ef-construction 40] \
      [--ef-search 16,32,64,128,256] [--build-threads 2] [--warmup 100] [--max-queries N]

Each search setting first runs the first --warmup queries untimed (caches, page faults),
then times every query alone with perf_counter_ns around index.search (preallocated
outputs); search runs on one OpenMP thread, builds on --build-threads.

HNSW indexes are cached in DATA_DIR (faiss-hnsw<M>-efc<E>.index, with a .json of their
build numbers): at 1,000,000 x 512 the build takes ~17 min on 2 threads, so it happens
once per dataset; later runs load it and report the first build's time (cached: true).
The flat index is built each run (a copy) and its file removed after the load test.
Venv: benches/matching/setup.sh.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

ENGINE = "faiss"


@dataclass(frozen=True)
class Spec:
    """One index to measure; `sweep` lists (label, efSearch or None) search settings."""

    name: str  # "flat" or "hnsw<M>"
    m: int
    ef_construction: int
    sweep: tuple[tuple[str, int | None], ...]

    @property
    def cached(self) -> bool:
        return self.name != "flat"

    def file(self, folder: Path) -> Path:
        if not self.cached:
            return folder / f"faiss-{self.name}.tmp.index"
        return folder / f"faiss-{self.name}-efc{self.ef_construction}.index"


@dataclass
class Data:
    folder: Path
    meta: dict
    queries: np.ndarray
    exact: np.ndarray
    planted: np.ndarray
    labels: np.ndarray  # the person of each stored row

    @property
    def metric(self) -> int:
        return faiss.METRIC_INNER_PRODUCT if self.meta["metric"] == "cosine" else faiss.METRIC_L2


def rss_mib() -> float:
    """Resident set size of this process (VmRSS), MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS in /proc/self/status")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def read_rows(folder: Path, name: str, dtype: str, dim: int | None = None) -> np.ndarray:
    a = np.fromfile(folder / name, dtype=dtype)
    return a.reshape(-1, dim) if dim else a


def prepared(x: np.ndarray, cosine: bool) -> np.ndarray:
    """x as faiss takes it (C-contiguous float32), rows normalised in place for cosine (the
    inner product of unit rows). No copy: at 1M x 512 the base alone is 2 GiB."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if cosine:
        faiss.normalize_L2(x)
    return x


def load_data(folder: Path) -> Data:
    meta = json.loads((folder / "meta.json").read_text())
    q = read_rows(folder, "queries.f32", "<f4", meta["dim"])
    return Data(
        folder,
        meta,
        prepared(q, meta["metric"] == "cosine"),
        read_rows(folder, "exact.i64", "<i8"),
        read_rows(folder, "planted.i64", "<i8"),
        read_rows(folder, "labels.i64", "<i8"),
    )


def load_base(data: Data) -> np.ndarray:
    base = read_rows(data.folder, "base.f32", "<f4", data.meta["dim"])
    return prepared(base, data.meta["metric"] == "cosine")


def new_index(spec: Spec, dim: int, metric: int) -> faiss.Index:
    if spec.name == "flat":
        return (
            faiss.IndexFlatIP(dim)
            if metric == faiss.METRIC_INNER_PRODUCT
            else faiss.IndexFlatL2(dim)
        )
    index = faiss.IndexHNSWFlat(dim, spec.m, metric)
    index.hnsw.efConstruction = spec.ef_construction
    return index


def cache_key(spec: Spec, data: Data) -> dict:
    return {
        "data": data.meta["params"],
        "index": spec.name,
        "ef_construction": spec.ef_construction,
    }


def read_sidecar(spec: Spec, data: Data) -> dict | None:
    """Build numbers of a cached index, if it belongs to these vectors and settings."""
    path = spec.file(data.folder)
    side = path.with_suffix(".index.json")
    if not (spec.cached and path.is_file() and side.is_file()):
        return None
    info = json.loads(side.read_text())
    return info if info.get("key") == cache_key(spec, data) else None


def build_and_save(spec: Spec, data: Data, base: np.ndarray, threads: int) -> dict:
    """Build with `threads` OpenMP threads, write the index file; return the timings."""
    faiss.omp_set_num_threads(threads)
    index = new_index(spec, base.shape[1], data.metric)
    what = f" (efConstruction {spec.ef_construction})" if spec.cached else ""
    print(f"  building {spec.name}{what} on {threads} threads ...", flush=True)
    t0 = time.perf_counter()
    index.add(base)
    build_s = time.perf_counter() - t0
    path = spec.file(data.folder)
    tmp = path.with_suffix(".partial")
    t0 = time.perf_counter()
    faiss.write_index(index, str(tmp))
    save_s = time.perf_counter() - t0
    tmp.replace(path)  # a killed build leaves no file that looks complete
    info = {
        "key": cache_key(spec, data),
        "build_s": round(build_s, 3),
        "save_s": round(save_s, 3),
        "build_threads": threads,
        "faiss": faiss.__version__,
        "built": time.strftime("%FT%T%z"),
    }
    if spec.cached:
        path.with_suffix(".index.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"  built in {build_s:.1f} s, saved in {save_s:.2f} s", flush=True)
    return info


def load(path: Path) -> tuple[faiss.Index, float, float]:
    """read_index: the index, seconds, and the resident memory it added (MiB)."""
    gc.collect()
    before = rss_mib()
    t0 = time.perf_counter()
    index = faiss.read_index(str(path))
    load_s = time.perf_counter() - t0
    return index, load_s, rss_mib() - before


def latencies(
    index: faiss.Index, queries: np.ndarray, warmup: int
) -> tuple[np.ndarray, np.ndarray]:
    """One query per search call on one thread: per-query nanoseconds and the rows found."""
    faiss.omp_set_num_threads(1)
    rows = [queries[i : i + 1] for i in range(len(queries))]
    # Preallocated outputs: the timer sees faiss's search, not numpy allocations.
    dist = np.empty((1, 1), dtype=np.float32)
    found = np.empty((1, 1), dtype=np.int64)
    for q in rows[:warmup]:  # caches, page faults, lazy initialisation
        index.search(q, 1, D=dist, I=found)
    ns = np.empty(len(rows), dtype=np.int64)
    ids = np.empty(len(rows), dtype=np.int64)
    clock = time.perf_counter_ns
    for i, q in enumerate(rows):
        t0 = clock()
        index.search(q, 1, D=dist, I=found)
        ns[i] = clock() - t0
        ids[i] = found[0, 0]
    return ns, ids


def index_fields(built: dict, cached: bool, load_s: float, mem: float) -> dict:
    """The numbers of one index, shared by the rows of its search settings."""
    return {
        "build_s": built["build_s"],
        "save_s": built["save_s"],
        "load_s": round(load_s, 3),
        "mem_mib": round(mem, 1),
        "build_threads": built["build_threads"],
        "cached": cached,  # build_s and save_s are from the run that built the cached file
    }


def row(spec: Spec, label: str, data: Data, ns: np.ndarray, ids: np.ndarray, fields: dict) -> dict:
    m = data.meta
    n_q = len(ids)
    return {
        "engine": ENGINE,
        "index": spec.name,
        "param": label,
        "n": m["n"],
        "dim": m["dim"],
        "kind": m["kind"],
        "metric": m["metric"],
        "queries": n_q,
        "p50_ms": round(float(np.percentile(ns, 50)) / 1e6, 4),
        "p99_ms": round(float(np.percentile(ns, 99)) / 1e6, 4),
        "mean_ms": round(float(ns.mean()) / 1e6, 4),
        "recall_at_1": round(float(np.mean(ids == data.exact[:n_q])), 4),
        "planted_found": round(float(np.mean(ids == data.planted[:n_q])), 4),
        # The first hit is of the planted row's person: what a name needs.
        "person_found": round(float(np.mean(
            (ids >= 0) & (data.labels[np.maximum(ids, 0)] == data.labels[data.planted[:n_q]]))), 4),
        **fields,
        "search_threads": 1,
        "faiss": faiss.__version__,
        "cpu": cpu_model(),
        # Latency is only as good as the machine was idle: the 1-minute load when measured.
        "load_avg": round(os.getloadavg()[0], 2),
    }


def measure(spec: Spec, data: Data, built: dict, cached: bool, warmup: int) -> list[dict]:
    path = spec.file(data.folder)
    index, load_s, mem = load(path)
    if not spec.cached:
        path.unlink()
    fields = index_fields(built, cached, load_s, mem)
    out = []
    for label, ef in spec.sweep:
        if ef is not None:
            index.hnsw.efSearch = ef
        ns, ids = latencies(index, data.queries, warmup)
        out.append(row(spec, label, data, ns, ids, fields))
        print_row(out[-1])
    del index
    gc.collect()
    return out


def specs(args: argparse.Namespace) -> list[Spec]:
    out = []
    for name in args.indexes.split(","):
        if name == "flat":
            out.append(Spec("flat", 0, 0, (("exact", None),)))
        elif name == "hnsw":
            sweep = tuple((f"efSearch={ef}", ef) for ef in args.ef_search)
            out.append(Spec(f"hnsw{args.m}", args.m, args.ef_construction, sweep))
        else:
            raise SystemExit(f"unknown index {name!r} (flat, hnsw)")
    return out


def ensure_built(todo: list[Spec], data: Data, threads: int) -> dict[str, tuple[dict, bool]]:
    """Build (and save) every index without a valid cache; the base is held only meanwhile."""
    built: dict[str, tuple[dict, bool]] = {}
    base = None
    for spec in todo:
        info = read_sidecar(spec, data)
        if info is not None:
            name = spec.file(data.folder).name
            print(f"  {spec.name}: cached {name} (built in {info['build_s']} s)")
            built[spec.name] = (info, True)
            continue
        if base is None:
            base = load_base(data)
        built[spec.name] = (build_and_save(spec, data, base, threads), False)
    del base  # the memory measurement of the loads must not include it
    gc.collect()
    return built


HEADER = (
    f"{'index':8s} {'param':13s} {'p50 ms':>8s} {'p99 ms':>8s} {'recall@1':>8s} {'planted':>8s} "
    f"{'build s':>8s} {'load s':>7s} {'MiB':>7s}"
)


def print_row(r: dict) -> None:
    print(
        f"{r['index']:8s} {r['param']:13s} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} "
        f"{r['recall_at_1']:8.3f} {r['planted_found']:8.3f} "
        f"{r['build_s']:8.1f} {r['load_s']:7.2f} {r['mem_mib']:7.1f}",
        flush=True,
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", type=Path, help="a folder written by data.py")
    ap.add_argument(
        "--json", type=Path, help="results (default: faiss-<DATA name>.json next to DATA)"
    )
    ap.add_argument(
        "--indexes", default="flat,hnsw", help="comma list of flat, hnsw (default both)"
    )
    ap.add_argument("--m", type=int, default=32, help="HNSW M (default 32)")
    ap.add_argument(
        "--ef-construction", type=int, default=40, help="HNSW efConstruction (default 40, faiss's)"
    )
    ap.add_argument(
        "--ef-search", default="16,32,64,128,256", help="efSearch sweep (default 16,32,64,128,256)"
    )
    ap.add_argument(
        "--build-threads", type=int, default=2, help="OpenMP threads for building (default 2)"
    )
    ap.add_argument(
        "--warmup", type=int, default=100, help="run the first N queries untimed (default 100)"
    )
    ap.add_argument(
        "--max-queries",
        type=int,
        help="time only the first N queries (the 1M flat scan: ~0.1 s each)",
    )
    args = ap.parse_args(argv)
    args.ef_search = [int(x) for x in args.ef_search.split(",") if x]
    if args.json is None:
        args.json = args.data.resolve().parent / f"faiss-{args.data.resolve().name}.json"
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not (args.data / "meta.json").is_file():
        raise SystemExit(f"{args.data}: no meta.json (write it with benches/matching/data.py)")
    data = load_data(args.data)
    if args.max_queries:
        data.queries = data.queries[: args.max_queries]
    m = data.meta
    print(
        f"{args.data}: {m['kind']} {m['metric']} n={m['n']} dim={m['dim']} "
        f"queries={len(data.queries)}; faiss {faiss.__version__} on {cpu_model()}",
        flush=True,
    )
    todo = specs(args)
    built = ensure_built(todo, data, args.build_threads)
    print(HEADER)
    rows: list[dict] = []
    for spec in todo:
        info, cached = built[spec.name]
        rows += measure(spec, data, info, cached, args.warmup)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
