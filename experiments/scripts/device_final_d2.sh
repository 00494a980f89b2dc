#!/usr/bin/env bash
# Final pair of device calls, part 2: QuACK installed, the committed dispatch table timed beside
# torch, torch.compile, QuACK and Liger (bench_rmsnorm.py), the exported package checked.
set -o pipefail
export PYTHONUNBUFFERED=1
if ls /root/q/*.part00 >/dev/null 2>&1 && [ -d .whlq2 ]; then
    name=$(basename /root/q/*.part00 .part00)
    cat /root/q/"$name".part00 .whlq2/"$name".part0[1-9] > /root/q/"$name" && rm /root/q/*.part00
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /root/q/*.whl \
        || echo "QuACK wheels did not install"
else
    echo "QuACK's first wheel part is not on this machine: no QuACK"
fi
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD
OUT=${OUT:-results/device}
mkdir -p "$OUT"
timeout "${BENCH_S:-300}" python3 experiments/scripts/bench_rmsnorm.py --dispatch results/rmsnorm_dispatch.json \
    --matrix quack:bf16,fp16,fp32 --baselines torch,torch_compile,quack,liger \
    --out "$OUT/rmsnorm_fwd_h200" > "$OUT/bench.log" 2>&1
tail -42 "$OUT/bench.log"
timeout "${EXPORT_S:-200}" bash experiments/scripts/export_check.sh results/rmsnorm_fwd_h200_run.json "$OUT" \
    "$OUT/rmsnorm_fwd_h200.json" 2>&1 | tail -50
