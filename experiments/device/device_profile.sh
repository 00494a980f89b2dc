#!/usr/bin/env bash
# One device call: where the judge spends its time (profile_judge.py), then the exported package
# checked on the GPU (export_check.sh). QuACK's first wheel part (.whlq1/, if carried) is left in
# /root/q for a following call.
set -o pipefail
. experiments/device/device_lib.sh
device_start || exit 1
timeout "${PROFILE_S:-260}" python3 experiments/scripts/profile_judge.py --reps 50 > "$OUT/profile.txt" 2>&1
tail -5 "$OUT/profile.txt"
timeout "${EXPORT_S:-200}" bash experiments/device/export_check.sh results/rmsnorm_fwd_h200_run.json "$OUT"
