#!/usr/bin/env bash
# Device call B (see device_chain_a.sh): QuACK from the parked first wheel part and .whlq2/, the
# search resumed to its wall budget, then its dump and dispatch table (kept in /root/work for C).
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
if ls /root/q/*.part00 >/dev/null 2>&1 && [ -d .whlq2 ]; then
    name=$(basename /root/q/*.part00 .part00)
    cat /root/q/"$name".part00 .whlq2/"$name".part0[1-9] > /root/q/"$name" && rm /root/q/*.part00
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /root/q/*.whl \
        || echo "QuACK wheels did not install"
else
    echo "QuACK's first wheel part is not on this machine (it went cold between calls): no QuACK"
fi
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD
python3 -c "import quack.rmsnorm, liger_kernel; print('quack and liger import')" 2>&1 | tail -1
OUT=${OUT:-results/device}
mkdir -p "$OUT" /root/work
RUN=$(cat /root/work/run_dir 2>/dev/null || ls -dt runs/rmsnorm-fwd-h200-*/ | head -1)
timeout -s INT "${SEARCH_S:-380}" python3 -m evo.cli resume "$RUN" --quiet > "$OUT/search_b.log" 2>&1
tail -3 "$OUT/search_b.log"
python3 -m evo.cli status "$RUN" | tail -10
python3 -m evo.cli dump "$RUN" --out /root/work/rmsnorm_fwd_h200_run.json && cp /root/work/rmsnorm_fwd_h200_run.json "$OUT/"
python3 -m evo.cli dispatch "$RUN" --out /root/work/rmsnorm_dispatch.json | tail -40 && cp /root/work/rmsnorm_dispatch.json "$OUT/"
