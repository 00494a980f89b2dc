"""Static checks: reject a compiled candidate on its ptxas report and SASS, before any GPU time.

A kernel that spills, keeps arrays in local memory, cannot launch for lack of shared memory, or
silently lost the instructions its genome is about (TMA, wgmma, setmaxnreg) would at best waste a
GPU slot and at worst teach the search that a feature "does not help" when it never ran. Each
problem is a sentence a researcher (or an LLM mutation prompt) can act on.

Limits come from `family.resource_limits(genome)`; every key is optional:

  spill_bytes           max spill stores + loads of any function (default 0)
  local_bytes           max stack frame of any function; 0 also forbids LDL/STL in the SASS
  registers             max registers per thread of any kernel
  shared_bytes          max static + dynamic shared memory per block (default 232448, 227 KB)
  dynamic_shared_bytes  the dynamic shared memory the genome asks for; when absent, the largest
                        `family.launch(genome, case).shared_bytes` over the check and benchmark
                        cases is used
  gmem_bytes            max module-level __device__ state (ptxas "bytes gmem"; default
                        DEFAULT_GMEM_BYTES): a kernel may keep a few counters between launches,
                        never a copy of an output to replay (the memoising cheats)

Always: no call into the device runtime (CALL.ABS in the SASS: malloc, free, printf, assert):
memory a kernel allocates itself is state the judge cannot poison or see.

Promises come from `family.promises(genome)`: {"TMA": ["UBLKCP", "UTMALDG"], ...}; a family is
kept when any one of its opcode prefixes occurs in the SASS (prefix rules: fitness.sass.matches).
Promise {"setmaxnreg": ["USETMAXREG"]} also catches ptxas ignoring setmaxnreg (warning C7508).
"""

from __future__ import annotations

from typing import Any, Mapping

from fitness.compile import CompileResult
from fitness.records import Status
from fitness.sass import has_any, instructions, opcodes
from fitness.toolchain import ToolchainError

SMEM_PER_BLOCK_LIMIT = 232448   # bytes of shared memory one block may use on sm_90 (227 KB)
DEFAULT_GMEM_BYTES = 1024       # module-level __device__ state a kernel may keep between launches


def static_problems(result: CompileResult, family: Any, genome: Any) -> list[str]:
    """Human-readable reasons to reject `result`; [] when it passes (or did not compile:
    compile errors are classified separately). Raises ToolchainError when promises must be
    checked but the result has no SASS (a machine problem, not the candidate's)."""
    if not result.ok:
        return []
    limits: Mapping[str, int] = family.resource_limits(genome) or {}
    problems: list[str] = []
    problems += _resource_problems(result, limits)
    problems += _local_memory_problems(result, limits)
    launches = _launches(family, genome)
    problems += _shared_memory_problems(result, limits, family, genome, launches)
    problems += _entry_problems(result, launches)
    problems += _promise_problems(result, family.promises(genome) or {})
    problems += _state_problems(result, limits)
    return problems


def _state_problems(result: CompileResult, limits: Mapping[str, int]) -> list[str]:
    out = []
    cap = limits.get("gmem_bytes", DEFAULT_GMEM_BYTES)
    gmem = max((getattr(r, "gmem_bytes", 0) for r in result.resources.values()), default=0)
    if gmem > cap:
        out.append(f"keeps {gmem} bytes of __device__ state between launches (limit {cap}): a kernel may "
                   f"remember a few counters, not results")
    if result.sass:
        calls = sorted({i.form for i in instructions(result.sass) if i.base == "CALL" and ".ABS" in i.form})
        if calls:
            out.append(f"calls the device runtime ({', '.join(calls)}: malloc/free/printf/assert): a kernel may "
                       f"not allocate memory of its own")
    return out


def classify(result: CompileResult, problems: list[str]) -> Status:
    if not result.ok:
        return Status.COMPILE_ERROR
    return Status.INVALID if problems else Status.OK


