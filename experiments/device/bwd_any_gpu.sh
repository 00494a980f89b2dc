#!/usr/bin/env bash
# A first call that is worth its start on either GPU: a call that names the H200 kind may get an H100
# (sessions 25-27 did). On an H200: bwd_search.sh's STEP=a (the search of experiments/rmsnorm_bwd_h200.toml
# started; SEARCH_S). On anything else (an H100): first, if ELSE_PROBE is set, a probe of its genomes (PROBE_S;
# judged 4 at a time, so that a call's time limit keeps the batches done); then a new H100 search
# (experiments/rmsnorm_bwd_h100.toml, STEP=a GPU_TAG=h100, SEARCH_S), whose seeds carry the last H100 run's verified
# verdicts from results/rmsnorm_bwd_h100_run.json.gz (search.carry_seeds: no GPU time for them) and judge the
# rest, its suspects judged again (search.seed_suspects); then (TRAIN_GENOMES set) the training
# package checked around those backward genomes (train_export_check.sh with a labelled stand-in record), then
# (NCU_CALLS set) Nsight Compute on those launches (bwd_ncu.sh: CALLS=NCU_CALLS, SEEDS=ELSE_PROBE).
# A line (after the ceiling test's) says which GPU_TAG the later calls pass to bwd_search.sh (with REQUIRE_GPU, upper case).
# Carry .whl .whlq4 .peers/RMSNorm-H100 .peers/int21_ext.tgz (INT21 restored; the QuACK parts .whlq1-3 follow
# in the search's later calls, bwd_search.sh's header).
#   SEARCH_S=330 bash experiments/device/bwd_any_gpu.sh      (CEILING_S=0: without the ceiling test first;
#   GPU_TESTS_K=v14: tests/test_rmsnorm_bwd_gpu.py -k v14 after it)
set -o pipefail
# First, on either GPU (CEILING_S, default 90; 0: skip): the judge's streaming ceiling against torch.add's own
# speed (tests/test_copy_ceiling_gpu.py, its figures by pattern printed): the suspect test depends on it, and
# sessions 27-28 flagged verified genomes as fast as the add because the ceiling came out below it.
if [ "${CEILING_S:-90}" -gt 0 ]; then
    (. experiments/device/device_lib.sh && install_wheels && device_pythonpath \
        && timeout "${CEILING_S:-90}" python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/test_copy_ceiling_gpu.py) \
        > "$OUT/ceiling_test.log" 2>&1
    echo "ceiling test rc=$?: $(grep -oE 'ceiling [0-9].*TB/s|[0-9]+ (passed|failed).*' "$OUT/ceiling_test.log" | tr '\n' ' ' | cut -c1-400)"
fi
# Then (GPU_TESTS_K set, e.g. v14) the family's GPU tests of that -k expression, INT21 restored first (GPU_TESTS_S,
# default 200): a new gene's twins checked bit for bit on the machine before its search judges them.
if [ -n "${GPU_TESTS_K:-}" ]; then
    (. experiments/device/device_lib.sh && install_wheels && . experiments/device/peers_build.sh && device_pythonpath \
        && timeout "${GPU_TESTS_S:-200}" python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/test_rmsnorm_bwd_gpu.py \
            -k "$GPU_TESTS_K") > "$OUT/gpu_tests.log" 2>&1
    echo "GPU tests (-k $GPU_TESTS_K) rc=$?: $(grep -oE '[0-9]+ (passed|failed|skipped|error).*' "$OUT/gpu_tests.log" | tail -1 | cut -c1-200)"
fi
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    echo "GPU_TAG=h200: the search's first call"
    SNAP=${SNAP:-.} GPU_TAG=h200 STEP=a TESTS_S=0 PROFILE_S=0 SEARCH_S=${SEARCH_S:-330} bash experiments/device/bwd_search.sh
    exit $?
fi
echo "GPU_TAG=h100: not an H200 ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)): the H100 search"
rc=0
if [ -n "${ELSE_PROBE:-}" ]; then
    SNAP=${SNAP:-.} STEP=a TESTS_S=0 PROFILE_S=0 PROBE=$ELSE_PROBE PROBE_S=${PROBE_S:-200} SEARCH_S=0 \
        bash experiments/device/bwd_search.sh || rc=$?
fi
if [ "${SEARCH_S:-330}" -gt 0 ]; then
    SNAP=${SNAP:-.} GPU_TAG=h100 REQUIRE_GPU=H100 STEP=a TESTS_S=0 PROFILE_S=0 SEARCH_S=${SEARCH_S:-330} \
        bash experiments/device/bwd_search.sh || rc=$?
fi
if [ -n "${TRAIN_GENOMES:-}" ]; then
    BWD_GENOMES=$TRAIN_GENOMES BWD_KEYS=${TRAIN_KEYS:-} TESTS_S=${TRAIN_S:-150} \
        timeout $((${TRAIN_S:-150} + 60)) bash experiments/device/train_export_check.sh > "$OUT/train_check.log" 2>&1
    echo "training drop-in check rc=$?"; grep -E "passed|failed|error" "$OUT/train_check.log" | tail -5
fi
if [ -n "${NCU_CALLS:-}" ]; then
    CALLS=$NCU_CALLS SEEDS=$ELSE_PROBE NCU_S=${NCU_S:-200} bash experiments/device/bwd_ncu.sh || rc=$?
fi
. experiments/device/device_lib.sh && out_within_limit
exit $rc
