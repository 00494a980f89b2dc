#!/usr/bin/env bash
# On the GPU machine: export a run's dispatch table, pip-install the package into a clean target
# (no factory on its path), run the package's own tests, then its benchmark script.
#   bash experiments/device/export_check.sh RUN OUTDIR [BENCH_JSON]
set -o pipefail
RUN=$1; OUTD=$2; BENCH=${3:-results/rmsnorm_fwd_h200.json}
mkdir -p "$OUTD"
rm -rf /tmp/pkg /tmp/pkgsite
# the playoff the dispatch table was chosen with (device_chain_c.sh, PLAYOFF_S > 0), if any
PLAYOFF=(); [ -f "${PLAYOFF_FILE:-/root/work/playoff.json}" ] && PLAYOFF=(--playoff "${PLAYOFF_FILE:-/root/work/playoff.json}")
python3 -m evo.cli export "$RUN" "${PLAYOFF[@]}" --out /tmp/pkg --bench "$BENCH" 2>&1 | tail -3 || exit 1
python3 -m pip install -q --no-deps --no-build-isolation --disable-pip-version-check --target /tmp/pkgsite /tmp/pkg 2>&1 | tail -3
cp -r /tmp/pkg/tests /tmp/pkgtests
# the factory is not importable from here: only the clean target (and the machine's torch/cupy)
(cd /tmp/pkgtests && env -u PYTHONPATH PYTHONPATH=/tmp/pkgsite python3 -m pytest -q -p no:cacheprovider --tb=short . 2>&1 | tail -40) \
    | tee "$OUTD/pkg_tests.log"
(cd /tmp && env -u PYTHONPATH PYTHONPATH=/tmp/pkgsite python3 -m ptxk_rmsnorm.bench --dtype all --out "$OUTD/pkg_bench.json" 2>&1 | tail -50) \
    | tee "$OUTD/pkg_bench.log"
