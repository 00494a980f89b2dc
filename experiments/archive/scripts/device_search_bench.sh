#!/usr/bin/env bash
# One device call: the RMSNorm search, its dump and dispatch table, then the dispatch table timed
# beside every baseline that imports on the machine (bench_rmsnorm.py).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-results/device}
mkdir -p "$OUT"
timeout "${SEARCH_S:-300}" python3 -m evo.cli run experiments/rmsnorm_fwd_h200.toml --quiet 2>&1 | tee "$OUT/search.log" | tail -8
RUN=$(ls -dt runs/rmsnorm-fwd-h200-*/ | head -1)
python3 -m evo.cli status "$RUN"
python3 -m evo.cli dump "$RUN" --out "$OUT/rmsnorm_fwd_h200_run.json"
python3 -m evo.cli dispatch "$RUN" --out "$OUT/rmsnorm_dispatch.json" || exit 1
timeout "${BENCH_S:-200}" python3 experiments/scripts/bench_rmsnorm.py --dispatch "$OUT/rmsnorm_dispatch.json" \
    --matrix "${MATRIX:-quack:bf16}" --out "$OUT/rmsnorm_fwd_h200" 2>&1 | tee "$OUT/bench.log" | tail -25
