#!/usr/bin/env bash
# Does the exported package reproduce the judge's table? On the H200 (carry .whl, .whlq1 to park
# QuACK's first part for device_repro_d2.sh): the committed run exported, installed into a clean
# target and tested, its benchmark run twice (pkg1, pkg2), and the judge's bench re-run for fp32 (torch only)
# to tell a package effect from run-to-run drift.
set -o pipefail
. experiments/device/device_lib.sh
device_start || exit 1
timeout "${EXPORT_S:-200}" bash experiments/device/export_check.sh results/rmsnorm_fwd_h200_run.json "$OUT/pkg1" \
    results/rmsnorm_fwd_h200.json 2>&1 | tail -4
mkdir -p "$OUT/pkg2"
(cd /tmp && env -u PYTHONPATH PYTHONPATH=/tmp/pkgsite timeout 150 python3 -m ptxk_rmsnorm.bench --dtype all \
    --out "$OUT/pkg2/pkg_bench.json" > "$OUT/pkg2/pkg_bench.log" 2>&1); tail -3 "$OUT/pkg2/pkg_bench.log"
timeout "${BENCH_S:-150}" python3 experiments/scripts/bench_rmsnorm.py --dispatch results/rmsnorm_dispatch.json \
    --matrix quack:fp32 --baselines torch --out "$OUT/judge_fp32" > "$OUT/judge_fp32.log" 2>&1
tail -16 "$OUT/judge_fp32.log"
