#!/usr/bin/env bash
# Final pair of device calls, part 1: the GPU tests again (the timing loop gained the launch
# shield) and QuACK's first wheel part parked in /root/q for device_final_d2.sh.
set -o pipefail
. experiments/device/device_lib.sh
device_start || exit 1
EVO_RESULTS_DIR=$OUT timeout "${TESTS_S:-200}" python3 -m pytest -m gpu -q -p no:cacheprovider \
    tests/test_memfill.py tests/test_cheats_gpu.py > "$OUT/gpu_tests.log" 2>&1
tail -4 "$OUT/gpu_tests.log"
