#!/usr/bin/env bash
# Device call B (see device_chain_a.sh): QuACK's second wheel part parked (.whlq2/), the search
# resumed to its wall budget, then its dump and dispatch table (kept in /root/work for C).
set -o pipefail
. experiments/device/device_lib.sh
install_wheels || exit 1
install_quack
device_pythonpath
OUT=${OUT:-results/device}
mkdir -p "$OUT" /root/work
RUN=$(cat /root/work/run_dir 2>/dev/null || ls -dt runs/rmsnorm-fwd-h200-*/ | head -1)
timeout -s INT "${SEARCH_S:-380}" python3 -m evo.cli resume "$RUN" --quiet > "$OUT/search_b.log" 2>&1
tail -3 "$OUT/search_b.log"
python3 -m evo.cli status "$RUN" | tail -10
python3 -m evo.cli dump "$RUN" --out /root/work/rmsnorm_fwd_h200_run.json && cp /root/work/rmsnorm_fwd_h200_run.json "$OUT/"
python3 -m evo.cli dispatch "$RUN" --out /root/work/rmsnorm_dispatch.json | tail -40 && cp /root/work/rmsnorm_dispatch.json "$OUT/"
