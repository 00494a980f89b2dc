#!/usr/bin/env bash
# Where kda_prep's and kda_rec's time goes inside the SM (issue 20; kernels/kda/README.md "Measured:
# v8"): Nsight Compute's counters of one launch of each kernel of each genome on each scenario, the
# launches made by kda_prep_probe.py (each kernel apart, as the probe times them), then one table.
#   carry: .whl      (about 60-120 s on a warm machine: ncu replays each kernel once per pass)
#   GENOMES (split-bf16-v2-tight,split-bf16-v2-tight-r4: v8's pair beside v9's, kda_rec at 3 and 4 CTAs an
#   SM; the shared-memory carveout the driver chose for each is in the table: six tight kda_prep CTAs
#   and four r4 kda_rec ones need the 228 KB split, which the runner does not ask for them),
#   CASES (uniform: uniform/H96 and uniform/H64, the two scenarios short of 1.3x), NCU_S (240)
# The GPU's clocks are left alone (--clock-control none, METHOD.md); ncu flushes the caches before
# every profiled kernel (its default --cache-control all), as the judge flushes L2 before a sample.
# Files in $OUT (at most 8 come back): kda_ncu.ncu-rep, kda_ncu_raw.csv, kda_ncu_source.csv (per SASS
# line: executions and sampled stalls), kda_ncu.json, kda_ncu.md, kda_ncu.log.
set -o pipefail
. experiments/device/device_lib.sh
device_start >/dev/null || exit 1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 3; }
GENOMES=${GENOMES:-split-bf16-v2-tight,split-bf16-v2-tight-r4}
CASES=${CASES:-uniform}
SECTIONS="SpeedOfLight ComputeWorkloadAnalysis MemoryWorkloadAnalysis MemoryWorkloadAnalysis_Chart MemoryWorkloadAnalysis_Tables Occupancy WarpStateStats SchedulerStats InstructionStats LaunchStats SourceCounters"
timeout -s INT "${NCU_S:-240}" "$NCU" --clock-control none --kernel-name regex:'^kda_(prep|rec)' \
    $(for s in $SECTIONS; do printf -- '--section %s ' "$s"; done) -f -o "$OUT/kda_ncu" \
    python3 experiments/device/kda_prep_probe.py --genomes "$GENOMES" --cases "$CASES" --reps 1 --warmup 0 \
    --out /tmp/kda_ncu_probe.json > "$OUT/kda_ncu.log" 2>&1
echo "ncu rc=$?"; grep -E "==ERROR==|==WARNING==|Error" "$OUT/kda_ncu.log" | head -5
"$NCU" --import "$OUT/kda_ncu.ncu-rep" --csv --page raw > "$OUT/kda_ncu_raw.csv" 2>> "$OUT/kda_ncu.log"
# per SASS instruction: executed count and sampled stalls (SourceCounters), to find the hot lines
"$NCU" --import "$OUT/kda_ncu.ncu-rep" --csv --page source --print-source sass > "$OUT/kda_ncu_source.csv" 2>> "$OUT/kda_ncu.log" \
    || echo "no source page (rc $?): see kda_ncu.log"
python3 experiments/scripts/ncu_kda.py --csv "$OUT/kda_ncu_raw.csv" --probe /tmp/kda_ncu_probe.json \
    --out "$OUT/kda_ncu" --command "GENOMES=$GENOMES CASES=$CASES bash experiments/device/kda_ncu.sh"
[ -f "$OUT/kda_ncu.md" ] && cat "$OUT/kda_ncu.md"
