#!/usr/bin/env bash
# Issue 20 step 3's recorded search: $CONFIG (default experiments/kda_fwd_h200.toml; `evo run`, the gene
# space the config names (v11 as of session 22, its first population the 8 genomes of session 21's
# table, experiments/seeds/kda_fwd_v11.json), the worst of FlashKDA's six scenarios as the objective)
# on the H200, dumped after every step to $OUT/kda_fwd_h200_run.json.gz (copy it to results/:
# `evo run ... --replay` replays it on a CPU; tests/test_recorded_kda_run.py replays the committed ones
# with the config stored in each record).
#   carry: .whl .peers/flashkda_ext.tgz .peers/flashkda_ext.commit
#   STEP=a: FlashKDA restored and imported (exit 4 without it: the judge would stop the run), the
#           search started for SEARCH_S (480) seconds; STEP=b: the same run resumed for SEARCH_S more
#           (the machine must have stayed warm: the run lives in /root/work/runs)
#   CONFIG: the experiment config (a path in the checkout; STEP=b resumes with the run's own)
# fla is not the objective's baseline, so no Triton compile is paid here (kda_fwd_h200.sh times it).
set -o pipefail
. experiments/device/device_lib.sh
device_start >/dev/null || exit 1
. experiments/device/kda_peers_build.sh > "$OUT/kda_peers.log" 2>&1; grep -E "restored|ready|missing|not" "$OUT/kda_peers.log"
python3 - <<'PY' || exit 4
import sys
sys.path.insert(0, ".")
from fitness.family import load_family
ok = {b.name: b.available() for b in load_family("kda").baselines()}
print("baselines available:", ok)
sys.exit(0 if ok.get("flashkda") else 1)
PY
mkdir -p /root/work/runs
case "${STEP:-a}" in
a)
    timeout -s INT "${SEARCH_S:-480}" python3 -m evo.cli run "${CONFIG:-experiments/kda_fwd_h200.toml}" --quiet \
        --runs-dir /root/work/runs > "$OUT/kda_search_a.log" 2>&1
    echo "search rc=$?"; tail -3 "$OUT/kda_search_a.log"
    ls -dt /root/work/runs/*/ | head -1 > /root/work/kda_run_dir ;;
b)
    timeout -s INT "${SEARCH_S:-480}" python3 -m evo.cli resume "$(cat /root/work/kda_run_dir)" --quiet \
        > "$OUT/kda_search_b.log" 2>&1
    echo "search rc=$?"; tail -3 "$OUT/kda_search_b.log" ;;
esac
python3 -m evo.cli dump "$(cat /root/work/kda_run_dir)" --out "$OUT/kda_fwd_h200_run.json.gz" | tail -1
