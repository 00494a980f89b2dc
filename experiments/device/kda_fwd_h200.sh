#!/usr/bin/env bash
# Issue 20 in one call: FlashKDA's six scenarios on the H200, the template's genomes judged beside
# FlashKDA and fla (experiments/device/kda_fwd_table.py), $OUT/kda_fwd_h200.json + .md rewritten
# after every scenario (copy them to results/kda_fwd_h200.*), then Triton's cache saved for the
# next call (fla_triton.tgz[.partN]: copy into .peers/ and carry).
#   carry: .whl .peers/flashkda_ext.tgz .peers/flashkda_ext.commit [.peers/fla_triton.tgz or its parts]
#   GENOMES (split-bf16-v2,split-bf16,longest-first: v4's V split of kda_rec beside v3's split-bf16
#   measures the split over V alone, split-bf16 beside results/kda_fwd_h200.md's all-bf16 (the same
#   arithmetic fused; its session-12 times have IQRs under 0.5 %) the split pair alone; longest-first
#   stays because it won mixed/H64 (1.657 ms vs all-bf16's 1.818) and is the fused best there;
#   all-bf16 is dropped: split-bf16 covers its role (all-bf16's arithmetic, its fused twin's outputs
#   per tests/test_kda_gpu.py) and its fused times are on record. 3 genomes fit the one-call budget),
#   BUDGET_S (430: no scenario starts later), TABLE_S (530: the table's hard limit; what it finished is
#   on disk), CASES (e.g. H96), REPS (50)
# A split genome launches two kernels and a workspace (family.launch returns both, family.workspace);
# the table's own audit launches one: until kda_fwd_table.py runs every launch with the workspace
# (fitness.device.as_launches), split genomes are left out here rather than crash the table.
# A fresh machine pays fla's Triton compile and autotune once per H (~111 s each in session 11):
# ~280 s of the call; with the cache carried, a few seconds.
set -o pipefail
. experiments/device/device_lib.sh
device_start >/dev/null || exit 1
. experiments/device/kda_peers_build.sh > "$OUT/kda_peers.log" 2>&1; grep -E "restored|ready|Triton cache|missing|not" "$OUT/kda_peers.log"
GENOMES="${GENOMES:-split-bf16-v2,split-bf16,longest-first}"
if ! grep -q "as_launches" experiments/device/kda_fwd_table.py; then
    echo "kda_fwd_table.py launches one kernel per genome: split genomes left out of $GENOMES"
    GENOMES=$(echo "$GENOMES" | tr ',' '\n' | grep -v '^split' | paste -sd, -); GENOMES="default,${GENOMES}"
fi
timeout -s INT "${TABLE_S:-530}" python3 experiments/device/kda_fwd_table.py --out "$OUT/kda_fwd_h200" \
    --genomes "$GENOMES" --budget-s "${BUDGET_S:-430}" --reps "${REPS:-50}" \
    ${CASES:+--cases "$CASES"} > "$OUT/kda_fwd.log" 2>&1
echo "table rc=$?"
grep -E '^\{"case"|^   |compiled|Error' "$OUT/kda_fwd.log" | cut -c1-260
[ -f "$OUT/kda_fwd_h200.md" ] && head -16 "$OUT/kda_fwd_h200.md"
kda_triton_save
