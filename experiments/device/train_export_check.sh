#!/usr/bin/env bash
# Issue 17's training drop-in on the GPU machine, one call (carry .whl):
#   the forward run (default: the re-judged record) exported with a backward run into one package
#   (default: the recorded backward run when results/rmsnorm_bwd_h200_run.json.gz exists, else the
#   labelled STAND-IN that tests/bwd_standin.py builds here: two backward genomes compiled and
#   statically checked, never judged on a GPU), pip-installed into a clean target (no factory on its
#   path), then the package's own tests (training: gradcheck, opcheck, y/rstd/dx/dw against float64
#   on every dispatch range, torch.compile fullgraph, fallbacks, a training step; and the forward's)
#   and the factory's CPU export tests.
#   BWD_GENOMES=seeds.json[,more.json] (BWD_KEYS=k1,k2): the stand-in holds those genomes instead, so a
#   package is checked around genomes no recorded run holds yet (session 26: the pdl genomes of v11).
#   OUT=... bash experiments/device/train_export_check.sh [FWD_RUN] [BWD_RUN]
set -o pipefail
. experiments/device/device_lib.sh
device_start >/dev/null || exit 1
FWD=${1:-results/rejudge/rejudge_run.json.gz}
BWD=${2:-results/rmsnorm_bwd_h200_run.json.gz}
if [ -n "${BWD_GENOMES:-}" ]; then
    BWD=/root/work/bwd_standin.json
    python3 -m tests.bwd_standin "$BWD" --cache-dir /root/work/cache --genomes "$BWD_GENOMES" \
        ${BWD_KEYS:+--keys "$BWD_KEYS"} | tail -1 || exit 1
elif [ ! -f "$BWD" ]; then
    BWD=/root/work/bwd_standin.json
    python3 -m tests.bwd_standin "$BWD" --cache-dir /root/work/cache | tail -1
fi
rm -rf /tmp/tpkg /tmp/tpkgsite /tmp/tpkgtests
python3 -m evo.cli export "$FWD" --with "$BWD" --out /tmp/tpkg --cache-dir /root/work/cache 2>&1 | tail -2 || exit 1
python3 -m pip install -q --no-deps --no-build-isolation --disable-pip-version-check --target /tmp/tpkgsite /tmp/tpkg \
    2>&1 | tail -3
cp -r /tmp/tpkg/tests /tmp/tpkgtests && cp /tmp/tpkg/README.md "$OUT/train_pkg_README.md"
(cd /tmp/tpkgtests && env -u PYTHONPATH PYTHONPATH=/tmp/tpkgsite:/tmp/site timeout "${TESTS_S:-420}" \
    python3 -m pytest -q -p no:cacheprovider --tb=short -rs . 2>&1 | tail -60) | tee "$OUT/train_pkg_tests.log"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_export_training.py -k "not own_tests" 2>&1 | tail -3
