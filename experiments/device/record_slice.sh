#!/usr/bin/env bash
# One device call of the dense slice's recording (issue 19): wheels from .whl/ (carry it), then
# experiments/device/record_slice.py for SESSION_S seconds (default 540), the dump back in $OUT.
# Copy $OUT/<the dump's name> (rmsnorm_fwd_slice_h200.json.gz unless SLICE_DUMP says otherwise) to
# results/slice/, commit, call again until "whole".
# On a host of several GPUs (nvidia-h200-x2/x4/x8) the judge runs one worker per GPU and the grid asks
# 8 genomes a GPU at once (GRID_BATCH overrides; 16 on one GPU, the config's).
set -euo pipefail
. experiments/device/device_lib.sh
install_wheels
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
# the GPUs the judge's workers will use: CUDA_VISIBLE_DEVICES' list when set (fitness/workers.py), else nvidia-smi's
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then GPUS=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c . || true)
else GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
[ "${GPUS:-0}" -gt 1 ] && GRID_BATCH=${GRID_BATCH:-$((8 * GPUS))}
echo "slice: ${GPUS:-0} GPU(s), grid batch ${GRID_BATCH:-of the config}"
# SLICE_CONFIG / SLICE_DUMP: another slice (e.g. experiments/rmsnorm_fwd_slice_fp16_h200.toml and its dump)
SLICE_CONFIG=${SLICE_CONFIG:-experiments/rmsnorm_fwd_slice_h200.toml}
SLICE_DUMP=${SLICE_DUMP:-results/slice/rmsnorm_fwd_slice_h200.json.gz}
python3 experiments/device/record_slice.py ${GRID_BATCH:+--grid-batch "$GRID_BATCH"} --config "$SLICE_CONFIG" \
    --dump "$SLICE_DUMP" --session-s "${SESSION_S:-540}" \
    --out "$OUT/$(basename "$SLICE_DUMP")" 2>&1 | tail -n 40
