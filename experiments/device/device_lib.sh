# Shared steps of the device scripts (source it: `. experiments/device/device_lib.sh`).
# The device has no network: wheels travel in the call's `carry` (.whl/, and QuACK's in .whlq1/,
# .whlq2/ and .whlq3/ over three back-to-back calls: a call carries at most 64 MiB with the working
# tree, and the 92 MB cutlass wheel is split in parts .part00, .part01, .part02: since session 7
# `split -b 36M -d -a 2 WHEEL WHEEL.part` puts 36 MiB in .whlq1 and .whlq2 and the rest in .whlq3,
# so that call A's .whl + .whlq1 fit beside an 18 MiB tree; since session 11 three parts of ~30 MiB,
# and .whlq3 also holds nvidia_cutlass_dsl_libs_core-4.8.1 (cutlass.cutlass_dsl itself: session 12's
# tables ran without QuACK for want of it). Since session 25 (a 29 MiB tree, and the limit counts disk
# blocks) four parts (27, 30, 30 MiB and the rest, .whlq1-.whlq4) and WHEEL.nparts in .whlq4 saying 4.

# the project's dependencies from .whl/ into /tmp/site
install_wheels() {
    if [ ! -d .whl ] && python3 -c "import sys; sys.path.insert(0, '/tmp/site'); import deap, optuna" 2>/dev/null; then
        return 0     # not carried this call, installed by an earlier one
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
}

