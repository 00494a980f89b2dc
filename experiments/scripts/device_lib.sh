# Shared steps of the device scripts (source it: `. experiments/scripts/device_lib.sh`).
# The device has no network: wheels travel in the call's `carry` (.whl/, and QuACK's in .whlq1/
# and .whlq2/ over two back-to-back calls, because its 90 MB cutlass wheel is split in parts).

# the project's dependencies from .whl/ into /tmp/site
install_wheels() {
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
}

# first call: park QuACK's small wheels and the first part of the cutlass wheel (.whlq1/) in /root/q
park_quack_part1() {
    mkdir -p /root/q && { [ -d .whlq1 ] && cp .whlq1/* /root/q/ || true; }
}

# second call (within 30 s, while the machine is warm): join the parts with .whlq2/ and install
install_quack() {
    if ls /root/q/*.part00 >/dev/null 2>&1 && [ -d .whlq2 ]; then
        local name
        name=$(basename /root/q/*.part00 .part00)
        cat /root/q/"$name".part00 .whlq2/"$name".part0[1-9] > /root/q/"$name" && rm /root/q/*.part00
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /root/q/*.whl \
            || echo "QuACK wheels did not install"
    else
        echo "QuACK's first wheel part is not on this machine (it went cold between calls): no QuACK"
    fi
}

# PYTHONPATH for the repo, the carried wheels and (when installed) cutlass's DSL packages
device_pythonpath() {
    export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1
}

# the first steps of a call on a fresh or warm machine: wheels, PYTHONPATH, $OUT (default
# results/device), QuACK's first part parked, the GPU's name, driver and clocks in $OUT/env.txt
device_start() {
    install_wheels || return 1
    device_pythonpath
    OUT=${OUT:-results/device}
    mkdir -p "$OUT" /root/work && park_quack_part1
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/env.txt"
}
