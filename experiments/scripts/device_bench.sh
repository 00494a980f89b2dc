#!/usr/bin/env bash
# One device call: install QuACK (its cutlass wheel comes in parts: .whlq2/ now, the first part
# left in /root/q by device_search.sh), then time the dispatch table beside every baseline.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
if ls /root/q/*.part00 >/dev/null 2>&1 && [ -d .whlq2 ]; then
    name=$(basename /root/q/*.part00 .part00)
    cat /root/q/"$name".part00 .whlq2/"$name".part0[1-9] > /root/q/"$name" && rm /root/q/*.part00
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /root/q/*.whl \
        || echo "QuACK wheels did not install"
else
    echo "QuACK's first wheel part is not on this machine (it went cold between calls): no QuACK this time"
fi
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD
python3 -c "import quack.rmsnorm, liger_kernel; print('quack and liger import')" 2>&1 | tail -2
OUT=${OUT:-results/device}
mkdir -p "$OUT"
timeout "${BENCH_S:-420}" python3 experiments/scripts/bench_rmsnorm.py --dispatch "${DISPATCH:-results/rmsnorm_dispatch.json}" \
    --matrix "${MATRIX:-quack:bf16}" --out "$OUT/rmsnorm_fwd_h200" 2>&1 | tee "$OUT/bench.log" | tail -30
