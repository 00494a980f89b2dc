#!/usr/bin/env bash
# Build (or restore) INT21's RMSNorm-H100 extension on the device, once per machine.
# The checkout is carried in .peers/RMSNorm-H100 (git-ignored; kernels/rmsnorm/peers.py finds it).
# torch's cpp_extension keeps the build in $TORCH_EXTENSIONS_DIR (/root/tx here, which outlives the
# calls of a warm machine); a build carried back as .peers/int21_ext.tgz (made by a first call with
# SAVE=1 into $OUT) is unpacked instead of compiling again (~95 s), and torch reuses it when the
# sources' hash matches. Source it after device_start: `. experiments/device/peers_build.sh`.
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/root/tx}
mkdir -p "$TORCH_EXTENSIONS_DIR"
if [ -f .peers/int21_ext.tgz ] && [ -z "$(ls -A "$TORCH_EXTENSIONS_DIR")" ]; then
    tar -C "$TORCH_EXTENSIONS_DIR" -xzf .peers/int21_ext.tgz && echo "INT21 build restored from .peers/int21_ext.tgz"
fi
t0=$(date +%s)
INT21_OK=0
python3 - <<'PY' && INT21_OK=1 || echo "INT21 did not build: its baseline will be missing (carry .peers/RMSNorm-H100 and .peers/int21_ext.tgz in EVERY call: an ignored folder a call does not carry is gone from the machine)"
import sys, torch
sys.path.insert(0, ".")
from fitness.family import import_sibling
peers = import_sibling("kernels/rmsnorm/family.py", "peers")
m = peers.int21()
x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.ones(4096, device="cuda")
y, _, rstd = m.rmsnorm_fwd(x, w, eps=1e-6, store_rstd=True)
dx, dw, *_ = m.rmsnorm_bwd(x, w, torch.randn_like(x), rstd)
torch.cuda.synchronize()
print("INT21 forward and backward ran:", tuple(y.shape), tuple(dx.shape), tuple(dw.shape))
PY
[ "$INT21_OK" = 1 ] && echo "INT21 ready in $(( $(date +%s) - t0 )) s"
if [ -n "${SAVE:-}" ]; then
    tar -C "$TORCH_EXTENSIONS_DIR" -czf "$OUT/int21_ext.tgz" . && ls -la "$OUT/int21_ext.tgz"
fi
