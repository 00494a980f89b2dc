#!/usr/bin/env bash
# Issue 21 on the GPU machine: the Ray pool's candidates per GPU-minute against the local pool's,
# the same genomes judged with the search's settings (experiments/rmsnorm_fwd_h200.toml: 33 cases,
# its hopeless cut), compiled before either is timed. Two back-to-back calls (the machine stays
# warm 30 s between them), because Ray's wheel (76 MiB) does not fit one call beside the tree:
#
#   STEP=A  carry .whl .whlr-part1   the project's wheels; Ray's first wheel part parked in /root/r;
#                                    the LOCAL pool judges GENOMES genomes -> $OUT/ray_local.json
#   STEP=B  carry .whlr .whlr-part2  Ray's wheel joined and installed with the dependencies the image
#                                    lacks (.whlr: jsonschema, referencing, ...); the RAY pool (one
#                                    actor, num_gpus=1) judges the same genomes -> $OUT/ray_h200.json,
#                                    with the comparison against call A's file
#   STEP=C  (a machine of 2 GPUs, after A and B there) the Ray pool on 1 then 2 GPUs -> $OUT/ray_2gpu.json
#
# Then, here: python experiments/scripts/ray_scaling.py merge --device FILES_AT/ray_h200.json
# (and ray_2gpu.json), which fills single_h200 (scaling_2gpu) in results/ray_scaling.json/.md.
# Wheels (git-ignored, for CPython 3.12): `SPLIT_MB=80 bash /work/shared/tools/wheelhouse.sh .whlr
# ray==2.60.0 jsonschema referencing jsonschema-specifications rpds-py`, then the Ray wheel cut in two
# (38 MiB + 37.6 MiB, so that call A's .whl + .whlr-part1 + the tree stay under 64 MiB):
# `split -b 38M -d W W.part` (W: the wheel file name, kept in the parts) and W.part00 into
# .whlr-part1/, W.part01 into .whlr-part2/ (the wheel itself out of .whlr/).
set -o pipefail
. experiments/device/device_lib.sh
STEP=${STEP:-A}
GENOMES=${GENOMES:-4}
mkdir -p /root/r /root/work
device_start || exit 1
case $STEP in
A)
    for d in .whlr-part*; do [ -d "$d" ] && cp "$d"/* /root/r/; done
    echo "Ray wheel parts parked: $(ls /root/r | grep -c part)"
    timeout "${JUDGE_S:-200}" python3 experiments/scripts/ray_scaling.py device --pool local --genomes "$GENOMES" \
        --out /root/work/ray_local.json > "$OUT/ray_local.log" 2>&1
    echo "local pool rc=$?"; tail -25 "$OUT/ray_local.log"
    cp /root/work/ray_local.json "$OUT/" 2>/dev/null
    ;;
B|C)
    for d in .whlr-part*; do [ -d "$d" ] && cp "$d"/* /root/r/; done
    if ! python3 -c "import ray" 2>/dev/null; then
        first=$(ls /root/r/*.part00 2>/dev/null | head -1)
        [ -n "$first" ] || { echo "no Ray wheel part on this machine (it went cold after call A): run A again"; exit 3; }
        name=$(basename "$first" .part00)
        cat /root/r/"$name".part0[0-9] > /root/r/"$name" || exit 3
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
            /root/r/"$name" .whlr/*.whl || { echo "Ray did not install"; exit 3; }
    fi
    python3 -c "import ray; print('ray', ray.__version__)" || exit 3
    if [ "$STEP" = B ]; then
        [ -f /root/work/ray_local.json ] || { echo "no local-pool file from call A on this machine: run A again"; exit 3; }
        timeout "${JUDGE_S:-240}" python3 experiments/scripts/ray_scaling.py device --pool ray --genomes "$GENOMES" \
            --compare /root/work/ray_local.json --out "$OUT/ray_h200.json" > "$OUT/ray_h200.log" 2>&1
        echo "ray pool rc=$?"; tail -40 "$OUT/ray_h200.log"
    else
        timeout "${JUDGE_S:-240}" python3 experiments/scripts/ray_scaling.py device --pool ray --genomes "$GENOMES" \
            --gpus 1 --out /root/work/ray_1gpu.json > "$OUT/ray_1gpu.log" 2>&1
        echo "ray pool, 1 GPU rc=$?"
        timeout "${JUDGE_S:-240}" python3 experiments/scripts/ray_scaling.py device --pool ray --genomes "$GENOMES" \
            --gpus 2 --compare /root/work/ray_1gpu.json --out "$OUT/ray_2gpu.json" > "$OUT/ray_2gpu.log" 2>&1
        echo "ray pool, 2 GPUs rc=$?"; tail -40 "$OUT/ray_2gpu.log"
        cp /root/work/ray_1gpu.json "$OUT/" 2>/dev/null
    fi
    ;;
*)
    echo "STEP must be A, B or C"; exit 2
    ;;
esac
