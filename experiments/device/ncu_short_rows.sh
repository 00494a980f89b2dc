#!/usr/bin/env bash
# On the device, after device_chain_c.sh (QuACK installed, the package in /tmp/pkgsite): Nsight
# Compute on the evolved kernel, QuACK and torch.compile for the short-row cases, then one table.
#   CASES=bf16/32768x256,fp32/32768x256 OUT=$OUT bash experiments/device/ncu_short_rows.sh
# The GPU's clocks are left alone (--clock-control none, METHOD.md); caches are flushed before
# every profiled kernel (ncu's default --cache-control all), as the judge flushes L2 before a sample.
set -o pipefail
. experiments/device/device_lib.sh
device_pythonpath
OUT=${OUT:-results/device}
mkdir -p "$OUT"
CASES=${CASES:-bf16/32768x256,fp16/32768x256,fp32/32768x256,bf16/32768x1024,fp32/32768x1024}
IMPLS=${IMPLS:-evolved,quack,torch_compile}
if [ ! -d /tmp/pkgsite ]; then     # the package of the committed run, as export_check.sh builds it
    python3 -m evo.cli export results/rmsnorm_fwd_h200_run.json --out /tmp/pkg --force 2>&1 | tail -2
    python3 -m pip install -q --no-deps --no-build-isolation --disable-pip-version-check --target /tmp/pkgsite /tmp/pkg 2>&1 | tail -2
fi
export PYTHONPATH=/tmp/pkgsite:$PYTHONPATH QUACK_CACHE_DIR=${QUACK_CACHE_DIR:-/tmp/quack_cache}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 3; }
METRICS=$(python3 -c "import sys; sys.path.insert(0, 'experiments/scripts'); import ncu_table; print(','.join(ncu_table.METRICS))")
PROBE="python3 experiments/scripts/short_rows_probe.py --impl $IMPLS --cases $CASES --repeats ${REPEATS:-3} --order $OUT/ncu_order.json"
run_ncu() {
    "$NCU" --clock-control none --profile-from-start off --csv --page raw --metrics "$METRICS" "$@" \
        --log-file "$OUT/ncu.csv" $PROBE > "$OUT/ncu_probe.log" 2>&1
}
run_ncu --nvtx --print-nvtx-rename kernel || { echo "ncu with NVTX names failed (rc $?): again without"; run_ncu; }
echo "ncu rc=$?"; tail -3 "$OUT/ncu_probe.log"
python3 experiments/scripts/ncu_table.py --csv "$OUT/ncu.csv" --order "$OUT/ncu_order.json" --out "$OUT/short_rows_ncu" \
    --command "CASES=$CASES IMPLS=$IMPLS bash experiments/device/ncu_short_rows.sh"
