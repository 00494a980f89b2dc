#!/usr/bin/env bash
# Device call A of three back-to-back calls (the machine stays warm 30 s between them):
#   A  judge checks on the GPU (STEPS: memfill + cheat suite, stopping here if they fail; where
#      the judge's time goes, profile_judge.py; its throughput), then the first part of the search
#      (SIGINT after SEARCH_S: the run is resumed in call B). QuACK's first wheel part is parked.
#   B  device_chain_b.sh: QuACK installed, the search resumed to its wall budget, dump + dispatch.
#   C  device_chain_c.sh: the final table beside every baseline, the exported package checked.
#   Carry: A .whl .whlq1; B .whlq2; C .whlq3 (64 MiB per call with the working tree, 18 MiB in
#   session 7: .whl and .whlq2 together no longer fit; B and C find .whl installed by A while the
#   machine stays warm, and install_wheels skips it).
set -o pipefail
. experiments/device/device_lib.sh
device_start || exit 1
# STEPS picks the judge checks to run before the search (default: all three)
STEPS=${STEPS:-"tests profile throughput"}
if [[ $STEPS == *tests* ]]; then
    EVO_RESULTS_DIR=$OUT timeout "${TESTS_S:-240}" python3 -m pytest -m gpu -q -x -p no:cacheprovider \
        tests/test_memfill.py tests/test_cheats_gpu.py > "$OUT/gpu_tests.log" 2>&1
    rc=$?; tail -4 "$OUT/gpu_tests.log"
    [ $rc -eq 0 ] || { echo "GPU tests failed (rc $rc): no search"; exit 3; }
fi
if [[ $STEPS == *profile* ]]; then
    timeout "${PROFILE_S:-120}" python3 experiments/scripts/profile_judge.py --reps 50 > "$OUT/profile.txt" 2>&1
    grep -E "^CHECK|^round 2|^whole" "$OUT/profile.txt"
fi
if [[ $STEPS == *throughput* ]]; then
    timeout "${THROUGHPUT_S:-150}" python3 experiments/scripts/throughput.py --genomes "${THROUGHPUT_GENOMES:-16}" \
        --out "$OUT/throughput.json" > "$OUT/throughput.log" 2>&1
    tail -22 "$OUT/throughput.log" | grep -E "verified|per_|wall|gpu_seconds|candidates"
fi
timeout -s INT "${SEARCH_S:-240}" python3 -m evo.cli run "${CONFIG:-experiments/rmsnorm_fwd_h200.toml}" --quiet \
    > "$OUT/search_a.log" 2>&1
tail -3 "$OUT/search_a.log"
RUN=$(ls -dt runs/rmsnorm-fwd-h200-*/ | head -1); echo "$RUN" > /root/work/run_dir
python3 -m evo.cli status "$RUN" | tail -8
