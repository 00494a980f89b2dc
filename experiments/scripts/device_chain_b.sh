#!/usr/bin/env bash
# Device call B (see device_chain_a.sh): QuACK's second wheel part parked (.whlq2/), the search
# resumed to its wall budget, then its dump, the dispatch playoff (PLAYOFF_S > 0) and the dispatch
# table (kept in /root/work for C).
set -o pipefail
. experiments/scripts/device_lib.sh
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
# PLAYOFF_S > 0: the near-tied genomes of each width judged again in one process (evo/playoff.py),
# at most PLAYOFF_S seconds; the dispatch (and call C's export) then takes the playoff's winners
PLAYOFF=()
if [ "${PLAYOFF_S:-0}" -gt 0 ]; then
    timeout "$((PLAYOFF_S + 60))" python3 experiments/scripts/playoff.py --run /root/work/rmsnorm_fwd_h200_run.json \
        --margin "${PLAYOFF_MARGIN:-0.02}" --repeats "${PLAYOFF_REPEATS:-3}" --max-s "$PLAYOFF_S" \
        --out /root/work/playoff > "$OUT/playoff.log" 2>&1
    echo "playoff rc=$?"; tail -3 /root/work/playoff.md 2>/dev/null
    [ -f /root/work/playoff.json ] && cp /root/work/playoff.json /root/work/playoff.md "$OUT/" && PLAYOFF=(--playoff /root/work/playoff.json)
fi
python3 -m evo.cli dispatch "$RUN" "${PLAYOFF[@]}" --out /root/work/rmsnorm_dispatch.json | tail -40 && cp /root/work/rmsnorm_dispatch.json "$OUT/"
