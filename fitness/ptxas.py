"""Reading `ptxas -v` (nvcc -Xptxas -v): registers, spills, stack and shared memory per kernel.

The static checks reject a candidate on these numbers before it ever reaches a GPU (a kernel that
spills or uses local memory is slow on Hopper whatever else it does), and the numbers are
features the search learns from, so they are parsed into plain frozen records.

What ptxas prints (CUDA 13.0, sm_90a; see tests/data/ptxas/ for captured logs):

    ptxas warning : Registers are spilled to local memory in function '_ZN2ns7k_spillEPKfPfi', ...
    ptxas info    : (C7508) Potential Performance Loss: 'setmaxnreg' ignored; unable to ...
    ptxas info    : 132 bytes gmem
    ptxas info    : Compiling entry function '_ZN2ns7k_spillEPKfPfi' for 'sm_90a'
    ptxas info    : Function properties for _ZN2ns7k_spillEPKfPfi
        160 bytes stack frame, 324 bytes spill stores, 336 bytes spill loads
    ptxas info    : Used 32 registers, used 0 barriers, 160 bytes cumulative stack size
    ptxas info    : Compile time = 13.754 ms
    ptxas info    : Function properties for _Z6helperPKfi          (a non-inlined device function)
        0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

Older toolkits (CUDA 12) also print "N bytes smem, N bytes cmem[0]" on the Used line (13.0 prints
smem but no cmem); both forms are read. Warnings come before the functions they name; a warning
naming no function (C7508 above) belongs to the module and is attached to every function, since
ptxas does not say which one it meant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers(.*)")
_GMEM_RE = re.compile(r"ptxas info\s*:\s*(\d+) bytes gmem")
_CODE_RE = re.compile(r"ptxas info\s*:\s*\(C\d+\)|ptxas \S+, line \d+; warning\s*:")


@dataclass(frozen=True)
class ResourceReport:
    """ptxas's account of one function. `entry` is False for a non-inlined device function
    (ptxas reports only its frame and spills). Sizes are bytes; `shared_bytes` is static shared
    memory only (dynamic shared memory is chosen at launch)."""

    kernel: str
    arch: str = ""
    registers: int = 0
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    shared_bytes: int = 0
    constant_bytes: int = 0          # sum over cmem banks, when the toolkit prints them
    barriers: int = 0
    warnings: tuple[str, ...] = ()
    entry: bool = True
    cumulative_stack_bytes: int = 0  # frame plus callees' frames (CUDA 13)
    gmem_bytes: int = 0              # module-level __device__ variables (same for every function)

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes

    def to_dict(self) -> dict:
        d = self.__dict__.copy()
        d["warnings"] = list(self.warnings)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ResourceReport":
        d = dict(d)
        d["warnings"] = tuple(d.get("warnings", ()))
        return cls(**d)


@dataclass
class _Acc:
    """Mutable accumulator while reading one function's lines."""

    kernel: str
    arch: str = ""
    entry: bool = False
    nums: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)


def _parse_used(acc: _Acc, registers: str, rest: str) -> None:
    acc.nums["registers"] = int(registers)
    for item in (s.strip() for s in rest.split(",") if s.strip()):
        if m := re.fullmatch(r"used (\d+) barriers?", item):
            acc.nums["barriers"] = int(m.group(1))
        elif m := re.fullmatch(r"(\d+) bytes smem", item):
            acc.nums["shared_bytes"] = int(m.group(1))
        elif m := re.fullmatch(r"(\d+) bytes cmem\[\d+\]", item):
            acc.nums["constant_bytes"] = acc.nums.get("constant_bytes", 0) + int(m.group(1))
        elif m := re.fullmatch(r"(\d+) bytes cumulative stack size", item):
            acc.nums["cumulative_stack_bytes"] = int(m.group(1))
        # textures, samplers, surfaces and future fields are ignored on purpose


def _is_warning(line: str) -> bool:
    return line.startswith("ptxas warning") or bool(_CODE_RE.match(line))


def _warning_text(line: str) -> str:
    """The message without the "ptxas info    :" / "ptxas warning :" tag."""
    m = re.match(r"ptxas[^:]*?(?:info|warning)\s*:\s*", line)
    return line[m.end():].strip() if m else line.strip()


def parse_ptxas(log: str) -> dict[str, ResourceReport]:
    """Every function ptxas reported in `log` (nvcc output with -Xptxas -v), by (mangled) name.

    Lines that are not ptxas's (nvcc front-end diagnostics, anything else) are ignored, so the
    whole merged stdout+stderr of nvcc can be passed. With several target architectures in one
    log the last one reported wins; the compiler here always compiles one.
    """
    funcs: dict[str, _Acc] = {}
    current: _Acc | None = None
    gmem = 0
    warnings: list[str] = []
    for raw in log.splitlines():
        line = raw.strip()
        if _is_warning(line):
            warnings.append(_warning_text(line))
        elif m := _ENTRY_RE.search(line):
            current = funcs.setdefault(m.group(1), _Acc(m.group(1)))
            current.arch, current.entry = m.group(2), True
        elif m := _PROPS_RE.search(line):
            current = funcs.setdefault(m.group(1), _Acc(m.group(1)))
        elif m := _FRAME_RE.search(line):
            if current is not None:
                current.nums.update(stack_frame_bytes=int(m.group(1)), spill_store_bytes=int(m.group(2)),
                                    spill_load_bytes=int(m.group(3)))
        elif m := _USED_RE.search(line):
            if current is not None:
                _parse_used(current, m.group(1), m.group(2))
        elif m := _GMEM_RE.search(line):
            gmem = int(m.group(1))
    for text in warnings:
        named = [n for n in _quoted_names(text) if n in funcs]
        for acc in ([funcs[n] for n in named] if named else funcs.values()):
            acc.warnings.append(text)
    return {name: ResourceReport(kernel=name, arch=acc.arch, entry=acc.entry, gmem_bytes=gmem,
                                 warnings=tuple(acc.warnings), **acc.nums)
            for name, acc in funcs.items()}


def _quoted_names(text: str) -> list[str]:
    return re.findall(r"['\"]([^'\"]+)['\"]", text)


def module_warnings(log: str) -> list[str]:
    """Every ptxas warning line of a log, including those naming no function."""
    return [_warning_text(l.strip()) for l in log.splitlines() if _is_warning(l.strip())]
