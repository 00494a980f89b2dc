"""One genome's launch sequence on the device, for the GPU tests that compare a genome with its twin on
the same inputs (tests/test_kda_gpu.py, tests/test_rmsnorm_bwd_gpu.py): outputs and workspace poisoned
first, every launch of `family.launch(genome, case)` in order, the outputs copied back to the host."""

from __future__ import annotations

from typing import Any

from fitness import dtypes


def poisoned(spec: Any) -> Any:
    """A device buffer of `spec` (a BufferSpec) holding the dtype's poison pattern."""
    import cupy  # noqa: PLC0415

    arr = cupy.empty(spec.shape, dtype=dtypes.storage_dtype(spec.dtype))
    dtypes.poison(arr, dtypes.canonical(spec.dtype))
    return arr


def run_genome(backend: Any, family: Any, genome: Any, case: Any, dev: dict[str, Any], module: Any) -> dict[str, Any]:
    """`genome`'s launches of `case` on device inputs `dev` with the loaded `module`: its outputs (host arrays)."""
    from fitness.device import as_launches, resolve_args  # noqa: PLC0415

    _, outs = family.io(case)
    bufs = {n: poisoned(s) for n, s in {**outs, **family.workspace(case)}.items()}
    for one in as_launches(family.launch(genome, case)):
        kernel = backend.get_kernel(module, one.kernel)
        backend.prepare_kernel(kernel, one)
        backend.launch(kernel, one, resolve_args(one, {**dev, **bufs}))
    backend.synchronize(60.0)
    return {n: bufs[n].get() for n in outs}


def load_modules(backend: Any, family: Any, genomes: Any, cache_dir: Any) -> dict[str, Any]:
    """Each genome's source compiled (fitness.compile, cached in `cache_dir`, in parallel) and loaded:
    module by key."""
    from fitness.compile import Compiler  # noqa: PLC0415

    genomes = list(genomes)
    results = Compiler(cache_dir).compile_many([(family.render(g), list(family.compile_flags(g))) for g in genomes])
    modules = {}
    for g, res in zip(genomes, results):
        assert res.ok, res.log[-2000:]
        modules[g.key] = backend.load(res.cubin())
    return modules
