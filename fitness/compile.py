"""Compiling rendered kernels to sm_90a cubins, in parallel, through a content-addressed cache.

An evolutionary run renders many genomes whose CUDA text coincides (repaired duplicates, resumed
runs, the same elite in every generation), and nvcc is the judge's slowest CPU step, so every
compile is cached by what determines its output: sha256 of (source, flags, arch, toolkit version).
A failure is cached too (the same source fails the same way), except a timeout, which may be the
machine's fault.

Cache layout, one folder per entry:

    <cache>/<hh>/<hash>/kernel.cu      the source
                        kernel.cubin   (when ok)
                        kernel.ptx     (when keep_ptx)
                        ptxas.log      nvcc's merged stdout+stderr, with ptxas -v
                        sass.txt       cuobjdump -sass (when ok and cuobjdump exists)
                        result.json    metadata; its presence marks a complete entry

An entry is built in a temporary folder beside it and renamed into place, so concurrent compilers
(threads or processes) and killed processes never leave a half entry: a reader sees a whole entry
or none. The derived files sass.txt and kernel.ptx may be added later to a whole entry (when the
disassembler appears, or a compiler with keep_ptx hits an entry made without), each by an atomic
file replace.

A failed compile is a value (ok=False, the nvcc log), never an exception; only a missing or
broken toolchain raises (ToolchainError).
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from fitness.ptxas import ResourceReport, parse_ptxas
from fitness.sass import SassError, disassemble
from fitness.toolchain import ToolchainError, find_nvcc, find_tool, tool_env, toolkit_version

BASE_FLAGS = ("-O3", "-std=c++17", "-Xptxas", "-v", "-lineinfo")
_NO_SASS = "note: SASS not disassembled"
#: the log line of a compile nvcc did not finish in timeout_s (such a result is not cached)
TIMEOUT_NOTE = "timeout: nvcc killed after"
_STALE_TMP_S = 3600.0      # a temporary build folder older than this belongs to a dead process


@dataclass(frozen=True)
class CompileResult:
    ok: bool
    source_hash: str
    arch: str
    flags: tuple[str, ...]
    cubin_path: str | None
    log: str
    resources: dict[str, ResourceReport] = field(default_factory=dict)
    sass: str = ""
    seconds: float = 0.0           # wall time of this call (a cache hit is a file read)
    cached: bool = False
    ptx_path: str | None = None
    toolkit: str = ""

    @property
    def kernels(self) -> dict[str, ResourceReport]:
        """Entry functions only (non-inlined device functions left out)."""
        return {k: r for k, r in self.resources.items() if r.entry}

    def cubin(self) -> bytes:
        if not self.cubin_path:
            raise FileNotFoundError(f"compile {self.source_hash[:12]} has no cubin (ok={self.ok})")
        return Path(self.cubin_path).read_bytes()


def arch_target(arch: str) -> str:
    """"sm_90a" -> "arch=compute_90a,code=sm_90a" (the -gencode value)."""
    if not arch.startswith("sm_"):
        raise ValueError(f"arch must look like 'sm_90a', got {arch!r}")
    return f"arch=compute_{arch[3:]},code={arch}"


def compile_key(source: str, flags: Sequence[str], arch: str, toolkit: str) -> str:
    """The cache key (and an evaluation's `source_hash`): what determines a compile's output.
    A function of its own so that a recorded key can be checked against a source without the
    toolkit it was compiled with (evo export: is this still the kernel the judge measured?)."""
    payload = json.dumps({"source": source, "flags": list(flags), "arch": arch, "toolkit": toolkit},
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


#: address space one nvcc (cicc, ptxas) may take: a source that makes the compiler blow up fails
#: to compile instead of taking the machine down (applied with util-linux prlimit where it exists)
MEMORY_LIMIT_BYTES = 16 << 30


class Compiler:
    """nvcc to cubin with a shared on-disk cache; `compile_many` runs `jobs` nvcc at once.

    `nvcc` and `cuobjdump` default to the tools found by fitness.toolchain; pass paths to pin
    them (tests pass a fake nvcc). Without cuobjdump, results carry sass="" and a note in log.
    """

    def __init__(self, cache_dir: str | os.PathLike, arch: str = "sm_90a", jobs: int | None = None,
                 timeout_s: float = 180, keep_ptx: bool = False, nvcc: str | None = None,
                 cuobjdump: str | None = None, memory_limit_bytes: int | None = MEMORY_LIMIT_BYTES):
        self.cache_dir = Path(cache_dir)
        self.memory_limit_bytes = memory_limit_bytes
        self._prlimit = shutil.which("prlimit")
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.arch = arch
        self.target = arch_target(arch)
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self.timeout_s = timeout_s
        self.keep_ptx = keep_ptx
        self.nvcc = nvcc or find_nvcc()
        self.cuobjdump = cuobjdump or find_tool("cuobjdump")
        self.toolkit = toolkit_version(self.nvcc)
        self._sweep_stale()

    # -- keys and paths ----------------------------------------------------------------------
    def key(self, source: str, flags: Sequence[str] = ()) -> str:
        return compile_key(source, flags, self.arch, self.toolkit)

    def entry_dir(self, key: str) -> Path:
        return self.cache_dir / key[:2] / key

    def command(self, flags: Sequence[str], out: str = "kernel.cubin", src: str = "kernel.cu") -> list[str]:
        # -keep in the private build folder: the PTX comes for free, and ptxas errors name
        # "kernel.ptx" rather than a random /tmp file, so cached failure logs are reproducible.
        return [self.nvcc, "-cubin", "-gencode", self.target, *BASE_FLAGS, *flags,
                "-keep", "-keep-dir", ".", "-o", out, src]

    # -- public API --------------------------------------------------------------------------
    def compile(self, source: str, flags: Sequence[str] = ()) -> CompileResult:
        start = time.perf_counter()
        flags = tuple(flags)
        key = self.key(source, flags)
        result = self._load(key)
        if result is None:
            result = self._build(key, source, flags)
        else:
            result = self._complete(result)
        return replace(result, seconds=time.perf_counter() - start)

    def compile_many(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[CompileResult]:
        """Compile (source, flags) pairs in parallel; results in input order. Identical pairs
        are compiled once."""
        keyed = [(self.key(src, tuple(fl)), src, tuple(fl)) for src, fl in items]
        unique = {k: (src, fl) for k, src, fl in keyed}
        with cf.ThreadPoolExecutor(max_workers=min(self.jobs, max(1, len(unique)))) as pool:
            futures = {k: pool.submit(self.compile, src, fl) for k, (src, fl) in unique.items()}
            done = {k: f.result() for k, f in futures.items()}
        return [done[k] for k, _, _ in keyed]

    # -- entries between hosts (fitness.ray_compile) ----------------------------------------
    def lookup(self, key: str) -> CompileResult | None:
        """The cached result for a compile key (derived files completed where they can be), or
        None: what a cluster compile asks before sending a source to another host."""
        result = self._load(key)
        return self._complete(result) if result is not None else None

    def entry_files(self, key: str) -> dict[str, bytes]:
        """The files of a whole cached entry (empty when there is none): what another host's
        cache adopts instead of compiling the same source again."""
        entry = self.entry_dir(key)
        if not (entry / "result.json").is_file():
            return {}
        return {f.name: f.read_bytes() for f in entry.iterdir() if f.is_file()}

    def adopt(self, key: str, files: dict[str, bytes]) -> None:
        """Put an entry compiled elsewhere into this cache, whole or not at all (built beside it
        and renamed into place, like a compile of our own); an entry already here is kept."""
        if (self.entry_dir(key) / "result.json").is_file() or "result.json" not in files:
            return
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.cache_dir))
        try:
            for name, data in files.items():
                (tmp / Path(name).name).write_bytes(data)
            self._publish(tmp, self.entry_dir(key))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # -- cache reads -------------------------------------------------------------------------
    def _load(self, key: str) -> CompileResult | None:
        entry = self.entry_dir(key)
        try:
            meta = json.loads((entry / "result.json").read_text(encoding="utf-8"))
            log = (entry / "ptxas.log").read_text(encoding="utf-8")
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        sass_file, ptx_file, cubin_file = entry / "sass.txt", entry / "kernel.ptx", entry / "kernel.cubin"
        return CompileResult(
            ok=meta["ok"], source_hash=key, arch=meta["arch"], flags=tuple(meta["flags"]),
            cubin_path=str(cubin_file) if meta["ok"] else None, log=log,
            resources={k: ResourceReport.from_dict(v) for k, v in meta["resources"].items()},
            sass=sass_file.read_text(encoding="utf-8") if sass_file.exists() else "", cached=True,
            ptx_path=str(ptx_file) if ptx_file.exists() else None, toolkit=meta.get("toolkit", ""))

    def _complete(self, result: CompileResult) -> CompileResult:
        """Add derived files missing from a cached entry, if they can be made now."""
        entry = self.entry_dir(result.source_hash)
        if result.ok and not result.sass and self.cuobjdump:
            sass, _ = self._disassemble(entry / "kernel.cubin")
            if sass:
                log = "\n".join(l for l in result.log.split("\n") if not l.startswith(_NO_SASS))
                _atomic_write(entry / "sass.txt", sass)
                _atomic_write(entry / "ptxas.log", log)
                result = replace(result, sass=sass, log=log)
        if self.keep_ptx and result.ok and result.ptx_path is None:
            ptx = self._make_ptx(entry / "kernel.cu", result.flags)
            if ptx is not None:
                _atomic_write(entry / "kernel.ptx", ptx)
                result = replace(result, ptx_path=str(entry / "kernel.ptx"))
        return result

    # -- building ----------------------------------------------------------------------------
    def _build(self, key: str, source: str, flags: tuple[str, ...]) -> CompileResult:
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.cache_dir))
        try:
            (tmp / "kernel.cu").write_text(source, encoding="utf-8")
            rc, log, timed_out = self._run(self.command(flags), tmp)
            cubin = tmp / "kernel.cubin"
            ok = rc == 0 and cubin.is_file()
            if timed_out:
                log += f"\n{TIMEOUT_NOTE} {self.timeout_s}s"
            resources = parse_ptxas(log)
            sass = ""
            if ok:
                sass, note = self._disassemble(cubin)
                log += note
            for f in tmp.iterdir():      # drop nvcc's other intermediates
                if f.name not in ("kernel.cu", "kernel.cubin", "ptxas.log", "sass.txt",
                                  "result.json") and not (self.keep_ptx and f.name == "kernel.ptx"):
                    shutil.rmtree(f) if f.is_dir() else f.unlink()
            if not ok:
                cubin.unlink(missing_ok=True)
            result = CompileResult(ok=ok, source_hash=key, arch=self.arch, flags=flags, cubin_path=None,
                                   log=log, resources=resources, sass=sass, toolkit=self.toolkit)
            if timed_out:                # not cached: a loaded machine may finish it next time
                return result
            if sass:
                (tmp / "sass.txt").write_text(sass, encoding="utf-8")
            (tmp / "ptxas.log").write_text(log, encoding="utf-8")
            meta = {"ok": ok, "arch": self.arch, "flags": list(flags), "toolkit": self.toolkit,
                    "resources": {k: r.to_dict() for k, r in resources.items()}}
            (tmp / "result.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
            self._publish(tmp, self.entry_dir(key))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        loaded = self._load(key)         # the published entry (ours, or a racing compiler's)
        return replace(loaded, cached=False) if loaded else result

    def _run(self, cmd: list[str], cwd: Path) -> tuple[int, str, bool]:
        """Run nvcc in its own process group, so a timeout kills cicc/ptxas with it, in its
        scratch directory, with at most `memory_limit_bytes` of address space (a proposal that
        makes the compiler blow up fails to compile instead of taking the machine down)."""
        if self.memory_limit_bytes and self._prlimit:     # (preexec_fn is unsafe beside compile threads)
            cmd = [self._prlimit, f"--as={int(self.memory_limit_bytes)}", "--", *cmd]
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, encoding="utf-8", errors="replace",
                                    start_new_session=True, env=tool_env(self.nvcc))
        except OSError as exc:
            raise ToolchainError(f"cannot run {cmd[0]}: {exc}") from exc
        try:
            out, _ = proc.communicate(timeout=self.timeout_s)
            return proc.returncode, out, False
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, _ = proc.communicate()
            return -signal.SIGKILL, out or "", True

    def _disassemble(self, cubin: Path) -> tuple[str, str]:
        """(sass, note for the log). Without cuobjdump the SASS is skipped, not an error."""
        if not self.cuobjdump:
            return "", (f"\n{_NO_SASS}: cuobjdump not found "
                        "(pip install 'ptx-kernel-factory[dev]' provides cuobjdump/nvdisasm)")
        try:
            return disassemble(str(cubin), self.cuobjdump), ""
        except (SassError, ToolchainError) as exc:
            return "", f"\n{_NO_SASS}: {exc}"

    def _make_ptx(self, source: Path, flags: tuple[str, ...]) -> str | None:
        with tempfile.TemporaryDirectory(prefix=".tmp-", dir=self.cache_dir) as tmp:
            shutil.copy(source, Path(tmp) / "kernel.cu")
            cmd = [self.nvcc, "-ptx", "-arch", self.arch.replace("sm_", "compute_"),
                   *BASE_FLAGS, *flags, "-o", "kernel.ptx", "kernel.cu"]
            rc, _, _ = self._run(cmd, Path(tmp))
            ptx = Path(tmp) / "kernel.ptx"
            return ptx.read_text(encoding="utf-8") if rc == 0 and ptx.is_file() else None

    def _publish(self, tmp: Path, entry: Path) -> None:
        """Rename a finished build folder into place. If a whole entry is already there (another
        compiler won the race), keep it; a broken one (no result.json) is moved aside first."""
        entry.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            try:
                os.rename(tmp, entry)
                return
            except OSError:
                if (entry / "result.json").exists():
                    return
                trash = Path(tempfile.mkdtemp(prefix=".tmp-trash-", dir=self.cache_dir))
                try:
                    os.rename(entry, trash / "old")
                except OSError:
                    pass
                shutil.rmtree(trash, ignore_errors=True)

    def _sweep_stale(self) -> None:
        now = time.time()
        for d in self.cache_dir.glob(".tmp-*"):
            try:
                if now - d.stat().st_mtime > _STALE_TMP_S:
                    shutil.rmtree(d, ignore_errors=True)
            except FileNotFoundError:
                pass


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
