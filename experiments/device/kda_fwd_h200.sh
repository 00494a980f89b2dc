#!/usr/bin/env bash
# Issue 20 in one call: FlashKDA's six scenarios on the H200, the template's genomes judged beside
# FlashKDA and fla (experiments/device/kda_fwd_table.py), $OUT/kda_fwd_h200.json + .md rewritten
# after every scenario (copy them to results/kda_fwd_h200.*), then Triton's cache saved for the
# next call (fla_triton.tgz[.partN]: copy into .peers/ and carry).
#   carry: .whl .peers/flashkda_ext.tgz .peers/flashkda_ext.commit [.peers/fla_triton.tgz or its parts]
#   GENOMES (session 20's default: v11's prep_solve = columns, P6's forward substitution in column
#   order with its T stores after the solve (kernels/kda/README.md "v11", an estimate: kda_prep -1.7 %
#   [-1.0, -2.6], uniform/H64 0.629 [0.626-0.631] ms for tight-r2-p6cols, uniform/H96 0.921 [0.916-0.925]
#   for tight-r2-longest-p6cols: 1.29x, 1.3x only at the ranges' fast ends), each beside its twin: split-bf16-tight-r2-p6cols / -tight-r2 (the best on
#   uniform/H64, session 17), split-bf16-tight-r2-longest-p6cols / -tight-r2-longest (the best on
#   mixed/H96 and uniform/H96, session 19), split-bf16-v2-tight-p6cols / -v2-tight (fixed/H96),
#   split-bf16-v2-tight-longest-p6cols / -v2-tight-longest (mixed/H64, session 17); the v10 tail twins
#   left out (session 19: no faster than their twins, results/archive/session19/kda_fwd_h96_partial_h200.md)
#   and v7's split-bf16-v2-compact-pdl3 (fixed/H64's best by 6 us, 1.67x, where 1.3x is met anyway).
#   Session 18's default: v10's prep_overlap = tail, kda_rec launched with programmatic
#   dependent launch over the ordinary kda_prep's last wave (griddepcontrol.wait before its first
#   record), each beside its twin without it: split-bf16-tight-r2-tail / -tight-r2 (the best on
#   uniform, session 17: 0.931 / 0.635 ms at H96 / H64), split-bf16-v2-tight-tail / -v2-tight,
#   split-bf16-v2-tight-longest-tail / -v2-tight-longest (the best on mixed); README "v10", an
#   estimate: uniform/H64 0.626-0.632 ms and uniform/H96 0.922-0.928 for tight-r2-tail (3-9 us of
#   launch gap and kda_rec prologue hidden); split-bf16-tight-r2-longest (tight-r2's kda_rec, 0.729 ms
#   at mixed/H64 in index order against v2-tight's 0.796, with the longest sequence first: unmeasured,
#   no prediction of its own beyond "at or below v2-tight-longest's 0.640 on mixed/H64"); then v7's
#   split-bf16-v2-compact-pdl3 (the best on fixed/H64).
#   Session 17's default: v9's kda_rec at 128 registers, split-bf16-v2-tight-r4 (4 CTAs an SM)
#   and split-bf16-tight-r2 (2), README "v9", predicted uniform/H96 0.91-0.92 ms and uniform/H64
#   0.60-0.61 (1.30-1.37x); v8's split-bf16-v2-tight, -tight, -v2-tight-longest (the best on mixed),
#   v5's split-bf16-v2-compact (the baseline), v7's split-bf16-v2-compact-pdl3 (the best on fixed/H64).
#   Session 16's default: v8's tight kda_prep, 6 CTAs per SM: split-bf16-v2-tight, -tight,
#   -v2-tight-longest, README "v8", predicted 1.30-1.37x FlashKDA on uniform and fixed/H96; the
#   search's longest-first split-bf16-v2-compact-longest (session 15: mixed 1.43x / 1.52x); v5's
#   v2-compact and compact, the baseline; v7's v2-compact-pdl3, the best on fixed/mixed H64.
#   Session 15's default was v7's split-bf16-v2-compact-pdl3, -v4-compact-pdl3, -v2-compact-pdl2: kda_rec overlapped
#   with a persistent kda_prep at 3 / 3 / 2 CTAs per SM, README "v7: prep and rec overlapped", its
#   PREDICTION: pdl3 best on uniform/H96 and H64, pdl2 on fixed/H96 and mixed/H96, v4-pdl3 slower,
#   the residency test; compiled and CPU-tested, never run before this table: CHECK against float64
#   drops a wrong one, but a hang or CUDA fault would end the table's process (tests/
#   test_kda_overlap.py -m gpu checks them alone; GENOMES=split-bf16-v2-compact,split-bf16-compact
#   leaves them out); then v5's split-bf16-v2-compact and split-bf16-compact, session 14's best
#   (1.20-1.60x FlashKDA), the baseline of the overlap; v6's wgmma genomes dropped: slower than
#   mma.sync on the H200, e.g. fixed/H64 0.847 vs 0.745 ms; 5 genomes: ~75 s of table (estimate,
#   session 13's ~15 s a genome), well inside TABLE_S and BUDGET_S),
#   PROBE_GENOMES (kda_prep_probe.py's: split-bf16-tight-r2, -tight-r2-p6cols (v11: its kda_prep is the
#   discriminating figure), -tight-r2-longest, -v2-tight, -v2-tight-longest, each launch timed apart: kda_rec of one and two splits in both orders), PROBE_S (90: after the table;
#   0: no probe),
#   BUDGET_S (300: no scenario starts later), TABLE_S (380: the table's hard limit; what it finished is
#   on disk; with PROBE_S and the peers' restore the call stays under a 600 s command), CASES (e.g. H96),
#   REPS (50)
# A split genome launches two kernels and a workspace (family.launch returns both, family.workspace);
# the table's own audit launches one: until kda_fwd_table.py runs every launch with the workspace
# (fitness.device.as_launches), split genomes are left out here rather than crash the table.
# A fresh machine pays fla's Triton compile and autotune once per H (~111 s each in session 11):
# ~280 s of the call; with the cache carried, a few seconds.
set -o pipefail
. experiments/device/device_lib.sh
device_start >/dev/null || exit 1
# the peers' restore logs at the head of kda_fwd.log (the device returns at most 8 files from $OUT)
. experiments/device/kda_peers_build.sh > "$OUT/kda_fwd.log" 2>&1; grep -E "restored|ready|Triton cache|missing|not" "$OUT/kda_fwd.log"
GENOMES="${GENOMES:-split-bf16-tight-r2-p6cols,split-bf16-tight-r2,split-bf16-tight-r2-longest-p6cols,split-bf16-tight-r2-longest,split-bf16-v2-tight-p6cols,split-bf16-v2-tight,split-bf16-v2-tight-longest-p6cols,split-bf16-v2-tight-longest}"
if ! grep -q "as_launches" experiments/device/kda_fwd_table.py; then
    echo "kda_fwd_table.py launches one kernel per genome: split genomes left out of $GENOMES"
    GENOMES=$(echo "$GENOMES" | tr ',' '\n' | grep -v '^split' | paste -sd, -); GENOMES="default,${GENOMES}"
fi
timeout -s INT "${TABLE_S:-380}" python3 experiments/device/kda_fwd_table.py --out "$OUT/kda_fwd_h200" \
    --genomes "$GENOMES" --budget-s "${BUDGET_S:-300}" --reps "${REPS:-50}" \
    ${CASES:+--cases "$CASES"} >> "$OUT/kda_fwd.log" 2>&1
echo "table rc=$?"
grep -E '^\{"case"|^   |compiled|Error' "$OUT/kda_fwd.log" | cut -c1-260
[ -f "$OUT/kda_fwd_h200.md" ] && head -16 "$OUT/kda_fwd_h200.md"
if [ "${PROBE_S:-90}" != 0 ]; then      # (timeout 0 would mean no limit)
    timeout -s INT "${PROBE_S:-90}" python3 experiments/device/kda_prep_probe.py --out "$OUT/kda_prep_probe.json" \
        ${PROBE_GENOMES:+--genomes "$PROBE_GENOMES"} ${CASES:+--cases "$CASES"} > "$OUT/kda_prep_probe.log" 2>&1
    echo "probe rc=$?"; grep -E '^\{"case"|Error' "$OUT/kda_prep_probe.log" | cut -c1-260
fi
kda_triton_save
