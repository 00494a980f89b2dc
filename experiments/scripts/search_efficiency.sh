#!/usr/bin/env bash
# The race and the warm start of issue 19, from a recorded slice (CPU only; ~20-40 min on 2 cores).
#
#   bash experiments/scripts/search_efficiency.sh                      # the SYNTHETIC slice (labelled so)
#   SLICE=results/slice/rmsnorm_fwd_slice_h200.json.gz LESSONS=LESSONS.json HOLDOUT=bf16/long \
#       bash experiments/scripts/search_efficiency.sh                  # the H200 slice, once recorded
#
# Synthetic: the slice comes from tests/data/make_synthetic_slice.py, and ga+lessons uses lessons
# built from a GA run replayed on another synthetic recording (tests/data/synthetic_table.csv):
# an earlier run of the same family, not the slice itself. On the H200 slice, pass LESSONS built
# from earlier H200 runs of the same space version (evo lessons build ... ; evo lessons export).
set -euo pipefail
OUT=${OUT_DIR:-results}
TMP=$(mktemp -d)
SEEDS=${SEEDS:-20}
if [ -z "${SLICE:-}" ]; then
    SLICE=$TMP/synthetic_slice.json.gz
    python3 tests/data/make_synthetic_slice.py --out "$SLICE"
    evo run experiments/synthetic_replay.toml --runs-dir "$TMP/runs" --evaluations 200 > /dev/null
    evo dump "$(ls -d "$TMP"/runs/*)" --out "$TMP/earlier_run.json.gz" > /dev/null
    evo lessons build "$TMP/earlier_run.json.gz" --store "sqlite:///$TMP/lessons.db" > /dev/null
    evo lessons export --store "sqlite:///$TMP/lessons.db" --out "$TMP/lessons.json" > /dev/null
    LESSONS=$TMP/lessons.json
    HOLDOUT=${HOLDOUT:-long}
fi
evo slice race "$SLICE" --out "$OUT/search_efficiency" --seeds "$SEEDS" --budget "${BUDGET:-300}" \
    ${LESSONS:+--lessons "$LESSONS"}
evo slice warm-start "$SLICE" --out "$OUT/warm_start" --holdout "$HOLDOUT" --seeds "${WARM_SEEDS:-10}" \
    --budget "${BUDGET:-300}"
rm -rf "$TMP"
