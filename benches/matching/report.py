"""One table of the matching bench: our rows (JSON lines of examples/match_bench) and faiss's
(the JSON list of faiss_bench.py), per dataset, ours first. Usage: report.py FILE..."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows_of(path: Path) -> list[dict]:
    text = path.read_text()
    if path.suffix == ".json":
        data = json.loads(text)
        return data if isinstance(data, list) else data.get("rows", [])
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def main(paths: list[str]) -> None:
    rows = [r for p in paths for r in rows_of(Path(p))]
    by_set: dict[tuple, list[dict]] = {}
    for r in rows:
        by_set.setdefault((r["kind"], r["dim"], r["n"]), []).append(r)
    head = f"{'engine':6} {'index':26} {'param':14} {'p50 ms':>8} {'p99 ms':>8} " \
           f"{'recall@1':>8} {'planted':>8} {'person':>7} {'build s':>8} {'load s':>7} {'MiB':>7}"
    for (kind, dim, n), group in by_set.items():
        print(f"\n{kind}, {dim}-d, {n:,} embeddings, one query at a time, one thread")
        print(head)
        for r in (r for r in group if r["index"] != "gallery"):
            mem = r.get("index_mib", r.get("mem_mib", float("nan")))
            print(f"{r['engine']:6} {r['index']:26} {r['param']:14} {r['p50_ms']:8.3f} "
                  f"{r['p99_ms']:8.3f} {r['recall_at_1']:8.3f} {r['planted_found']:8.3f} "
                  f"{r.get('person_found', float('nan')):7.3f} "
                  f"{_num(r.get('build_s')):>8} {_num(r.get('load_s')):>7} {mem:7.0f}"
                  + (f"  {r['strays']} strays" if "strays" in r else ""))

        answers = [r for r in group if r["index"] == "gallery"]
        if answers:
            print(f"\nwhat the gallery answers (a first look, then a wider one before 'unknown'), "
                  f"threshold {answers[0]['threshold']}")
            print(f"{'looks':24} {'p50 ms':>8} {'p99 ms':>8} {'named right':>11} "
                  f"{'named wrong':>11} {'looked again':>12} {'proven':>7} {'right <=0.8t':>12}")
            for r in answers:
                # Of the queries whose exact nearest is within 0.8x the threshold: the goal.
                within = r.get("named_right_within_0.8", float("nan"))
                count = r.get("queries_within_0.8", "?")
                print(f"{r['param']:24} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} "
                      f"{r['named_right']:11.3f} {r['named_wrong']:11.3f} {r['looked_again']:12.3f} "
                      f"{r.get('proven', float('nan')):7.3f} {within:7.3f} of {count}"
                      + (f"  {r['proven_not_nearest']} proven but not the nearest"
                         if r.get("proven_not_nearest") else ""))


def _num(x) -> str:
    return "-" if x is None or x != x else f"{x:.1f}"


if __name__ == "__main__":
    main(sys.argv[1:])
