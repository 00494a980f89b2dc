#!/usr/bin/env bash
# Rebuild the git-ignored carry folders of a fresh checkout (run here, with a network, before the first
# device call; session 31 did these steps by hand in ~3 minutes):
#   .whl             the project's dependencies the device image lacks (CPython 3.12 wheels, ~7 MiB)
#   .whlq1-.whlq4    QuACK 0.6.5, its cutlass-dsl 4.8.1 wheels and Liger 0.8.5: the 92 MB cu13 wheel cut into
#                    27, 30 and 30 MiB and the rest (device_lib.sh's install_quack joins WHEEL.part00-03, the
#                    count in WHEEL.nparts), the small wheels and the last part in .whlq4 (~11 MiB)
#   .peers/RMSNorm-H100   `git archive HEAD` of INT21's repository, given as a git directory (INT21_GIT: the
#                    path the `fetch` tool returns for github:Int21-AI/RMSNorm-H100); skipped without it
# .peers/int21_ext.tgz is not made here: a first device call with SAVE=1 returns INT21's build (peers_build.sh).
#   bash experiments/device/make_carry.sh                      (INT21_GIT=/work/.mirror/Int21-AI+RMSNorm-H100/repo)
set -euo pipefail
cd "$(dirname "$0")/../.."
WHEELHOUSE=${WHEELHOUSE:-/work/shared/tools/wheelhouse.sh}
[ -f "$WHEELHOUSE" ] || { echo "make_carry.sh: no wheelhouse.sh at $WHEELHOUSE (set WHEELHOUSE)"; exit 2; }

if [ ! -d .whl ]; then
    bash "$WHEELHOUSE" .whl deap==1.4.3 optuna cmaes SQLAlchemy greenlet alembic Mako MarkupSafe colorlog fla-core==0.6.0
fi

if [ ! -d .whlq4 ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    SPLIT_MB=1000 bash "$WHEELHOUSE" "$tmp/w" quack-kernels==0.6.5 nvidia-cutlass-dsl==4.8.1 \
        nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 \
        liger-kernel==0.8.5 "apache-tvm-ffi<0.2,>=0.1.6" torch-c-dlpack-ext
    big=$(ls "$tmp"/w/nvidia_cutlass_dsl_libs_cu13-*.whl)
    name=$(basename "$big")
    mkdir -p .whlq1 .whlq2 .whlq3 .whlq4
    dd if="$big" of=".whlq1/$name.part00" bs=1M count=27 status=none
    dd if="$big" of=".whlq2/$name.part01" bs=1M skip=27 count=30 status=none
    dd if="$big" of=".whlq3/$name.part02" bs=1M skip=57 count=30 status=none
    dd if="$big" of=".whlq4/$name.part03" bs=1M skip=87 status=none
    echo 4 > ".whlq4/$name.nparts"
    cat .whlq[1-4]/"$name".part0* | cmp - "$big"
    rm "$big"
    cp "$tmp"/w/*.whl .whlq4/
fi

if [ ! -d .peers/RMSNorm-H100 ] && [ -n "${INT21_GIT:-}" ]; then
    mkdir -p .peers/RMSNorm-H100
    git --git-dir="$INT21_GIT" archive HEAD | tar -x -C .peers/RMSNorm-H100
fi
du -sh .whl .whlq1 .whlq2 .whlq3 .whlq4 .peers/* 2>/dev/null || true