def _resource_problems(result: CompileResult, limits: Mapping[str, int]) -> list[str]:
    out = []
    spill_limit = limits.get("spill_bytes", 0)
    reg_limit = limits.get("registers")
    for name, r in result.resources.items():
        if r.spill_bytes > spill_limit:
            out.append(f"{name} spills {r.spill_bytes} bytes (stores {r.spill_store_bytes} + loads "
                       f"{r.spill_load_bytes}); limit {spill_limit}")
        if reg_limit is not None and r.entry and r.registers > reg_limit:
            out.append(f"{name} uses {r.registers} registers; limit {reg_limit}")
    return out


def _local_memory_problems(result: CompileResult, limits: Mapping[str, int]) -> list[str]:
    if "local_bytes" not in limits:
        return []
    limit = limits["local_bytes"]
    out = [f"{name} has a {r.stack_frame_bytes}-byte stack frame (local memory); limit {limit}"
           for name, r in result.resources.items() if r.stack_frame_bytes > limit]
    if limit == 0 and result.sass:
        counts = opcodes(result.sass)
        if counts["LDL"] or counts["STL"]:
            out.append(f"SASS uses local memory: {counts['LDL']} LDL, {counts['STL']} STL")
    return out


def _launches(family: Any, genome: Any) -> list[Any]:
    """Every Launch the genome asks for over the family's check and benchmark cases."""
    out = []
    for cases in ("check_cases", "benchmark_cases"):
        try:
            for case in getattr(family, cases)():
                try:
                    launch = family.launch(genome, case)
                except Exception:  # noqa: BLE001 - a launch that raises is the cascade's to report
                    continue
                if launch is not None:
                    out += [launch] if hasattr(launch, "shared_bytes") else list(launch)
        except (AttributeError, NotImplementedError):
            continue
    return out


def _declared_dynamic_smem(limits: Mapping[str, int], family: Any, genome: Any,
                           launches: list[Any] | None = None) -> int:
    if "dynamic_shared_bytes" in limits:
        return int(limits["dynamic_shared_bytes"])
    launches = _launches(family, genome) if launches is None else launches
    return max((int(one.shared_bytes) for one in launches), default=0)


def _entry_problems(result: CompileResult, launches: list[Any]) -> list[str]:
    """Every kernel a launch names must be an entry of the cubin (ptxas's report lists them),
    however the source spells it (a macro may generate the extern "C" declarations)."""
    if not result.kernels:
        return []
    missing = sorted({one.kernel for one in launches} - set(result.kernels))
    return [f"launches name kernel {k!r}, which the cubin does not define (entries: {', '.join(sorted(result.kernels))})"
            for k in missing]


def _shared_memory_problems(result: CompileResult, limits: Mapping[str, int], family: Any,
                            genome: Any, launches: list[Any] | None = None) -> list[str]:
    cap = limits.get("shared_bytes", SMEM_PER_BLOCK_LIMIT)
    dynamic = _declared_dynamic_smem(limits, family, genome, launches)
    return [f"{name} needs {r.shared_bytes} bytes static + {dynamic} dynamic shared memory = "
            f"{r.shared_bytes + dynamic} bytes per block; limit {cap}"
            for name, r in result.kernels.items() if r.shared_bytes + dynamic > cap]


def _promise_problems(result: CompileResult, promises: Mapping[str, Any]) -> list[str]:
    if not promises:
        return []
    if not result.sass:
        raise ToolchainError(
            f"cannot check promised instructions ({', '.join(promises)}): compile "
            f"{result.source_hash[:12]} has no SASS; pip install 'ptx-kernel-factory[dev]' "
            "provides cuobjdump/nvdisasm")
    out = []
    for name, prefixes in promises.items():
        prefixes = [prefixes] if isinstance(prefixes, str) else list(prefixes)
        if not has_any(result.sass, prefixes):
            out.append(f"promises {name} but SASS has none of {', '.join(prefixes)}")
    return out
