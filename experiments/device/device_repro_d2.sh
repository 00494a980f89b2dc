#!/usr/bin/env bash
# QuACK's autotuned path (rmsnorm_fwd_tuned: an exhaustive search over its configs at the first call
# per shape) beside its plain path, torch and the dispatch table, one process per bf16 case (4K,
# 1K, 16K first), until QUACK_TUNED_S runs out (carry .whl, .whlq2 right after d1).
set -o pipefail
. experiments/device/device_lib.sh
install_wheels || exit 1
install_quack
device_pythonpath
OUT=${OUT:-results/device}; mkdir -p "$OUT/quack_tuned"
export QUACK_PRINT_AUTOTUNING=1 QUACK_CACHE_DIR=/tmp/quack_cache
end=$((SECONDS + ${QUACK_TUNED_S:-300}))
for n in ${QUACK_TUNED_N:-4096 1024 16384 256 2048 8192 512}; do
    left=$((end - SECONDS)); [ $left -gt 20 ] || { echo "no time left for N=$n"; break; }
    timeout $left python3 experiments/scripts/bench_rmsnorm.py --dispatch results/rmsnorm_dispatch.json \
        --matrix quack:bf16 --cases "bf16/32768x$n" --baselines torch,quack,quack_tuned \
        --out "$OUT/quack_tuned/bf16_32768x$n" > "$OUT/quack_tuned/bf16_32768x$n.log" 2>&1
    echo "N=$n rc=$? $(grep -E '^\| bf16' "$OUT/quack_tuned/bf16_32768x$n.md" 2>/dev/null)"
    grep -m3 -iE "quack_tuned|Error" "$OUT/quack_tuned/bf16_32768x$n.log" | cut -c1-400
done
# one archive: the device returns a limited number of files
tar -C "$OUT" -czf "$OUT/quack_tuned.tgz" quack_tuned && rm -rf "$OUT/quack_tuned"
