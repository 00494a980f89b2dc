#!/usr/bin/env bash
# Device call C (see device_chain_a.sh): the dispatch table timed beside torch, torch.compile,
# QuACK and Liger on the 33-case matrix in one process (bench_rmsnorm.py), then the exported
# package installed into a clean target, its tests and its benchmark (export_check.sh).
set -o pipefail
. experiments/scripts/device_lib.sh
device_pythonpath
OUT=${OUT:-results/device}
mkdir -p "$OUT"
timeout "${BENCH_S:-400}" python3 experiments/scripts/bench_rmsnorm.py --dispatch /root/work/rmsnorm_dispatch.json \
    --matrix "${MATRIX:-quack:bf16,fp16,fp32}" --baselines "${BASELINES:-torch,torch_compile,quack,liger}" \
    --out "$OUT/rmsnorm_fwd_h200" > "$OUT/bench.log" 2>&1
tail -45 "$OUT/bench.log"
RUN=$(cat /root/work/run_dir)
timeout "${EXPORT_S:-170}" bash experiments/scripts/export_check.sh "$RUN" "$OUT" "$OUT/rmsnorm_fwd_h200.json" 2>&1 | tail -30
