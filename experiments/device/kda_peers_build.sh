#!/usr/bin/env bash
# KDA's peers on the device, restored rather than rebuilt: source it after device_start
# (`. experiments/device/kda_peers_build.sh`).
#
# FlashKDA: the tarball of the TORCH_EXTENSIONS_DIR a first build made (.peers/flashkda_ext.tgz,
# 7 MB; session 11's, FlashKDA 1ce47ea + its CUTLASS, torch 2.11, CUDA 13) is unpacked into
# $TORCH_EXTENSIONS_DIR and its flashkda_peer_C.so named by EVO_FLASHKDA_PREBUILT: imported as it
# is (kernels/kda/peers.py), no checkout needed, no 113 s build. Without the tarball a carried
# checkout (.peers/FlashKDA, 29 MB with CUTLASS) is built as before (SAVE=1 then writes the new
# tarball to $OUT/flashkda_ext.tgz).
#
# fla: its first call at each H compiles and autotunes its Triton kernels (111 s at H96 in
# session 11, again at H64). fla asks Triton to keep autotune results on disk (cache_results), so
# Triton's cache dir holds both the compiled kernels and the autotune choices: kept in
# $TRITON_CACHE_DIR (/root/triton_cache: the same path every call, the cache's index names
# absolute paths), restored from .peers/fla_triton.tgz (or its parts .peers/fla_triton.tgz.part*)
# when carried, saved by `kda_triton_save` (call it at the end of the call) into $OUT.
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/root/tx}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/root/triton_cache}
export FLA_FLASH_KDA=0
mkdir -p "$TORCH_EXTENSIONS_DIR" "$TRITON_CACHE_DIR"
_so="$TORCH_EXTENSIONS_DIR/flashkda_peer_C/flashkda_peer_C.so"
if [ ! -f "$_so" ] && [ -f .peers/flashkda_ext.tgz ]; then
    tar -C "$TORCH_EXTENSIONS_DIR" -xzf .peers/flashkda_ext.tgz && echo "FlashKDA build restored from .peers/flashkda_ext.tgz"
fi
if [ -f "$_so" ]; then
    export EVO_FLASHKDA_PREBUILT="$_so"
else
    echo "no FlashKDA build carried: building from .peers/FlashKDA if it is there (minutes)"
fi
[ -f .peers/flashkda_ext.commit ] && export EVO_FLASHKDA_COMMIT="$(cat .peers/flashkda_ext.commit)"
[ -d .peers/FlashKDA ] && export EVO_FLASHKDA_ROOT="$PWD/.peers/FlashKDA"
if [ -z "$(ls -A "$TRITON_CACHE_DIR")" ]; then
    if ls .peers/fla_triton.tgz.part* >/dev/null 2>&1; then
        cat .peers/fla_triton.tgz.part* | tar -C "$TRITON_CACHE_DIR" -xzf - && echo "Triton cache restored from parts"
    elif [ -f .peers/fla_triton.tgz ]; then
        tar -C "$TRITON_CACHE_DIR" -xzf .peers/fla_triton.tgz && echo "Triton cache restored"
    fi
fi
echo "Triton cache: $(find "$TRITON_CACHE_DIR" -name '*.autotune.json' | wc -l) autotune results, $(find "$TRITON_CACHE_DIR" -name '*.cubin' | wc -l) kernels"
t0=$(date +%s)
python3 - <<'PY' || echo "FlashKDA did not load: its baseline will be missing"
import sys, time
sys.path.insert(0, ".")
from fitness.family import import_sibling
peers = import_sibling("kernels/kda/family.py", "peers")
why = peers.missing()
if why:
    raise SystemExit(f"FlashKDA: {why}")
t0 = time.perf_counter()
m = peers.flashkda()
print(f"FlashKDA ready ({'prebuilt' if peers.prebuilt() else 'built'}, commit {peers.commit()}) in "
      f"{time.perf_counter() - t0:.1f} s; workspace for T=8192 H=96 N=1: {m.get_workspace_size(8192, 96, 1)} B")
PY
python3 -c "import importlib.metadata as m; from fla.ops.kda import chunk_kda; print('fla', m.version('fla-core'), 'imports')" \
    || echo "fla does not import: its baseline will be missing"
echo "KDA peers ready in $(( $(date +%s) - t0 )) s"
if [ -n "${SAVE:-}" ] && [ -z "${EVO_FLASHKDA_PREBUILT:-}" ] && [ -d "$TORCH_EXTENSIONS_DIR/flashkda_peer_C" ]; then
    tar -C "$TORCH_EXTENSIONS_DIR" -czf "$OUT/flashkda_ext.tgz" flashkda_peer_C && ls -la "$OUT/flashkda_ext.tgz"
fi

# Triton's cache into $OUT: fla_triton.tgz without the intermediate IR (ttir, ttgir, llir,
# source: the cubins, PTX, metadata and autotune results are what a cache hit reads), split into
# 15 MiB parts when larger (a returned file is at most 16 MiB), the autotune results alone when
# over 2 parts: a call carries 64 MiB, and the tree (~15 MiB), .whl (7 MiB) and the FlashKDA
# build (7 MiB) leave room for two. Copy them into .peers/ here and carry them next time.
kda_triton_save() {
    [ -d "$TRITON_CACHE_DIR" ] || return 0
    mkdir -p "$OUT"
    tar -C "$TRITON_CACHE_DIR" --exclude='*.ttir' --exclude='*.ttgir' --exclude='*.llir' --exclude='*.source' \
        -czf /tmp/fla_triton.tgz .
    local size; size=$(stat -c %s /tmp/fla_triton.tgz)
    if [ "$size" -gt $((30 * 1024 * 1024)) ]; then     # more than 2 parts: the autotune results alone
        (cd "$TRITON_CACHE_DIR" && find . -name '*.autotune.json' -print0 | tar -czf /tmp/fla_triton.tgz --null -T -)
        size=$(stat -c %s /tmp/fla_triton.tgz)
        echo "Triton cache over 30 MiB compressed: saving the autotune results only (kernels compile again, once each)"
    fi
    if [ "$size" -gt $((15 * 1024 * 1024)) ]; then
        split -b 15M -d -a 1 /tmp/fla_triton.tgz "$OUT/fla_triton.tgz.part"
    else
        cp /tmp/fla_triton.tgz "$OUT/fla_triton.tgz"
    fi
    echo "Triton cache saved: $size bytes, $(find "$TRITON_CACHE_DIR" -name '*.autotune.json' | wc -l) autotune results ($(ls "$OUT" | grep -c fla_triton) file(s) in \$OUT)"
}
