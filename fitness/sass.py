"""Reading SASS (the machine code) back from a cubin, to check what a candidate really does.

PTX is a request; SASS is what runs. A genome that promises TMA or 128-bit loads is only credited
if the opcodes are in the cubin, because ptxas may legally lower, merge or drop what the PTX asked
for (it drops `setmaxnreg` with warning C7508, for instance). `disassemble` runs
`cuobjdump -sass`; the other functions are pure text queries on its output.

Opcode forms are the mnemonic with its modifiers ("LDG.E.NA.128.CONSTANT"); the base is the part
before the first dot ("LDG"). A prefix given to `find` matches whole dot-separated parts: "LDG"
matches "LDG.E.128" but not "LDGSTS", "STG.E.EF" matches "STG.E.EF.128"; end it with "*" for a raw
string prefix ("UTMA*" matches UTMALDG, UTMASTG, UTMACCTL...).

What inline PTX becomes on sm_90a (nvcc 13.0.88, -O3; each row checked by compiling a probe, see
tests/data/cuda/probes.cu and tests/test_sass.py):

  PTX                                                  SASS (sm_90a)
  ---------------------------------------------------  -----------------------------------------
  ld.global.v4.f32 (plain, or through a non-restrict)  LDG.E.128
  ld.global.nc.v4.f32, __ldg                           LDG.E.128.CONSTANT
  ld.global.nc.L1::no_allocate.v4                      LDG.E.NA.128.CONSTANT
  ld.global.nc.L2::256B / .L2::128B                    LDG.E.LTC256B... / LDG.E.LTC128B...
  ld.global.cs (= __ldcs)                              LDG.E.EF  (evict-first; never .CONSTANT)
  ld.global.lu (= __ldlu)                              LDG.E.LU
  ld.global.L1::evict_last                             LDG.E.EL
  ld.global.nc.L1::evict_first / _last / _unchanged    LDG.E.EF / .EL / .EU .128.CONSTANT
  ld.global.cg / .ca                                   LDG.E.STRONG.GPU / LDG.E.STRONG.SM
  ld.global.relaxed.gpu.v4                             LDG.E.128.STRONG.GPU
  st.global.cs (= __stcs)                              STG.E.EF.128 (.64, .U16 for narrower)
  st.global.L1::no_allocate                            STG.E.NA.128
  st.global.L1::evict_first                            STG.E.EF.128  (same code as .cs)
  st.global.cg (= __stcg) / .wt (= __stwt)             STG.E.128.STRONG.GPU / STG.E.128.STRONG.SYS
  ld/st .L2::cache_hint + createpolicy (evict_first)   no opcode change: the policy is folded into
                                                       the memory descriptor, desc[URx] built with
                                                       UMOV/USHF/ULOP3 instead of the default
                                                       ULDC.64 URx, c[0x0][0x208]
  ld.global.L2::evict_first / evict_last              rejected by ptxas 13 for every sm_90 width
                                                       ("requires '.v8.b32/.v4.b64' type", and 256-bit
                                                       loads need sm_100): on Hopper, ask for L2
                                                       priority with createpolicy + .L2::cache_hint
  prefetch.global.L2 / .L1 / .L2::evict_last           CCTL.E.PF2 / CCTL.E.PF1 / CCTL.E.PML2
  cp.async.cg/.ca.shared.global (Ampere)               LDGSTS.E.BYPASS.128 / LDGSTS.E;
    cp.async.commit_group / wait_group                 LDGDEPBAR / DEPBAR.LE SB0, 0x0
  cp.async.bulk.shared::cluster.global (G->S)          UBLKCP.S.G  (inside an ELECT loop)
  cp.async.bulk.global.shared::cta (S->G)              UBLKCP.G.S
  cp.reduce.async.bulk ... .add.f32                    UBLKRED.G.S.ADD.F32.RN
  cp.async.bulk.prefetch.L2                            UBLKPF.L2
  cp.async.bulk.tensor.2d load / store                 UTMALDG.2D / UTMASTG.2D
  prefetch.tensormap                                   UTMACCTL.PF
  cp.async.bulk.commit_group / wait_group[.read]       UTMACMDFLUSH / DEPBAR.LE SB0, 0x0
  mbarrier.init                                        SYNCS.EXCH.64
  mbarrier.arrive.expect_tx                            SYNCS.ARRIVE.TRANS64
  mbarrier.arrive (remote, .shared::cluster)           SYNCS.ARRIVE.TRANS64.RED.A1T0
  mbarrier.try_wait.parity                             SYNCS.PHASECHK.TRANS64.TRYWAIT
  fence.proxy.async.shared::cta                        FENCE.VIEW.ASYNC.S
  barrier.cluster.arrive / wait                        UCGABAR_ARV / UCGABAR_WAIT
  mapa.shared::cluster                                 PRMT rX, rank, 0x654, addr (no opcode of its own)
  ld/st.shared::cluster (distributed shared memory)    LD.E / ST.E: *generic* loads/stores, the high
                                                       word from S2R SR_SWINHI; red.shared::cluster
                                                       -> ATOM.E.ADD. There is no LDS/STS form.
  st.async / red.async (remote smem + mbarrier)        STAS / REDAS.ADD
  wgmma.mma_async m64nNk16 bf16->f32                   HGMMA.64xNx16.F32.BF16
  wgmma.fence / wait_group                             WARPGROUP.ARRIVE / WARPGROUP.DEPBAR.LE
  ldmatrix / stmatrix .x4                              LDSM.16.M88.4 / STSM.16.M88.4
  setmaxnreg.inc / .dec                                USETMAXREG.TRY_ALLOC.CTAPOOL / .DEALLOC.CTAPOOL
                                                       (absent when ptxas ignores it: C7508)
  elect.sync                                           ELECT
  griddepcontrol.wait / .launch_dependents             ACQBULK / PREEXIT
  local arrays indexed at run time, register spills    STL / LDL
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from fitness.toolchain import ToolchainError, find_cuobjdump, tool_env

# "        /*0140*/                   @!P0 LDG.E.128 R8, desc[UR4][R2.64] ;   /* 0x... */"
_INSN_RE = re.compile(
    r"^\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P[0-9T]+\s+)?([A-Z][A-Za-z0-9_.]*)\s*([^;]*);")
_FUNC_RE = re.compile(r"^\s*Function\s*:\s*(\S+)")


class SassError(RuntimeError):
    """cuobjdump ran but could not disassemble the file."""


@dataclass(frozen=True)
class Instruction:
    function: str
    address: int
    predicate: str    # "" or e.g. "@!P0"
    form: str         # "LDG.E.128.CONSTANT"
    operands: str     # "R8, desc[UR4][R2.64]"

    @property
    def base(self) -> str:
        return self.form.split(".", 1)[0]

    @property
    def text(self) -> str:
        return " ".join(p for p in (self.predicate, self.form, self.operands) if p)


def disassemble(cubin_path: str, cuobjdump: str | None = None, timeout_s: float = 120) -> str:
    """`cuobjdump -sass` of a cubin. A missing cuobjdump is a ToolchainError (install hint in the
    message); a cubin it cannot read is a SassError."""
    tool = cuobjdump or find_cuobjdump()
    try:
        out = subprocess.run([tool, "-sass", str(cubin_path)], capture_output=True, text=True,
                             timeout=timeout_s, env=tool_env(tool))
    except FileNotFoundError as exc:
        raise ToolchainError(f"cannot run {tool}: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise SassError(f"cuobjdump -sass {cubin_path} took over {timeout_s}s") from exc
    if out.returncode != 0:
        raise SassError(f"cuobjdump -sass {cubin_path} failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout


#: listings whose parse is kept: the judge's stage 0 asks ~9 questions of each candidate's SASS
#: (static checks, promises, the summary), and a listing of an RMSNorm candidate is ~12k lines,
#: ~50 ms to parse each time (session 15: 1.3 s of every 4-genome batch, the GPU idle meanwhile)
PARSE_CACHE = 8
#: a listing longer than this is parsed each time, not kept: a candidate written to emit a huge
#: listing must not make the cache hold gigabytes (~50x an RMSNorm candidate's ~1 MB)
PARSE_CACHE_MAX_CHARS = 64 << 20


def _parse(sass: str) -> tuple[Instruction, ...]:
    return _parse_kept(sass) if len(sass) <= PARSE_CACHE_MAX_CHARS else _parse_listing(sass)


@functools.lru_cache(maxsize=PARSE_CACHE)
def _parse_kept(sass: str) -> tuple[Instruction, ...]:
    return _parse_listing(sass)


def _parse_listing(sass: str) -> tuple[Instruction, ...]:
    result: list[Instruction] = []
    function = ""
    for line in sass.splitlines():
        if m := _FUNC_RE.match(line):
            function = m.group(1)
        elif m := _INSN_RE.match(line):
            result.append(Instruction(function, int(m.group(1), 16), (m.group(2) or "").strip(),
                                      m.group(3), m.group(4).strip()))
    return tuple(result)


def _forms(sass: str, function: str | None) -> frozenset[str]:
    if len(sass) > PARSE_CACHE_MAX_CHARS:
        return _forms_of(sass, function)
    return _forms_kept(sass, function)


@functools.lru_cache(maxsize=PARSE_CACHE)
def _forms_kept(sass: str, function: str | None) -> frozenset[str]:
    return _forms_of(sass, function)


def _forms_of(sass: str, function: str | None) -> frozenset[str]:
    return frozenset(i.form for i in _parse(sass) if function is None or i.function == function)


def instructions(sass: str) -> list[Instruction]:
    """Every instruction of a listing, in order, tagged with its function (a new list each call;
    the parse itself is kept for the last PARSE_CACHE listings: the text is all it depends on)."""
    return list(_parse(sass))


def functions(sass: str) -> list[str]:
    """Function names in listing order (mangled, as in the cubin)."""
    return [m.group(1) for line in sass.splitlines() if (m := _FUNC_RE.match(line))]


def _select(sass: str, function: str | None) -> Sequence[Instruction]:
    insns = _parse(sass)
    return insns if function is None else [i for i in insns if i.function == function]


def opcodes(sass: str, function: str | None = None) -> Counter:
    """Count of base mnemonics ("LDG", "HGMMA", ...), optionally for one function."""
    return Counter(i.base for i in _select(sass, function))


def opcode_forms(sass: str, function: str | None = None) -> Counter:
    """Count of full opcode forms ("LDG.E.NA.128.CONSTANT", ...)."""
    return Counter(i.form for i in _select(sass, function))


def matches(form: str, prefix: str) -> bool:
    """Whether an opcode form matches a prefix (whole dot-separated parts; "X*" is raw)."""
    if prefix.endswith("*"):
        return form.startswith(prefix[:-1])
    return form == prefix or form.startswith(prefix + ".")


def find(sass: str, prefixes: str | Iterable[str], function: str | None = None) -> list[str]:
    """Instructions (predicate, form, operands) whose opcode matches any of `prefixes`."""
    wanted: Sequence[str] = (prefixes,) if isinstance(prefixes, str) else tuple(prefixes)
    return [i.text for i in _select(sass, function) if any(matches(i.form, p) for p in wanted)]


def has_any(sass: str, prefixes: str | Iterable[str], function: str | None = None) -> bool:
    """bool(find(sass, prefixes, function)), asked of the listing's distinct opcode forms (a few
    hundred) instead of every instruction (tens of thousands)."""
    wanted: Sequence[str] = (prefixes,) if isinstance(prefixes, str) else tuple(prefixes)
    return any(matches(f, p) for f in _forms(sass, function) for p in wanted)


def uses_local_memory(sass: str, function: str | None = None) -> bool:
    """True if any LDL/STL (spills or local arrays): slow, per-thread off-chip traffic."""
    return any(i.base in ("LDL", "STL") for i in _select(sass, function))


_WIDTHS = {"128": 128, "64": 64, "U8": 8, "S8": 8, "U16": 16, "S16": 16}


def access_widths(sass: str, base: str = "LDG", function: str | None = None) -> Counter:
    """Bits per thread of each `base` access ("LDG", "STG", "LDS", ...) -> count.
    The width is the .128/.64/.U16/.U8 modifier; no width modifier means 32 bits."""
    widths: Counter = Counter()
    for i in _select(sass, function):
        if i.base == base:
            parts = i.form.split(".")[1:]
            widths[next((_WIDTHS[p] for p in parts if p in _WIDTHS), 32)] += 1
    return widths


def load_widths(sass: str, function: str | None = None) -> Counter:
    """Global-load widths, e.g. Counter({128: 2, 32: 1}): 128 is the vectorised (LDG.E.128) kind."""
    return access_widths(sass, "LDG", function)


def store_widths(sass: str, function: str | None = None) -> Counter:
    return access_widths(sass, "STG", function)
