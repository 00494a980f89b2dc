#!/usr/bin/env bash
# Where the RMSNorm backward's time goes inside the SM, ours beside INT21's on the same cases (issue 17;
# kernels/rmsnorm_bwd/INT21_NOTES.md section 10): Nsight Compute's counters of one call of each
# implementation (bwd_ncu_probe.py), then one table (ncu_table.py --set stalls).
#   carry: .whl .peers/RMSNorm-H100 .peers/int21_ext.tgz   (INT21 restored as bwd_search.sh restores it)
#   CALLS (IMPL@DTYPE/MxN,...: int21 or a genome key prefix from results/rmsnorm_bwd_dispatch.json or
#   SEEDS), SEEDS (a seeds file, default the v8 waves probe's), NCU_S (300)
# The GPU's clocks are left alone (--clock-control none, METHOD.md); ncu flushes the caches before every
# profiled kernel (its default --cache-control all), as the judge flushes L2 before a sample.
# Files in $OUT (8, the most a call returns; the report itself stays in /tmp/bwd_ncu.ncu-rep on the warm
# machine): env.txt, int21.log, bwd_ncu_order.json, bwd_ncu_raw.csv.gz, bwd_ncu_source.csv.gz (per SASS
# line: executions and sampled stalls), bwd_ncu.json, bwd_ncu.md, bwd_ncu.log.
set -o pipefail
. experiments/device/device_lib.sh
device_start >/dev/null || exit 1
. experiments/device/peers_build.sh > "$OUT/int21.log" 2>&1; tail -1 "$OUT/int21.log"
export EVO_INT21_ROOT=$PWD/.peers/RMSNorm-H100
require_peers int21 || exit 4
device_pythonpath
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 3; }
CALLS=${CALLS:-int21@bf16/32768x65536,1d61564c@bf16/32768x65536,eefa2c4e@bf16/32768x65536,9496ddd4@bf16/32768x65536,int21@bf16/16384x131072,c82157f8@bf16/16384x131072,int21@bf16/8192x262144,eefa2c4e@bf16/8192x262144}
SEEDS=${SEEDS:-experiments/seeds/rmsnorm_bwd_v8_waves_probe.json}
SECTIONS="SpeedOfLight MemoryWorkloadAnalysis MemoryWorkloadAnalysis_Tables Occupancy WarpStateStats SchedulerStats LaunchStats InstructionStats SourceCounters"
timeout -s INT "${NCU_S:-300}" "$NCU" --clock-control none --profile-from-start off --nvtx --print-nvtx-rename kernel \
    $(for s in $SECTIONS; do printf -- '--section %s ' "$s"; done) -f -o /tmp/bwd_ncu \
    python3 experiments/device/bwd_ncu_probe.py --calls "$CALLS" --seeds "$SEEDS" --order "$OUT/bwd_ncu_order.json" \
    > "$OUT/bwd_ncu.log" 2>&1
echo "ncu rc=$?"; grep -E "==ERROR==|==WARNING==|Error|profiled" "$OUT/bwd_ncu.log" | head -8
"$NCU" --import /tmp/bwd_ncu.ncu-rep --csv --page raw --print-nvtx-rename kernel > /tmp/bwd_ncu_raw.csv 2>> "$OUT/bwd_ncu.log"
"$NCU" --import /tmp/bwd_ncu.ncu-rep --csv --page source --print-source sass > /tmp/bwd_ncu_source.csv 2>> "$OUT/bwd_ncu.log" \
    || echo "no source page (rc $?): see bwd_ncu.log"
gzip -c /tmp/bwd_ncu_raw.csv > "$OUT/bwd_ncu_raw.csv.gz"; gzip -c /tmp/bwd_ncu_source.csv > "$OUT/bwd_ncu_source.csv.gz"
python3 experiments/scripts/ncu_table.py --csv /tmp/bwd_ncu_raw.csv --order "$OUT/bwd_ncu_order.json" --out "$OUT/bwd_ncu" \
    --set stalls --title "Nsight Compute: the RMSNorm backward beside INT21's" \
    --command "CALLS=$CALLS bash experiments/device/bwd_ncu.sh"
ls -la "$OUT"
