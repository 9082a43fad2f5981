#!/usr/bin/env python3
"""Deterministic gallery datasets for the vector-matching benchmark (issue 22).

faiss (faiss_bench.py) and usearch (the Rust side) must be measured on identical vectors,
with an exact answer to score them against: this writes one folder per dataset, raw
little-endian arrays without headers, which any language reads in one call:

  base.f32     n x dim float32   the stored embeddings (unit norm)
  labels.i64   n int64           the person of each stored embedding
  queries.f32  q x dim float32   the probes (unit norm)
  planted.i64  q int64           the row of base each query was planted near
  exact.i64    q int64           the row a full scan finds nearest (the ground truth)
  meta.json    the parameters (kind, n, dim, metric, queries, seed, persons, ...) and
               the measured similarity distributions; written last: a folder without it
               is incomplete

  late.i64     rows inserted one at a time after the others (kind real only; the gallery
               adds its folder photos so)

  python benches/matching/data.py --kind clustered|uniform|shifted|real --n 100000 \
      --dim 512 --metric cosine|euclidean --queries 1000 [--seed 22] [--out DIR] \
      [--real DIR]

The default folder is out/matching/<kind>-<metric>-<dim>d-<n>/. A folder whose meta.json
records the same parameters is left alone (run again at no cost). Needs numpy only.

Data models (all vectors unit norm, as the gallery stores them):
  uniform    random unit vectors, each its own person: no structure, the worst case for
             graph indexes. Queries are planted near one random stored vector.
  shifted    (d) clustered, but the queries turn from their planted row towards directions
             of another population (the model drawn with another seed): a gallery of one
             set of people searched with photos from elsewhere.
  real       (c) clustered, with real faces placed among the synthetic people: the ONNX
             engine's embeddings of the sample photos and of those photos flipped,
             cropped, blurred and scaled (examples/real_faces.rs writes them to --real DIR,
             default out/matching/real-faces). Each real person's first photo as taken is
             stored (every other one of them inserted last, as the gallery adds its folder
             photos); the queries are all their other rows, so --queries is what there is.
             Real faces lie outside the synthetic people's subspace: far from every stored
             row but their own, the case where a graph walk strays. Cosine only.
  clustered  "people as clusters": persons with 1-5 stored embeddings each (mean ~2),
             scattered around a person centre. Centres, within-person scatter and query
             noise are directions drawn from a low-rank model (Gaussian mixing of a
             rank dim/4, at most 64, latent plus a smaller isotropic share, normalised),
             as real embedders produce. For euclidean (dlib-like: 128-d, norm ~1,
             different people farther than 0.6) every centre also shares a common mean
             direction, which puts random people at distance ~0.9 instead of sqrt(2).
  Query similarity to its planted row (uniformly drawn):
    cosine     cosine 0.75-0.85 (two photos of one person through the ONNX embedder)
    euclidean  distance 0.3-0.5 (the same for dlib's 128-d vectors)
  Exact distance: 1 - cosine for cosine, Euclidean (L2) for euclidean.
Every random draw comes from its own seeded stream (seed, purpose, block), so the output
depends on the parameters only; the float32 matrix products may round differently on
another CPU or BLAS, and exact.i64 is always computed from the files as written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

# Bump when the data model changes: folders of an older version are regenerated.
GENERATOR_VERSION = 2
DEFAULT_SEED = 22
# Rows per block: ~130 MiB of float32 at 512-d, a few such arrays live at once.
BLOCK_ROWS = 1 << 16
# Persons per generation block (~2 rows each).
PERSON_BLOCK = 1 << 15
# Embeddings per person: 1..5, mean 1.97; many galleries hold one photo per person.
COUNT_PROBS = (0.45, 0.30, 0.13, 0.07, 0.05)
# Candidates per block kept from the float32 scan, then rescored in float64: the exact
# winner is among them unless 4 rows tie with it to float32 rounding.
EXACT_CANDIDATES = 4
# Random-stream ids (SeedSequence entropy [seed, stream, block]).
S_MODEL, S_COUNTS, S_PERSONS, S_UNIFORM, S_QUERIES, S_STATS = range(6)
# The other population of kind "shifted": the model drawn with seed + SHIFTED_SEED.
SHIFTED_SEED = 1000


FILES = {  # name -> (dtype, columns: "dim" or 1, rows: "n" or "q")
    "base.f32": ("<f4", "dim", "n"),
    "labels.i64": ("<i8", 1, "n"),
    "queries.f32": ("<f4", "dim", "q"),
    "planted.i64": ("<i8", 1, "q"),
    "exact.i64": ("<i8", 1, "q"),
}


@dataclass(frozen=True)
class Profile:
    """How the vectors of one metric are spread (see the module docstring)."""

    rank: int  # latent dimensions of the "face" subspace
    iso_share: float  # energy share of isotropic noise in a direction (the rest: low rank)
    offset: float  # energy share of the common mean direction in each person centre
    own: tuple[float, float]  # cosine of a stored embedding to its person centre
    query: tuple[float, float]  # cosine (cosine) or distance (euclidean) query-to-planted


def profile_for(metric: str, dim: int) -> Profile:
    rank = max(8, min(64, dim // 4))
    if metric == "cosine":
        # Two stored photos of one person at cosine ~own^2: 0.72-0.90. Random people at
        # cosine std ~0.08 (p99 ~0.2) with rank 64 and 35 % isotropic energy at 512-d.
        return Profile(rank, 0.35, 0.0, (0.85, 0.95), (0.75, 0.85))
    # Two stored photos of one person at distance sqrt(2 (1 - own^2)): 0.30-0.50.
    # The 0.6 common direction sets random people at distance ~sqrt(0.8) = 0.9.
    return Profile(rank, 0.35, 0.6, (0.935, 0.977), (0.3, 0.5))


@dataclass(frozen=True)
class Params:
    kind: str
    n: int
    dim: int
    metric: str
    queries: int
    seed: int
    generator: int = GENERATOR_VERSION
    real: str = ""  # kind real: the BLAKE2 hash of the real faces' files


def rng_for(seed: int, stream: int, block: int = 0) -> np.random.Generator:
    return np.random.default_rng([seed, stream, block])


def unit_rows(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


class Model:
    """The low-rank direction model shared by centres, within-person scatter and queries."""

    def __init__(self, dim: int, profile: Profile, seed: int) -> None:
        rng = rng_for(seed, S_MODEL)
        self.dim = dim
        self.profile = profile
        self.mix = rng.standard_normal((profile.rank, dim), dtype=np.float32)
        self.mean = unit_rows(rng.standard_normal((1, dim), dtype=np.float32))[0]

    def directions(self, rng: np.random.Generator, k: int) -> np.ndarray:
        """k unit directions: mostly in the low-rank subspace, partly isotropic."""
        p = self.profile
        low = unit_rows(rng.standard_normal((k, p.rank), dtype=np.float32) @ self.mix)
        iso = unit_rows(rng.standard_normal((k, self.dim), dtype=np.float32))
        low *= math.sqrt(1.0 - p.iso_share)
        low += math.sqrt(p.iso_share) * iso
        return unit_rows(low)

    def centres(self, rng: np.random.Generator, k: int) -> np.ndarray:
        off = self.profile.offset
        c = self.directions(rng, k) * math.sqrt(1.0 - off)
        c += math.sqrt(off) * self.mean
        return unit_rows(c)


def tilt(x: np.ndarray, u: np.ndarray, cos: np.ndarray) -> np.ndarray:
    """Unit rows at exactly cosine `cos` to the unit rows x, turned towards u."""
    u -= np.sum(u * x, axis=1, keepdims=True) * x
    unit_rows(u)
    sin = np.sqrt(1.0 - cos * cos)
    return (cos[:, None] * x + sin[:, None] * u).astype(np.float32)


def query_cosines(metric: str, profile: Profile, rng: np.random.Generator, k: int) -> np.ndarray:
    lo, hi = profile.query
    drawn = rng.uniform(lo, hi, k)
    # Unit vectors at distance d have cosine 1 - d^2/2: drawn uniform in distance.
    return drawn if metric == "cosine" else 1.0 - drawn * drawn / 2.0


def person_counts(n: int, seed: int) -> np.ndarray:
    """Embeddings per person, summing to n (the last person truncated)."""
    rng = rng_for(seed, S_COUNTS)
    draws = rng.choice(np.arange(1, 6), size=n // 2 + 64, p=COUNT_PROBS)
    while draws.sum() < n:  # never for the chosen mean, kept for safety
        draws = np.concatenate(
            [draws, rng.choice(np.arange(1, 6), size=n // 4 + 64, p=COUNT_PROBS)]
        )
    ends = np.cumsum(draws)
    persons = int(np.searchsorted(ends, n)) + 1
    counts = draws[:persons].copy()
    counts[-1] -= int(ends[persons - 1]) - n
    return counts


def write_clustered(p: Params, model: Model, base: BinaryIO, labels: BinaryIO) -> int:
    counts = person_counts(p.n, p.seed)
    lo, hi = model.profile.own
    for block, start in enumerate(range(0, len(counts), PERSON_BLOCK)):
        rng = rng_for(p.seed, S_PERSONS, block)
        c = counts[start : start + PERSON_BLOCK]
        centres = np.repeat(model.centres(rng, len(c)), c, axis=0)
        rows = len(centres)
        emb = tilt(centres, model.directions(rng, rows), rng.uniform(lo, hi, rows))
        emb.astype("<f4", copy=False).tofile(base)
        np.repeat(np.arange(start, start + len(c), dtype="<i8"), c).tofile(labels)
    return len(counts)


def write_uniform(p: Params, base: BinaryIO, labels: BinaryIO) -> int:
    for block, start in enumerate(range(0, p.n, BLOCK_ROWS)):
        rows = min(BLOCK_ROWS, p.n - start)
        x = rng_for(p.seed, S_UNIFORM, block).standard_normal((rows, p.dim), dtype=np.float32)
        unit_rows(x).astype("<f4", copy=False).tofile(base)
        np.arange(start, start + rows, dtype="<i8").tofile(labels)
    return p.n


def make_queries(
    p: Params, model: Model | None, base: np.ndarray, towards: Model | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Queries planted near random rows, turned towards `towards`' directions if given."""
    rng = rng_for(p.seed, S_QUERIES)
    planted = rng.choice(p.n, size=p.queries, replace=p.queries > p.n).astype("<i8")
    near = np.asarray(base[planted], dtype=np.float32)
    profile = model.profile if model else profile_for(p.metric, p.dim)
    cos = query_cosines(p.metric, profile, rng, p.queries)
    if model is None:  # uniform: isotropic noise, like the data
        u = unit_rows(rng.standard_normal((p.queries, p.dim), dtype=np.float32))
    else:
        u = (towards or model).directions(rng, p.queries)
    return tilt(near, u, cos), planted


