"""fitness.compile: nvcc to cubin, the content-addressed cache, failures as values, parallelism."""

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from fitness import compile as compile_mod
from fitness.compile import Compiler, arch_target
from fitness.toolchain import find_tool

DATA = Path(__file__).parent / "data"
NVCC, CUOBJDUMP = find_tool("nvcc"), find_tool("cuobjdump")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (install the CUDA toolkit or set CUDA_HOME)")
SASS_SKIP = ("nvcc not found (install the CUDA toolkit or set CUDA_HOME)" if NVCC is None else
             "cuobjdump not found: pip install 'ptx-kernel-factory[dev]' provides cuobjdump/nvdisasm")
needs_sass = pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason=SASS_SKIP)

ENTRY_FILES = {"kernel.cu", "kernel.cubin", "ptxas.log", "sass.txt", "result.json"}


def kernel(tag: str, body: str = "y[threadIdx.x] = x[threadIdx.x] * 2.f;") -> str:
    """A tiny distinct kernel per tag (distinct text = distinct cache entry)."""
    return f'extern "C" __global__ void k_{tag}(const float* x, float* y) {{ {body} }}\n'


def no_tmp_left(cache: Path) -> bool:
    return not [p for p in cache.rglob(".tmp-*")]


def test_arch_targets():
    assert arch_target("sm_90a") == "arch=compute_90a,code=sm_90a"
    assert arch_target("sm_90") == "arch=compute_90,code=sm_90"
    with pytest.raises(ValueError):
        arch_target("90a")


@needs_nvcc
def test_compile_ok_writes_a_whole_entry(tmp_path):
    c = Compiler(tmp_path)
    res = c.compile(kernel("ok"))
    assert res.ok and not res.cached and res.arch == "sm_90a" and res.flags == ()
    entry = Path(res.cubin_path).parent
    assert entry == tmp_path / res.source_hash[:2] / res.source_hash
    assert {p.name for p in entry.iterdir()} == (ENTRY_FILES if CUOBJDUMP else ENTRY_FILES - {"sass.txt"})
    assert Path(res.cubin_path).read_bytes()[:4] == b"\x7fELF" == res.cubin()[:4]
    assert res.resources["k_ok"].registers > 0 and set(res.kernels) == {"k_ok"}
    assert res.ptx_path is None and res.toolkit == c.toolkit
    assert json.loads((entry / "result.json").read_text())["ok"] is True
    assert no_tmp_left(tmp_path)


@needs_nvcc
def test_second_compile_is_a_fast_cache_hit(tmp_path):
    c = Compiler(tmp_path)
    first = c.compile(kernel("hit"), ["-DUNUSED=1"])
    second = Compiler(tmp_path).compile(kernel("hit"), ["-DUNUSED=1"])   # a new compiler, same cache
    assert second.cached and not first.cached
    assert second.source_hash == first.source_hash and second.resources == first.resources
    assert second.sass == first.sass and second.cubin_path == first.cubin_path
    assert second.seconds < first.seconds / 10, (first.seconds, second.seconds)


@needs_nvcc
def test_key_covers_source_flags_arch_and_toolkit(tmp_path):
    c90a, c90 = Compiler(tmp_path), Compiler(tmp_path, arch="sm_90")
    k = c90a.key(kernel("k"))
    assert k == c90a.key(kernel("k"), ()) != c90a.key(kernel("k"), ["-DX=1"])
    assert k != c90.key(kernel("k")) and k != c90a.key(kernel("k2"))
    c90a.toolkit = "99.9.9"
    assert c90a.key(kernel("k")) != k


@needs_nvcc
def test_sm_90_target(tmp_path):
    res = Compiler(tmp_path, arch="sm_90").compile(kernel("plain"))
    assert res.ok and res.resources["k_plain"].arch == "sm_90"


@needs_nvcc
def test_syntax_error_is_a_cached_value(tmp_path):
    c = Compiler(tmp_path)
    src = kernel("bad", "y[0] = undefined_thing + ;")
    res = c.compile(src)
    assert not res.ok and res.cubin_path is None and res.sass == "" and res.resources == {}
    assert 'identifier "undefined_thing" is undefined' in res.log
    again = c.compile(src)
    assert again.cached and not again.ok and again.log == res.log


@needs_nvcc
def test_bad_inline_ptx_fails_in_ptxas(tmp_path):
    res = Compiler(tmp_path).compile(kernel("ptx", 'asm volatile("bogus.instr.f32 %0;" :: "f"(x[0]));'))
    assert not res.ok and "ptxas" in res.log and "bogus" in res.log
    assert "kernel.ptx" in res.log          # reproducible path, not a random /tmp name


@needs_nvcc
def test_sm_90a_only_ptx_fails_on_sm_90(tmp_path):
    src = kernel("smr", 'asm volatile("setmaxnreg.inc.sync.aligned.u32 232;"); y[0] = 1.f;')
    assert Compiler(tmp_path).compile(src).ok
    res = Compiler(tmp_path, arch="sm_90").compile(src)
    assert not res.ok and "not supported on .target 'sm_90'" in res.log


