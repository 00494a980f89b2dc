#!/usr/bin/env bash
# One device call: judge throughput, then the RMSNorm GA + Optuna search, then its dump and
# dispatch table. Run from the repo root on the GPU machine with the wheels carried in .whl/
# (and, optionally, QuACK's first wheel part in .whlq1/, kept in /root/q for the next call).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-results/device}
mkdir -p "$OUT" /root/q && { [ -d .whlq1 ] && cp .whlq1/* /root/q/ || true; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/throughput.log"
timeout "${THROUGHPUT_S:-150}" python3 experiments/scripts/throughput.py --genomes "${THROUGHPUT_GENOMES:-24}" \
    --out "$OUT/throughput.json" 2>&1 | tee -a "$OUT/throughput.log" | tail -4
timeout "${SEARCH_S:-400}" python3 -m evo.cli run experiments/rmsnorm_fwd_h200.toml --quiet 2>&1 | tee "$OUT/search.log" | tail -8
RUN=$(ls -dt runs/rmsnorm-fwd-h200-*/ | head -1)
python3 -m evo.cli status "$RUN"
python3 -m evo.cli dump "$RUN" --out "$OUT/rmsnorm_fwd_h200_run.json"
python3 -m evo.cli dispatch "$RUN" --out "$OUT/rmsnorm_dispatch.json"
