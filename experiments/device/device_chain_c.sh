#!/usr/bin/env bash
# Device call C (see device_chain_a.sh): with PLAYOFF_S > 0 first the dispatch playoff (device_lib.sh
# dispatch_playoff: the table's near-tied genomes judged again side by side), then the dispatch table timed beside torch, torch.compile,
# QuACK and Liger on the 33-case matrix in one process (bench_rmsnorm.py), QuACK's autotuned path
# in a second pass on TUNED (default: the bf16 cases; 23-29 s of autotuning per shape), then the
# exported package installed into a clean target, its tests and its benchmark (export_check.sh),
# then (DIAG_S > 0) one package case timed alone / interleaved / by the judge (diagnose_pkg_case.py).
set -o pipefail
. experiments/device/device_lib.sh
install_wheels || exit 1
install_quack            # the third part (.whlq3/) completes the cutlass wheel parked by calls A and B
device_pythonpath
python3 -c "import quack.rmsnorm, liger_kernel; print('quack and liger import')" 2>&1 | tail -1
OUT=${OUT:-results/device}
mkdir -p "$OUT"
[ "${PLAYOFF_S:-0}" -gt 0 ] && dispatch_playoff     # the table below then times the playoff's choice
quack_autotune_restore
timeout "${BENCH_S:-420}" python3 experiments/scripts/bench_rmsnorm.py --dispatch /root/work/rmsnorm_dispatch.json \
    --matrix "${MATRIX:-quack:bf16,fp16,fp32}" --baselines "${BASELINES:-torch,torch_compile,quack,liger,copy}" \
    --tuned-cases "${TUNED-bf16}" --out "$OUT/rmsnorm_fwd_h200" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; tail -45 "$OUT/bench.log"
quack_autotune_save
RUN=$(cat /root/work/run_dir)
timeout "${EXPORT_S:-150}" bash experiments/device/export_check.sh "$RUN" "$OUT" "$OUT/rmsnorm_fwd_h200.json" 2>&1 | tail -30
if [ "${DIAG_S:-90}" -gt 0 ] && [ -d /tmp/pkgsite ]; then
    PYTHONPATH=/tmp/pkgsite:$PYTHONPATH timeout "${DIAG_S:-90}" python3 experiments/scripts/diagnose_pkg_case.py \
        --dtype "${DIAG_DTYPE:-fp32}" --M "${DIAG_M:-8192}" --N "${DIAG_N:-262144}" --dispatch /root/work/rmsnorm_dispatch.json --out "$OUT/diag.json" \
        > "$OUT/diag.log" 2>&1
    echo "diag rc=$?"; tail -20 "$OUT/diag.log"
fi