@needs_nvcc
def test_compile_many_in_parallel_keeps_order_and_dedups(tmp_path):
    c = Compiler(tmp_path, jobs=4)
    items = [(kernel(f"m{i}", f"y[threadIdx.x] = x[threadIdx.x] * {i}.f;"), ["-DVARIANT=%d" % i])
             for i in range(6)]
    items.append(items[2])                                  # a duplicate in the batch
    start = time.perf_counter()
    results = c.compile_many(items)
    elapsed = time.perf_counter() - start
    assert len(results) == 7 and all(r.ok for r in results)
    assert [next(iter(r.kernels)) for r in results] == [f"k_m{i}" for i in range(6)] + ["k_m2"]
    assert len({r.source_hash for r in results}) == 6 and results[6] is results[2]
    assert not any(r.cached for r in results) and no_tmp_left(tmp_path)
    assert len(list(tmp_path.glob("*/*/result.json"))) == 6
    assert all(r.cached for r in c.compile_many(items))
    assert elapsed < 60


@needs_nvcc
def test_racing_compilers_agree_on_one_entry(tmp_path):
    src, out = kernel("race"), []
    threads = [threading.Thread(target=lambda: out.append(Compiler(tmp_path).compile(src))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 3 and all(r.ok for r in out) and len({r.cubin_path for r in out}) == 1
    assert no_tmp_left(tmp_path) and Path(out[0].cubin_path).is_file()


@needs_nvcc
def test_half_entries_and_stale_temporaries(tmp_path):
    c = Compiler(tmp_path)
    src = kernel("half")
    entry = c.entry_dir(c.key(src))
    entry.mkdir(parents=True)
    (entry / "kernel.cu").write_text("truncated")           # as if a writer died mid-way
    stale = tmp_path / ".tmp-dead"
    stale.mkdir()
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    res = Compiler(tmp_path).compile(src)                   # a new compiler sweeps stale temps
    assert res.ok and not res.cached and (entry / "result.json").is_file()
    assert (entry / "kernel.cu").read_text() == src and not stale.exists()


@needs_nvcc
def test_keep_ptx_and_backfill(tmp_path):
    plain = Compiler(tmp_path).compile(kernel("ptx1"))
    assert plain.ptx_path is None
    kept = Compiler(tmp_path, keep_ptx=True).compile(kernel("ptx1"))
    assert kept.cached and kept.ptx_path and ".target sm_90a" in Path(kept.ptx_path).read_text()
    fresh = Compiler(tmp_path, keep_ptx=True).compile(kernel("ptx2"))
    assert not fresh.cached and ".entry k_ptx2" in Path(fresh.ptx_path).read_text()


@needs_sass
def test_without_cuobjdump_sass_is_skipped_then_backfilled(tmp_path, monkeypatch):
    real_find = compile_mod.find_tool
    monkeypatch.setattr(compile_mod, "find_tool", lambda t: None if t == "cuobjdump" else real_find(t))
    res = Compiler(tmp_path).compile(kernel("nosass"))
    assert res.ok and res.sass == "" and "SASS not disassembled: cuobjdump not found" in res.log
    monkeypatch.undo()
    again = Compiler(tmp_path).compile(kernel("nosass"))
    assert again.cached and "UBLKCP" not in again.sass and "Function : k_nosass" in again.sass
    assert (Path(again.cubin_path).parent / "sass.txt").is_file()
    assert "SASS not disassembled" not in again.log
    assert Compiler(tmp_path).compile(kernel("nosass")).log == again.log


FAKE_NVCC = """#!/bin/sh
if [ "$1" = "--version" ]; then
  echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0
fi
sleep 30 &
echo $! > "{pidfile}"
wait
"""


def alive(pid: int) -> bool:
    """A killed child lingers as a zombie until init reaps it; that counts as dead."""
    if Path("/proc/self/stat").exists():
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False
    try:                                                     # no /proc: ask the kernel
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_timeout_kills_nvcc_and_its_children_and_is_not_cached(tmp_path):
    pidfile = tmp_path / "child.pid"
    fake = tmp_path / "nvcc"
    fake.write_text(FAKE_NVCC.format(pidfile=pidfile))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    c = Compiler(tmp_path / "cache", nvcc=str(fake), timeout_s=0.5)
    start = time.perf_counter()
    res = c.compile(kernel("slow"))
    assert time.perf_counter() - start < 10
    assert not res.ok and not res.cached and "timeout" in res.log and res.cubin_path is None
    child = int(pidfile.read_text())
    for _ in range(100):
        if not alive(child):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"nvcc's child {child} survived the timeout")
    assert not list((tmp_path / "cache").glob("*/*")) and no_tmp_left(tmp_path / "cache")
    assert not c.compile(kernel("slow")).cached


@needs_nvcc
@pytest.mark.skipif(compile_mod.shutil.which("prlimit") is None, reason="util-linux prlimit not found")
def test_the_compiler_runs_under_a_memory_limit(tmp_path):
    """A compile that needs more address space than allowed fails (a value, with its log) instead
    of taking the machine down; the default limit compiles ordinary kernels."""
    starved = Compiler(tmp_path / "starved", memory_limit_bytes=32 << 20)
    res = starved.compile(kernel("starved"))
    assert not res.ok and res.cubin_path is None
    assert Compiler(tmp_path / "ok").compile(kernel("fed")).ok
    assert compile_mod.MEMORY_LIMIT_BYTES >= 4 << 30
