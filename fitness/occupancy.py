"""How many CTAs (and warps) of one launch an SM holds at once, from what ptxas reported.

Why it is here: session 6's A/B pairs showed that a gene which adds registers (weight_batch,
weight_pipeline) speeds a kernel up on exactly the cases where it leaves the resident warps
unchanged (shared memory bounded them already) and slows it down by ~20 % where the extra
registers evict CTAs. The registers are known after compiling (no GPU needed), the shared memory
and block at launch; so the number of warps per SM is a per-case quantity the analysis can compute
for every recorded evaluation and a search can predict before it spends GPU time.

The arithmetic follows the CUDA occupancy calculator for compute capability 9.0: registers are
allocated per warp in units of 256 (a thread's count rounded up to a multiple of 8), shared
memory per CTA in units of 128 bytes plus 1 KB the system reserves per CTA. It does not model
the extra placement constraint of thread-block clusters (all CTAs of a cluster on one GPC at
once), which can only lower the figure for cluster launches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class SmLimits:
    """Per-SM resources of one architecture."""

    registers: int = 65536
    threads: int = 2048
    ctas: int = 32
    shared_bytes: int = 233472              # 228 KB
    reserved_shared_per_cta: int = 1024
    register_unit: int = 256                # registers per warp are allocated in these units
    shared_unit: int = 128
    max_registers_per_thread: int = 255


#: Hopper (sm_90): H100 and H200
SM90 = SmLimits()

#: what bounds the resident CTAs, in the order ties are reported: a fixed limit of the SM before
#: one the kernel could change (fewer registers, less shared memory would not add a CTA)
LIMITS = ("threads", "ctas", "shared memory", "registers")


@dataclass(frozen=True)
class Occupancy:
    ctas: int               # CTAs of this launch resident on one SM at once (0: it cannot launch)
    warps: int              # ctas x warps per CTA
    limit: str              # which resource bounds `ctas` (one of LIMITS)


def _ceil(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def resident(threads: int, registers: int, shared_bytes: int, limits: SmLimits = SM90) -> Occupancy:
    """CTAs of `threads` threads using `registers` registers per thread and `shared_bytes` shared
    memory (static + dynamic) that one SM holds at once."""
    if threads <= 0:
        raise ValueError(f"threads must be positive, got {threads}")
    warps = -(-threads // 32)
    per_warp = _ceil(max(registers, 1) * 32, limits.register_unit)
    by = {
        "registers": (limits.registers // per_warp) // warps if registers <= limits.max_registers_per_thread else 0,
        "shared memory": limits.shared_bytes // _ceil(shared_bytes + limits.reserved_shared_per_cta, limits.shared_unit),
        "threads": limits.threads // (warps * 32),
        "ctas": limits.ctas,
    }
    ctas = min(by.values())
    limit = next(name for name in LIMITS if by[name] == ctas)
    return Occupancy(ctas=ctas, warps=ctas * warps, limit=limit)


def launch_occupancy(launch: Any, resources: Mapping[str, Any], limits: SmLimits = SM90) -> Occupancy | None:
    """The occupancy of a fitness.family.Launch given ptxas's report (a mapping from kernel name to
    a ResourceReport or its dict, as recorded in an evaluation's `resources` artifact); None when
    the report lacks the launched kernel."""
    report = resources.get(launch.kernel)
    if report is None:
        return None
    get = report.get if isinstance(report, Mapping) else (lambda k, d=0: getattr(report, k, d))
    threads = launch.block[0] * launch.block[1] * launch.block[2]
    return resident(threads, int(get("registers", 0)), int(get("shared_bytes", 0)) + int(launch.shared_bytes), limits)


def case_occupancy(family: Any, genome: Any, case: Any, resources: Mapping[str, Any],
                   limits: SmLimits = SM90) -> Occupancy | None:
    """The occupancy of the launch `family` makes for `genome` on `case`; None when the genome
    cannot run the case or the report lacks its kernel."""
    launch = family.launch(genome, case)
    return launch_occupancy(launch, resources, limits) if launch is not None else None
