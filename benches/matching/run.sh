#!/usr/bin/env bash
# The gallery's matching alone (issue 22), ours and faiss side by side on the same vectors, one
# query at a time on one thread: `make bench` runs it after the server bench; alone:
#   bash benches/matching/run.sh
# For each dataset (benches/matching/data.py; generated once into out/matching/; kind real
# takes the sample photos' faces that examples/real_faces writes to out/matching/real-faces):
#   - ours: examples/match_bench (the gallery's usearch index: exact scan and HNSW at several
#     search breadths, and what the gallery answers with each as its first look), the index
#     built once and saved beside the data;
#   - faiss-cpu from PyPI: IndexFlatIP / IndexFlatL2 (exact) and IndexHNSWFlat (M=32), the HNSW
#     built once and cached beside the data;
# then one table (benches/matching/report.py) into out/bench-matching.txt. First, the second
# look's scan of a million people's sign bits, each kernel this CPU runs (benches/sign_scan.rs,
# criterion, about a minute) into out/bench-sign-scan.txt.
# First run with the million-person gallery: about 40 minutes on 2 cores (both HNSW builds);
# later runs reuse the built indexes (a few minutes).
# Environment:
#   BENCH_MATCHING_SETS="clustered:cosine:100000 uniform:cosine:100000 shifted:cosine:100000
#                        real:cosine:100000 clustered:euclidean:100000
#                        clustered:cosine:1000000 clustered:euclidean:1000000"
#   (real:cosine:1000000 and shifted:cosine:1000000: 25 more minutes each, first run)
#                                                   kind:metric:n of each dataset
#   BENCH_MATCHING_EF=32,48,64,128                  our search breadths
set -euo pipefail

# shellcheck disable=SC2034  # read by lib.sh
LOG_TAG=bench-matching
# shellcheck source=scripts/lib.sh disable=SC1091  # followed with shellcheck -x
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cd "$REPO_ROOT"

SETS="${BENCH_MATCHING_SETS:-clustered:cosine:100000 uniform:cosine:100000 shifted:cosine:100000 real:cosine:100000 clustered:euclidean:100000 clustered:cosine:1000000 clustered:euclidean:1000000}"
EF="${BENCH_MATCHING_EF:-32,48,64,128}"
OUT="$REPO_ROOT/out"
LOGS="$OUT/bench-matching"
mkdir -p "$LOGS"
bash benches/matching/setup.sh
PY="${FACE_MATCHING_VENV:-$(cd assets && pwd -P)/matching-venv}/bin/python"
for example in match_bench real_faces; do
    [ -x "target/release/examples/$example" ] ||
        die "target/release/examples/$example is missing: cargo build --release --examples"
done
if [[ " $SETS" == *" real:"* ]] && [ ! -s "$OUT/matching/real-faces/real.f32" ]; then
    log "real faces: the sample photos, changed and embedded (examples/real_faces)"
    run_logged "$LOGS/real-faces.log" target/release/examples/real_faces "$OUT/matching/real-faces"
fi

log "the sign scan at a million, each kernel: cargo bench --bench sign_scan (out/bench-sign-scan.txt)"
run_logged "$OUT/bench-sign-scan.txt" cargo bench --bench sign_scan

rows=()
for set in $SETS; do
    IFS=: read -r kind metric n <<<"$set"
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "BENCH_MATCHING_SETS: $set is not kind:metric:n"
    # data.py's own folder name: <kind>-<metric>-<dim>d-<100k|1m>
    dim=512
    [ "$metric" = euclidean ] && dim=128
    short="$n"
    if [ $((n % 1000000)) = 0 ]; then short="$((n / 1000000))m"; elif [ $((n % 1000)) = 0 ]; then short="$((n / 1000))k"; fi
    name="$kind-$metric-${dim}d-$short"
    data="$OUT/matching/$name"
    log "$name: data (benches/matching/data.py)"
    run_logged "$LOGS/$name-data.log" "$PY" benches/matching/data.py --kind "$kind" \
        --metric "$metric" --n "$n" --queries 1000 --out "$data"
    log "$name: ours (examples/match_bench; the first run builds the index)"
    run_logged "$LOGS/$name-ours.log" target/release/examples/match_bench "$data" --ef "$EF" \
        --exact-too --index "$data/ours.usearch"
    # This run's rows (the log keeps earlier ones): the exact scan, then per
    # breadth what the gallery answers and the index alone.
    grep '^{' "$LOGS/$name-ours.log" | tail -n "$((2 * ($(tr -cd , <<<"$EF" | wc -c) + 1) + 1))" \
        >"$LOGS/$name-ours.jsonl"
    log "$name: faiss (benches/matching/faiss_bench.py; the first run builds its HNSW)"
    run_logged "$LOGS/$name-faiss.log" "$PY" benches/matching/faiss_bench.py "$data" \
        --ef-search 16,32,64,128 --json "$LOGS/$name-faiss.json"
    rows+=("$LOGS/$name-ours.jsonl" "$LOGS/$name-faiss.json")
done
"$PY" benches/matching/report.py "${rows[@]}" | tee "$OUT/bench-matching.txt"