def read_real(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """The real faces (rows) and the person of each: examples/real_faces.rs's output."""
    emb, person = folder / "real.f32", folder / "person.i64"
    if not emb.is_file() or not person.is_file():
        sys.exit(
            f"{folder}: no real faces; make them with "
            f"cargo run --release --example real_faces -- {folder}"
        )
    persons = np.fromfile(person, dtype="<i8")
    return unit_rows(np.fromfile(emb, dtype="<f4").reshape(len(persons), -1)), persons


def real_hash(folder: Path) -> str:
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for name in ("real.f32", "person.i64"):
        h.update((folder / name).read_bytes())
    return h.hexdigest()


def place_real(
    p: Params, real: np.ndarray, persons: np.ndarray, base: np.ndarray, labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Store each real person's first row over a synthetic row, spread through the base
    (new person labels after the synthetic ones); the queries are their other rows.
    Returns queries, planted rows, late rows (every other real person's)."""
    people = np.unique(persons)
    first = np.array([np.flatnonzero(persons == q)[0] for q in people])
    rows = (np.arange(len(people)) * p.n) // len(people) + p.n // (2 * len(people))
    base[rows] = real[first]
    labels[rows] = labels.max() + 1 + np.arange(len(people))
    query = np.setdiff1d(np.arange(len(persons)), first)
    slot = {int(q): int(r) for q, r in zip(people, rows, strict=True)}
    planted = np.array([slot[int(persons[i])] for i in query], dtype="<i8")
    return real[query], planted, rows[1::2].astype("<i8")


def scores(q: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """Higher is nearer. cosine: the cosine; euclidean: |q|^2 - |q - b|^2 = 2 q.b - |b|^2."""
    dot = q @ b.T
    if metric == "cosine":
        qn = np.linalg.norm(q, axis=1, keepdims=True)
        return dot / (qn * np.linalg.norm(b, axis=1)[None, :])
    return 2.0 * dot - np.einsum("ij,ij->i", b, b)[None, :]


def exact_search(
    base: np.ndarray, labels: np.ndarray, queries: np.ndarray, qlabels: np.ndarray, metric: str
) -> tuple[np.ndarray, np.ndarray]:
    """Full scan: the exact nearest row of each query, and the best score of another person.

    A float32 scan keeps a few candidates per block; those are rescored in float64, so the
    answer does not depend on BLAS summation order (faiss and numpy agree on it).
    """
    q = queries.shape[0]
    cands = []
    other = np.full(q, -np.inf, dtype=np.float32)
    k = EXACT_CANDIDATES
    for start in range(0, base.shape[0], BLOCK_ROWS):
        b = np.asarray(base[start : start + BLOCK_ROWS])
        s = scores(queries, b, metric).astype(np.float32, copy=False)
        kth = min(k, s.shape[1]) - 1
        top = np.argpartition(-s, kth, axis=1)[:, : kth + 1]
        cands.append(top + start)
        s[labels[start : start + len(b)][None, :] == qlabels[:, None]] = -np.inf
        np.maximum(other, s.max(axis=1), out=other)
    return rescore(base, queries, np.concatenate(cands, axis=1), metric), other


def rescore(base: np.ndarray, queries: np.ndarray, cands: np.ndarray, metric: str) -> np.ndarray:
    cands = np.sort(cands, axis=1)  # an exact tie (not seen on random data): the lowest row
    best = np.empty(len(queries), dtype="<i8")
    for i, row in enumerate(cands):
        b = np.asarray(base[row], dtype=np.float64)
        s = scores(queries[i : i + 1].astype(np.float64), b, metric)[0]
        best[i] = row[int(np.argmax(s))]
    return best


def to_measure(score: np.ndarray, queries: np.ndarray, metric: str) -> np.ndarray:
    """Best scores to the metric's own measure: cosine, or Euclidean distance."""
    if metric == "cosine":
        return score
    qq = np.einsum("ij,ij->i", queries, queries)
    return np.sqrt(np.maximum(qq - score, 0.0))


def pair_measure(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    if metric == "cosine":
        return np.einsum("ij,ij->i", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return np.linalg.norm(a - b, axis=1)


def percentiles(x: np.ndarray) -> dict[str, float]:
    if len(x) == 0:
        return {}
    pct = (0, 1, 5, 50, 95, 99, 100)
    return {f"p{p}": round(float(v), 4) for p, v in zip(pct, np.percentile(x, pct), strict=True)}


def pair_stats(base: np.ndarray, labels: np.ndarray, p: Params) -> dict[str, dict[str, float]]:
    """Same-person pairs (neighbouring rows of one person) and random different-person pairs."""
    head = np.asarray(base[: 4 * BLOCK_ROWS])
    hl = labels[: len(head)]
    same = np.flatnonzero(hl[1:] == hl[:-1])
    rng = rng_for(p.seed, S_STATS)
    i, j = rng.integers(0, p.n, (2, 20000))
    diff = labels[i] != labels[j]
    i, j = i[diff], j[diff]
    return {
        "same_person_pair": percentiles(pair_measure(head[same], head[same + 1], p.metric)),
        "random_other_person_pair": percentiles(
            pair_measure(np.asarray(base[i]), np.asarray(base[j]), p.metric)
        ),
    }


def out_dir(p: Params, out: str | None) -> Path:
    if out:
        return Path(out)
    root = Path(__file__).resolve().parents[2]
    return root / "out" / "matching" / f"{p.kind}-{p.metric}-{p.dim}d-{short_count(p.n)}"


def short_count(n: int) -> str:
    """100000 -> 100k, 1000000 -> 1m: folder names people can read."""
    for div, suffix in ((1_000_000, "m"), (1000, "k")):
        if n % div == 0:
            return f"{n // div}{suffix}"
    return str(n)


def file_shapes(p: Params) -> dict[str, dict]:
    rows = {"n": p.n, "q": p.queries}
    return {
        name: {"dtype": dtype, "shape": [rows[r], p.dim] if cols == "dim" else [rows[r]]}
        for name, (dtype, cols, r) in FILES.items()
    }


def up_to_date(folder: Path, p: Params) -> bool:
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    if meta.get("params") != asdict(p):
        return False
    for name, spec in file_shapes(p).items():
        size = int(np.prod(spec["shape"])) * np.dtype(spec["dtype"]).itemsize
        f = folder / name
        if not f.is_file() or f.stat().st_size != size:
            return False
    return True


def clear(folder: Path) -> None:
    """Drop meta.json first (an interrupted run must not look complete) and stale caches."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meta.json").unlink(missing_ok=True)
    (folder / "late.i64").unlink(missing_ok=True)
    # Index caches of the benches (faiss_bench.py) belong to the old vectors.
    for old in [*folder.glob("*.index"), *folder.glob("*.index.json"), *folder.glob("*.partial")]:
        old.unlink()


def generate(p: Params, folder: Path, real_dir: str = "") -> dict:
    t0 = time.monotonic()
    clear(folder)
    profile = profile_for(p.metric, p.dim)
    model = Model(p.dim, profile, p.seed) if p.kind != "uniform" else None
    with open(folder / "base.f32", "wb") as base, open(folder / "labels.i64", "wb") as labels:
        persons = (
            write_clustered(p, model, base, labels) if model else write_uniform(p, base, labels)
        )
    t_base = time.monotonic() - t0
    base_mm = np.memmap(folder / "base.f32", dtype="<f4", mode="r+", shape=(p.n, p.dim))
    labels_a = np.fromfile(folder / "labels.i64", dtype="<i8")
    if p.kind == "real":
        queries, planted, late = place_real(p, *read_real(Path(real_dir)), base_mm, labels_a)
        base_mm.flush()
        labels_a.tofile(folder / "labels.i64")
        late.tofile(folder / "late.i64")
    else:
        other = Model(p.dim, profile, p.seed + SHIFTED_SEED) if p.kind == "shifted" else None
        queries, planted = make_queries(p, model, base_mm, other)
    t1 = time.monotonic()
    exact, other = exact_search(base_mm, labels_a, queries, labels_a[planted], p.metric)
    t_exact = time.monotonic() - t1
    queries.astype("<f4", copy=False).tofile(folder / "queries.f32")
    planted.tofile(folder / "planted.i64")
    exact.tofile(folder / "exact.i64")
    stats = pair_stats(base_mm, labels_a, p)
    stats["query_to_planted"] = percentiles(
        pair_measure(queries, np.asarray(base_mm[planted]), p.metric)
    )
    stats["query_to_nearest_other_person"] = percentiles(to_measure(other, queries, p.metric))
    stats["exact_is_planted"] = round(float(np.mean(exact == planted)), 4)
    return {
        **asdict(p),
        "persons": persons,
        "params": asdict(p),
        "profile": asdict(profile) if model else {"query": list(profile.query)},
        "measure": "cosine similarity" if p.metric == "cosine" else "euclidean distance",
        "files": file_shapes(p),
        "stats": stats,
        "seconds": {
            "base": round(t_base, 1),
            "exact": round(t_exact, 1),
            "total": round(time.monotonic() - t0, 1),
        },
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def report(meta: dict) -> None:
    print(
        f"{meta['kind']} {meta['metric']} n={meta['n']} dim={meta['dim']} "
        f"persons={meta['persons']} queries={meta['queries']}\n"
        f"  ({meta['measure']}; seconds {meta['seconds']})"
    )
    for name, v in meta["stats"].items():
        print(f"  {name:31s} {v}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--kind", choices=("clustered", "uniform", "shifted", "real"), default="clustered"
    )
    ap.add_argument("--n", type=int, default=100_000, help="stored embeddings (default 100000)")
    ap.add_argument("--dim", type=int, help="default 512 for cosine, 128 for euclidean")
    ap.add_argument("--metric", choices=("cosine", "euclidean"), default="cosine")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--out", help="folder (default out/matching/<kind>-<metric>-<dim>d-<n>/)")
    ap.add_argument("--real", help="kind real: the real faces (default out/matching/real-faces)")
    args = ap.parse_args(argv)
    if args.dim is None:
        args.dim = 512 if args.metric == "cosine" else 128
    if args.n < 2 or args.dim < 2 or args.queries < 1:
        ap.error("need --n >= 2, --dim >= 2, --queries >= 1")
    if args.kind == "real" and (args.metric, args.dim) != ("cosine", 512):
        ap.error("--kind real: the ONNX engine's faces, cosine and 512-d only")
    return args


def main(argv: list[str]) -> int:
    a = parse_args(argv)
    real_dir, real = "", ""
    if a.kind == "real":
        real_dir = a.real or str(Path(__file__).resolve().parents[2] / "out/matching/real-faces")
        _, persons = read_real(Path(real_dir))
        a.queries = len(persons) - len(np.unique(persons))
        real = real_hash(Path(real_dir))
    p = Params(a.kind, a.n, a.dim, a.metric, a.queries, a.seed, real=real)
    folder = out_dir(p, a.out)
    if up_to_date(folder, p):
        print(f"{folder}: up to date (skip)")
        report(json.loads((folder / "meta.json").read_text()))
        return 0
    print(f"{folder}: generating {p}", flush=True)
    meta = generate(p, folder, real_dir)
    (folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    report(meta)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
