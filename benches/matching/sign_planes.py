#!/usr/bin/env python3
"""Whether the second look's two-plane sign scan (src/gallery/signs/) keeps a face's match.

The scan ranks every person by the Hamming distance of the first 256 sign bits (the first
plane), keeps the FIRST_PLANE_KEEPS nearest, ranks those by all 512 bits and re-ranks the
SIGN_CANDIDATES nearest by the full distance. A face is named when its nearest person is among
those. For each dataset of benches/matching/data.py this counts, over faces within 0.8x the
threshold (0.4, cosine distance) of their nearest person:

  - the dataset's own queries (exact.i64 gives their nearest);
  - as many queries again at exactly 0.4 from a random stored person (the farthest a face the
    gallery must name lies from its match; the nearest found by a full product),

the rank of that nearest person by the first plane (p50, p99, max) and how many the two planes
lose. Signs are compared as +-1 vectors by matrix products: Hamming = (bits - product) / 2.

  python benches/matching/sign_planes.py out/matching/uniform-cosine-512d-1m [...]
"""

import argparse
import json
from pathlib import Path

import numpy as np

FIRST_PLANE_KEEPS = 4096
SIGN_CANDIDATES = 64
WITHIN = 0.4
BATCH = 50


def load(folder: Path):
    meta = json.loads((folder / "meta.json").read_text())
    n, dim = meta["n"], meta["dim"]
    base = np.memmap(folder / "base.f32", dtype=np.float32, mode="r", shape=(n, dim))
    queries = np.fromfile(folder / "queries.f32", dtype=np.float32).reshape(-1, dim)
    exact = np.fromfile(folder / "exact.i64", dtype=np.int64)
    return base, queries, exact


def at_distance(base, count: int, rng) -> np.ndarray:
    """`count` unit queries each exactly WITHIN (cosine distance) from a random stored row."""
    rows = np.asarray(base[np.sort(rng.choice(len(base), count, replace=False))])
    noise = rng.standard_normal(rows.shape).astype(np.float32)
    noise -= (noise * rows).sum(axis=1, keepdims=True) * rows
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    cos = 1.0 - WITHIN
    return cos * rows + np.sqrt(1.0 - cos * cos) * noise


def ranks(signs, queries, nearest, half: int):
    """Per query: its nearest row's rank by the first plane, and whether the two planes keep it."""
    first, both, kept = [], [], []
    order = np.arange(len(signs), dtype=np.int64)
    for at in range(0, len(queries), BATCH):
        q = queries[at:at + BATCH]
        qs = np.where(q >= 0, 1.0, -1.0).astype(np.float32)
        h1 = (half - signs[:, :half] @ qs[:, :half].T) / 2
        h = h1 + (signs.shape[1] - half - signs[:, half:] @ qs[:, half:].T) / 2
        for j in range(len(q)):
            e = nearest[at + j]
            # Ties go to the first slot, as in the scan: the slot breaks them.
            key1 = h1[:, j].astype(np.int64) * len(signs) + order
            first.append(int((key1 < key1[e]).sum()))
            keep = np.argpartition(key1, FIRST_PLANE_KEEPS)[:FIRST_PLANE_KEEPS]
            if e not in keep:
                kept.append(False)
                continue
            key = h[keep, j].astype(np.int64) * len(signs) + keep
            both.append(int((key < h[e, j].astype(np.int64) * len(signs) + e).sum()))
            kept.append(both[-1] < SIGN_CANDIDATES)
    return np.array(first), np.array(both), np.array(kept)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", type=Path, nargs="+")
    ap.add_argument("--seed", type=int, default=61)
    args = ap.parse_args()
    for folder in args.folders:
        base, queries, exact = load(folder)
        signs = np.empty(base.shape, dtype=np.float32)
        for at in range(0, len(base), 100_000):
            signs[at:at + 100_000] = np.where(base[at:at + 100_000] >= 0, 1.0, -1.0)
        half = 256
        rng = np.random.default_rng(args.seed)
        planted = at_distance(base, len(queries), rng)
        found = np.concatenate([np.asarray(base[at:at + 100_000]) @ planted.T for at in range(0, len(base), 100_000)])
        nearest = found.argmax(axis=0)
        for name, q, e in (("its own queries", queries, exact), ("queries 0.4 away", planted, nearest)):
            d = 1.0 - np.einsum("ij,ij->i", np.asarray(base[e]), q)
            within = d <= WITHIN + 1e-4
            first, both, kept = ranks(signs, q[within], e[within], half)
            print(f"{folder.name}, {name}: {within.sum()} within {WITHIN}; the match's rank by the first "
                  f"plane p50 {np.median(first):.0f}, p99 {np.percentile(first, 99):.0f}, max {first.max()}; "
                  f"by both planes (of those kept) p50 {np.median(both):.0f}, p99 "
                  f"{np.percentile(both, 99):.0f}, max {both.max()}; "
                  f"lost by the two planes: {(~kept).sum()}", flush=True)


if __name__ == "__main__":
    main()