# every call: park the QuACK wheels and wheel parts it carries (.whlq*/) in /root/q, where they
# wait for the other parts while the machine stays warm
park_quack_parts() {
    mkdir -p /root/q && for d in .whlq*; do [ -d "$d" ] && cp "$d"/* /root/q/; done; true
}

# once every part is parked: join the cutlass wheel and install QuACK with its dependencies
install_quack() {
    park_quack_parts
    local first name
    first=$(ls /root/q/*.part00 2>/dev/null | head -1)
    if [ -z "$first" ]; then
        python3 -c "import quack" 2>/dev/null || echo "no QuACK parts on this machine (it went cold between calls): no QuACK"
        return 0
    fi
    name=$(basename "$first" .part00)
    local parts=3 i     # WHEEL.nparts (in the last folder) names the count when the wheel is cut in more
    [ -s /root/q/"$name".nparts ] && parts=$(cat /root/q/"$name".nparts)
    for ((i = 1; i < parts; i++)); do
        if [ ! -e "$(printf '/root/q/%s.part%02d' "$name" "$i")" ]; then
            echo "QuACK: $(ls /root/q | grep -c 'part[0-9]') of $parts cutlass wheel parts parked so far"
            return 0
        fi
    done
    cat /root/q/"$name".part0[0-9] > /root/q/"$name" && rm /root/q/*.part0[0-9]
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /root/q/*.whl \
        && echo "QuACK installed" || echo "QuACK wheels did not install"
}

# QuACK's autotuner keeps each shape's timings in $QUACK_CACHE_DIR/<hash>/<fn>.autotune.json and
# does not autotune a shape it finds there (23-29 s per shape otherwise). results/quack_autotune/
# holds what an earlier session's passes wrote on this GPU (bench_rmsnorm.py counts the entries
# before and after each pass, and the table says so); restore it before a pass, save after.
quack_autotune_restore() {
    export QUACK_CACHE_DIR=${QUACK_CACHE_DIR:-/tmp/quack_cache}
    mkdir -p "$QUACK_CACHE_DIR"
    [ -d results/quack_autotune ] && cp -rn results/quack_autotune/. "$QUACK_CACHE_DIR"/
    echo "QuACK autotune cache: $(find "$QUACK_CACHE_DIR" -name '*.autotune.json' | wc -l) shapes in $QUACK_CACHE_DIR"
}
# One archive, not a folder: the device returns at most 8 files from $OUT (session 8's folder of
# 24 shapes came back with 2), and QuACK's cache dir also holds ~50 MB of compiled objects that
# must stay behind. Unpack it here into results/quack_autotune/ and commit that.
quack_autotune_save() {    # into $OUT/quack_autotune.tgz
    [ -d "${QUACK_CACHE_DIR:-}" ] || return 0
    mkdir -p "$OUT"
    (cd "$QUACK_CACHE_DIR" && find . -name '*.autotune.json' -print0 | tar -czf "$OUT/quack_autotune.tgz" --null -T -)
    echo "QuACK autotune cache saved: $(tar -tzf "$OUT/quack_autotune.tgz" | grep -c 'autotune.json$') shapes in $OUT/quack_autotune.tgz (tar -xzf it into results/quack_autotune/)"
}

# Stop the call early when a peer it needs is missing: `require_peers int21 quack` prints one line
# per peer and returns 4 when any cannot be imported (session 12 timed 28 evaluations and two tables
# without INT21 and QuACK: the checkout was not carried again, a cutlass wheel was missing).
# int21 needs peers_build.sh sourced first (EVO_INT21_ROOT); quack needs install_quack first.
require_peers() {
    local missing=0 name
    for name in "$@"; do
        if python3 - "$name" <<'PY'
import importlib, sys
name = sys.argv[1]
try:
    if name == "int21":
        sys.path.insert(0, ".")
        from fitness.family import import_sibling
        import_sibling("kernels/rmsnorm/family.py", "peers").int21()
    elif name == "quack":
        importlib.import_module("cutlass.cutlass_dsl"); importlib.import_module("quack")
    else:
        importlib.import_module({"liger": "liger_kernel", "fla": "fla"}.get(name, name))
except Exception as exc:
    print(f"peer {name}: MISSING ({type(exc).__name__}: {str(exc).strip()[:200]})")
    sys.exit(1)
print(f"peer {name}: ok")
PY
        then :; else missing=4; fi
    done
    return $missing
}

# PYTHONPATH for the repo, the carried wheels and (when installed) cutlass's DSL packages
device_pythonpath() {
    export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1
}

# the first steps of a call on a fresh or warm machine: wheels, PYTHONPATH, $OUT (default
# results/device), the QuACK parts it carries parked, the GPU's name, driver and clocks in $OUT/env.txt
device_start() {
    install_wheels || return 1
    device_pythonpath
    OUT=${OUT:-results/device}
    mkdir -p "$OUT" /root/work && park_quack_parts
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/env.txt"
    # REQUIRE_GPU=H200: stop here (exit status 5) on any other GPU. A call that names a kind may get an H100
    # or an H200 (session 25's nvidia-h200 call ran on an H100), and a table for one GPU must not be timed on another.
    if [ -n "${REQUIRE_GPU:-}" ] && ! tail -n +2 "$OUT/env.txt" | grep -q -- "$REQUIRE_GPU"; then
        echo "REQUIRE_GPU=$REQUIRE_GPU, but this machine has: $(tail -n +2 "$OUT/env.txt" | cut -d, -f1 | sort -u | tr '\n' ' ')" >&2
        return 5
    fi
}

# The dispatch playoff (`evo playoff`) for the run in /root/work: the near-tied genomes of each
# width judged again side by side for at most PLAYOFF_S seconds, then the dispatch table rebuilt
# with its winners (/root/work/rmsnorm_dispatch.json; export_check.sh picks up the playoff file).
dispatch_playoff() {
    local run; run=$(cat /root/work/run_dir)
    timeout "$((PLAYOFF_S + 90))" python3 -m evo.cli playoff /root/work/rmsnorm_fwd_h200_run.json \
        --margin "${PLAYOFF_MARGIN:-0.02}" --repeats "${PLAYOFF_REPEATS:-3}" --max-s "$PLAYOFF_S" \
        --out /root/work/playoff > /root/work/playoff.log 2>&1
    echo "playoff rc=$?"; tail -2 /root/work/playoff.md 2>/dev/null
    [ -f /root/work/playoff.json ] || return 0
    python3 -m evo.cli dispatch "$run" --playoff /root/work/playoff.json --out /root/work/rmsnorm_dispatch.json | tail -40
    # one archive: a call returns at most 8 files and call C already writes 7
    tar -C /root/work -czf "$OUT/playoff.tgz" playoff.json playoff.md playoff.log rmsnorm_dispatch.json
}

# The device returns at most 8 files from $OUT (more: "count", and those files are lost: session 27's probe log).
# Called at the end of a script that may write more: with more than 8 files under $OUT, the 7 largest stay as they
# are and the rest go into one archive, $OUT/more_files.tgz (or more_files_2.tgz, ... if that name is taken),
# small since the small files go there; with 8 or fewer nothing changes.
out_within_limit() {
    local n archive list k=1
    n=$(find "$OUT" -type f | wc -l)
    [ "$n" -le 8 ] && return 0
    archive=more_files.tgz
    while [ -e "$OUT/$archive" ]; do k=$((k + 1)); archive=more_files_$k.tgz; done
    list=$(mktemp)
    (cd "$OUT" && find . -type f -printf '%s %P\n' | sort -k1,1nr | tail -n +8 | cut -d' ' -f2- > "$list" \
        && tar czf "$archive" --remove-files --verbatim-files-from -T "$list") || { rm -f "$list"; return 1; }
    echo "$n files under \$OUT, more than the 8 a call returns: the 7 largest as they are, $(wc -l < "$list") in \$OUT/$archive"
    rm -f "$list"
}
