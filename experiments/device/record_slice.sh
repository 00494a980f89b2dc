#!/usr/bin/env bash
# One device call of the dense slice's recording (issue 19): wheels from .whl/ (carry it), then
# experiments/device/record_slice.py for SESSION_S seconds (default 540), the dump back in $OUT.
# Copy $OUT/rmsnorm_fwd_slice_h200.json.gz to results/slice/, commit, call again until "whole".
set -euo pipefail
. experiments/device/device_lib.sh
install_wheels
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
python3 experiments/device/record_slice.py --config experiments/rmsnorm_fwd_slice_h200.toml \
    --dump results/slice/rmsnorm_fwd_slice_h200.json.gz --session-s "${SESSION_S:-540}" \
    --out "$OUT/rmsnorm_fwd_slice_h200.json.gz" 2>&1 | tail -n 40
