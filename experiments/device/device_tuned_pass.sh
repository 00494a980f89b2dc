#!/usr/bin/env bash
# Device call D (after device_chain_c.sh, machine still warm): QuACK's autotuned path timed beside
# the dispatch table on the cases call C left to it (default: fp16 and fp32, N = 256 ... 32768;
# its tuner cannot launch at N >= 64K), into $OUT/tuned_fp16_fp32.{json,md}; joined to C's table
# without a GPU by `bench_rmsnorm.py merge`. With QuACK's autotune cache restored from
# results/quack_autotune/ a shape autotuned in an earlier session is timed at once (~410 s for
# the 16 cases without it). Session 7 ran this pass as an inline command (results/README.md).
#   DTYPES=fp16,fp32 TUNED_S=430 OUT=$OUT bash experiments/device/device_tuned_pass.sh
set -o pipefail
. experiments/device/device_lib.sh
install_wheels || exit 1
device_pythonpath
OUT=${OUT:-results/device}
mkdir -p "$OUT"
quack_autotune_restore
C=
for d in $(echo "${DTYPES:-fp16,fp32}" | tr , ' '); do
    for n in 256 512 1024 2048 4096 8192 16384 32768; do C="$C${C:+,}$d/32768x$n"; done
done
timeout "${TUNED_S:-430}" python3 experiments/scripts/bench_rmsnorm.py --dispatch /root/work/rmsnorm_dispatch.json \
    --matrix "${MATRIX:-quack:bf16,fp16,fp32}" --cases "$C" --baselines torch,quack --tuned-cases "$C" \
    --out "$OUT/tuned_fp16_fp32" > "$OUT/tuned.log" 2>&1
echo "tuned rc=$?"; grep -E "^tuned pass|QuACK's autotune cache" "$OUT/tuned.log" | tail -3
quack_autotune_save
