"""ClusterCompiler: nvcc spread over a Ray cluster's CPUs, through the same content-addressed cache.

The judge compiles a batch of genomes while the GPUs wait (fitness.compile: 3-5 s for 4 RMSNorm
sources on 16 cores); a cluster of 8-GPU hosts has far more CPUs than the driver's host. So each
source the driver's cache does not hold becomes one Ray task (`num_cpus=1`, placed wherever a CPU
is free) that compiles it with an ordinary `Compiler` on that node and sends back the whole cache
entry (cubin, ptxas log, SASS, metadata), which the driver adopts into its own cache. The cascade
then reads it exactly as a local compile.

Keyed, not compiled twice: the key is sha256(source, flags, arch, toolkit) (fitness.compile), and
the task's Compiler uses the driver's cache path. Where the hosts share that filesystem (NFS, a
cluster's shared home), a source any host compiled is a cache hit for every other one: the
driver finds it before sending a task, and a task finds it before running nvcc. Where they do
not, each host keeps its own cache, and the driver's (which every later batch asks first) still
holds every entry once.

A node whose toolkit differs from the driver's would compile under another key: that is a
ToolchainError (a broken cluster), as is a node without nvcc, never a candidate's COMPILE_ERROR.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from fitness.compile import CompileResult, Compiler
from fitness.pool import node_name
from fitness.toolchain import ToolchainError


def compile_on_node(cache_dir: str, arch: str, timeout_s: float, key: str, source: str,
                    flags: tuple[str, ...]) -> dict[str, Any]:
    """One source on whatever node Ray chose (the body of the Ray task): the cache entry's files,
    or the result itself when it is not cacheable (an nvcc timeout)."""
    compiler = Compiler(cache_dir, arch=arch, jobs=1, timeout_s=timeout_s)
    here = compiler.key(source, flags)
    if here != key:
        return {"error": f"node {node_name()} compiles with another toolkit (nvcc {compiler.toolkit}): its "
                         f"compile key differs from the driver's; give every node the driver's CUDA toolkit"}
    result = compiler.compile(source, flags)
    files = compiler.entry_files(key)
    return {"files": files, "result": None if files else result, "seconds": result.seconds,
            "cached": result.cached, "node": node_name()}


class ClusterCompiler:
    """`compile_many` (the interface fitness.cascade uses) over the cluster's CPUs; `key`,
    `toolkit` and cache hits come from a local Compiler on the driver's cache (built at first use,
    so a driver is built without nvcc until it compiles)."""

    def __init__(self, cache_dir: str | os.PathLike, arch: str = "sm_90a", *, address: str = "",
                 timeout_s: float = 180, local: Compiler | None = None):
        self.cache_dir = Path(cache_dir).resolve()
        self.address = address          # the cluster to join if this process has not yet (the pool's)
        self.arch = arch
        self.timeout_s = float(timeout_s)
        self._local = local
        self.counts = {"sources": 0, "cache_hits": 0, "remote": 0, "remote_cache_hits": 0}
        self.nodes: dict[str, int] = {}             # node name -> sources it compiled

    @property
    def local(self) -> Compiler:
        if self._local is None:
            self._local = Compiler(self.cache_dir, arch=self.arch, jobs=1, timeout_s=self.timeout_s)
        return self._local

    @property
    def toolkit(self) -> str:
        try:
            return self.local.toolkit
        except ToolchainError:
            return ""

    def key(self, source: str, flags: Sequence[str] = ()) -> str:
        return self.local.key(source, flags)

    def compile_many(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[CompileResult]:
        """Results in input order; identical pairs compiled once; cached ones read here."""
        from fitness.ray_pool import connect, require_ray

        keyed = [(self.key(src, tuple(fl)), src, tuple(fl)) for src, fl in items]
        unique = {k: (src, fl) for k, src, fl in keyed}
        done: dict[str, CompileResult] = {}
        todo = []
        for k, (src, fl) in unique.items():
            self.counts["sources"] += 1
            t0 = time.perf_counter()
            hit = self.local.lookup(k)
            if hit is not None:
                self.counts["cache_hits"] += 1
                done[k] = replace(hit, seconds=time.perf_counter() - t0)
            else:
                todo.append(k)
        if todo:
            ray = require_ray()
            connect(self.address)
            task = ray.remote(compile_on_node).options(num_cpus=1)
            refs = {k: task.remote(str(self.cache_dir), self.arch, self.timeout_s, k, *unique[k]) for k in todo}
            for k, ref in refs.items():
                done[k] = self._adopt(k, self._get(ray, ref))
        return [done[k] for k, _, _ in keyed]

    def _get(self, ray: Any, ref: Any) -> dict[str, Any]:
        try:
            payload = ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - RayTaskError (no nvcc there, a broken node): the cluster's fault
            lines = [ln for ln in str(exc).splitlines() if ln.strip()]
            raise ToolchainError(f"a compile task failed on the Ray cluster: {lines[-1] if lines else exc!r}") from None
        if "error" in payload:
            raise ToolchainError(payload["error"])
        return payload

    def _adopt(self, key: str, payload: dict[str, Any]) -> CompileResult:
        self.counts["remote"] += 1
        self.counts["remote_cache_hits"] += bool(payload["cached"])
        self.nodes[payload["node"]] = self.nodes.get(payload["node"], 0) + 1
        if payload["result"] is not None:          # not cacheable (nvcc timed out there)
            return payload["result"]
        self.local.adopt(key, payload["files"])
        loaded = self.local.lookup(key)
        if loaded is None:                         # the driver's cache cannot be written: its fault
            raise ToolchainError(f"compile cache {self.cache_dir}: cannot store entry {key[:12]}")
        return replace(loaded, cached=bool(payload["cached"]), seconds=float(payload["seconds"]))
