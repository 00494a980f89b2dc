#!/usr/bin/env bash
# Final pair of device calls, part 2: QuACK installed, the committed dispatch table timed beside
# torch, torch.compile, QuACK and Liger (bench_rmsnorm.py), the exported package checked.
set -o pipefail
. experiments/device/device_lib.sh
install_quack
device_pythonpath
OUT=${OUT:-results/device}
mkdir -p "$OUT"
timeout "${BENCH_S:-300}" python3 experiments/scripts/bench_rmsnorm.py --dispatch results/rmsnorm_dispatch.json \
    --matrix quack:bf16,fp16,fp32 --baselines torch,torch_compile,quack,liger \
    --out "$OUT/rmsnorm_fwd_h200" > "$OUT/bench.log" 2>&1
tail -42 "$OUT/bench.log"
timeout "${EXPORT_S:-200}" bash experiments/device/export_check.sh results/rmsnorm_fwd_h200_run.json "$OUT" \
    "$OUT/rmsnorm_fwd_h200.json" 2>&1 | tail -50
