#!/usr/bin/env bash
# Final pair of device calls, part 1: the GPU tests again (the timing loop gained the launch
# shield) and QuACK's first wheel part parked in /root/q for device_final_d2.sh.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-results/device}
mkdir -p "$OUT" /root/q && cp .whlq1/* /root/q/
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/env.txt"
EVO_RESULTS_DIR=$OUT timeout "${TESTS_S:-200}" python3 -m pytest -m gpu -q -p no:cacheprovider \
    tests/test_memfill.py tests/test_cheats_gpu.py > "$OUT/gpu_tests.log" 2>&1
tail -4 "$OUT/gpu_tests.log"
