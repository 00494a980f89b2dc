"""Raw-source candidates: CUDA C++ device code plus a launch description, judged like a genome.

A template family turns a genome into source and a launch; a raw candidate brings both itself:
an LLM's new kernel, an outside kernel, or a test's cheat. It goes through exactly the stages a
genome goes through (compile -> static checks -> CHECK -> BENCH, fitness.cascade), against the
operation half of a family (its io, inputs, float64 reference, tolerances, baselines); only the
family's render/launch are replaced by the candidate's own.

    raw = RawSource(family="rmsnorm", source=cu_text, launch=LaunchSpec(
        kernel="rmsnorm_fwd", grid=("M", 1, 1), block=(256, 1, 1),
        args=("x", "w", "y", "rstd", "i32:M", "i32:N", "f32:eps")))
    evaluations = gpu_evaluator.evaluate_raw([raw])

The launch geometry is written as small expressions over the case's parameters ("cdiv(M, 4)",
"min(N // 8, 1024)", "256 if N <= 4096 else 512"), evaluated by a whitelist interpreter (numbers,
parameter names, + - * // % and comparisons, and/or/not, `a if c else b`, min/max/cdiv/abs): no
Python from a proposal ever runs. `when` (an expression) says which cases the kernel handles; a
case it does not handle is recorded as unsupported, as for a genome whose launch() returns None.

Kernel arguments bind, in order: a buffer name of the family's io() (an input, an output, or a
workspace), "null" (a NULL pointer), or "<type>:<expr>" for a scalar passed by value, with type
one of i32, u32, i64, u64, f32, f64.

Safety: only device code is compiled (to a cubin; no host code from a candidate ever runs), an
`#include` must name a header of INCLUDE_ALLOWLIST, extra nvcc flags must match FLAG_PATTERNS,
and the source is at most MAX_SOURCE_BYTES. `problems()` lists every violation; the evaluator
records a candidate with any as INVALID before it reaches the compiler.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fitness.family import Case, KernelFamily, Launch

MAX_SOURCE_BYTES = 256 * 1024
INCLUDE_ALLOWLIST = frozenset({
    "cuda_bf16.h", "cuda_fp16.h", "cuda_fp8.h", "stdint.h", "cstdint", "cuda_runtime.h",
    "cuda_pipeline.h", "cuda_pipeline_primitives.h", "cooperative_groups.h", "cooperative_groups/reduce.h",
    "cooperative_groups/memcpy_async.h", "cuda/barrier", "cuda/pipeline", "cuda/ptx", "cuda/std/cstdint",
    "mma.h", "cuda_awbarrier_primitives.h", "math_constants.h", "vector_types.h", "vector_functions.h",
})
FLAG_PATTERNS = (re.compile(r"-maxrregcount=\d{1,3}"), re.compile(r"-lineinfo"), re.compile(r"--use_fast_math"),
                 re.compile(r"-Xptxas=-v"), re.compile(r"--extra-device-vectorization"))
SCALAR_TYPES = {"i32": np.int32, "u32": np.uint32, "i64": np.int64, "u64": np.uint64,
                "f32": np.float32, "f64": np.float64}
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)
_FUNCS = {"min": min, "max": max, "abs": abs, "cdiv": lambda a, b: -(-a // b)}
_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b, ast.Div: lambda a, b: a / b}
_CMPOPS = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
           ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}


class ExpressionError(ValueError):
    """A launch expression that is not in the whitelisted language, or fails on a case."""


def evaluate(expr: str | int | float, params: Mapping[str, Any]) -> Any:
    """The value of one launch expression over a case's parameters (see the module doc)."""
    if isinstance(expr, bool) or not isinstance(expr, (str, int, float)):
        raise ExpressionError(f"an expression is a string or a number, not {expr!r}")
    if not isinstance(expr, str):
        return expr
    if len(expr) > 500:
        raise ExpressionError(f"expression longer than 500 characters: {expr[:40]!r}...")
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"cannot parse {expr!r}: {exc.msg}") from None

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool, str)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in params:
                v = params[node.id]
                if isinstance(v, (int, float, bool, str, np.integer, np.floating)):
                    return v.item() if isinstance(v, np.generic) else v
                raise ExpressionError(f"parameter {node.id!r} = {v!r} is not a number or a string")
            if node.id in ("True", "False"):
                return node.id == "True"
            raise ExpressionError(f"unknown name {node.id!r} in {expr!r}; the case has {sorted(params)}")
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod, ast.Div)) and b == 0:
                raise ExpressionError(f"division by zero in {expr!r}")
            return _BINOPS[type(node.op)](a, b)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else (+v if isinstance(node.op, ast.UAdd) else not v)
        if isinstance(node, ast.BoolOp):
            vals = [ev(v) for v in node.values]
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Compare) and all(type(o) in _CMPOPS for o in node.ops):
            left = ev(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = ev(right_node)
                if not _CMPOPS[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return ev(node.body) if ev(node.test) else ev(node.orelse)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
                and not node.keywords):
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise ExpressionError(f"{ast.dump(node)[:60]} is not allowed in a launch expression ({expr!r})")

    return ev(tree)


def _int(expr: Any, params: Mapping[str, Any], what: str) -> int:
    v = evaluate(expr, params)
    if isinstance(v, float) and not v.is_integer():
        raise ExpressionError(f"{what} = {expr!r} gives {v}, not an integer")
    return int(v)


@dataclass(frozen=True)
class LaunchSpec:
    """How to launch a raw kernel for any case: expressions over the case's parameters."""

    kernel: str
    grid: tuple[Any, Any, Any]
    block: tuple[Any, Any, Any]
    args: tuple[str, ...]
    shared_bytes: Any = 0
    cluster: tuple[Any, Any, Any] = (1, 1, 1)
    when: str = ""                       # empty: every case

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "grid": list(self.grid), "block": list(self.block),
                "args": list(self.args), "shared_bytes": self.shared_bytes, "cluster": list(self.cluster),
                "when": self.when}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LaunchSpec":
        known = {"kernel", "grid", "block", "args", "shared_bytes", "cluster", "when"}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"launch: unknown keys {sorted(unknown)}; known: {sorted(known)}")
        for need in ("kernel", "grid", "block", "args"):
            if need not in d:
                raise ValueError(f"launch: missing {need!r}")

        def triple(v: Any, name: str) -> tuple[Any, Any, Any]:
            v = list(v) if isinstance(v, (list, tuple)) else [v]
            if not 1 <= len(v) <= 3:
                raise ValueError(f"launch.{name} must have 1 to 3 entries, got {v!r}")
            return tuple(v + [1] * (3 - len(v)))  # type: ignore[return-value]

        if not isinstance(d["kernel"], str) or not re.fullmatch(r"[A-Za-z_]\w*", d["kernel"]):
            raise ValueError(f"launch.kernel must be a C identifier, got {d['kernel']!r}")
        if not isinstance(d["args"], (list, tuple)) or not all(isinstance(a, str) for a in d["args"]):
            raise ValueError("launch.args must be a list of strings (buffer names, 'null' or 'type:expr')")
        return cls(kernel=d["kernel"], grid=triple(d["grid"], "grid"), block=triple(d["block"], "block"),
                   args=tuple(d["args"]), shared_bytes=d.get("shared_bytes", 0),
                   cluster=triple(d.get("cluster", [1, 1, 1]), "cluster"), when=str(d.get("when", "") or ""))

    def resolve(self, case: Case) -> Launch | None:
        """The Launch for a case, or None when `when` says the kernel does not handle it.
        Raises ExpressionError for an expression that fails on this case."""
        p = dict(case.params)
        if self.when and not evaluate(self.when, p):
            return None
        args: list[Any] = []
        for i, a in enumerate(self.args):
            if a == "null":
                args.append(None)
            elif ":" in a:
                ty, _, expr = a.partition(":")
                if ty not in SCALAR_TYPES:
                    raise ExpressionError(f"args[{i}] = {a!r}: scalar type must be one of {sorted(SCALAR_TYPES)}")
                args.append(SCALAR_TYPES[ty](evaluate(expr, p)))
            else:
                args.append(a)                           # a buffer name, checked by the runner
        return Launch(kernel=self.kernel,
                      grid=tuple(_int(g, p, "grid") for g in self.grid),            # type: ignore[arg-type]
                      block=tuple(_int(b, p, "block") for b in self.block),         # type: ignore[arg-type]
                      args=tuple(args), shared_bytes=_int(self.shared_bytes, p, "shared_bytes"),
                      cluster=tuple(_int(c, p, "cluster") for c in self.cluster))   # type: ignore[arg-type]


@dataclass(frozen=True)
class RawSource:
    """A candidate given as source: judged by the operation of `family` (kernels/<family>)."""

    family: str
    source: str
    launch: LaunchSpec
    flags: tuple[str, ...] = ()
    promises: Mapping[str, tuple[str, ...]] = field(default_factory=dict)   # SASS evidence it claims
    origin: str = ""                     # who wrote it: an operator name, "test", "outside:<repo>"
    parent: str = ""                     # key of the genome or raw source it was derived from
    note: str = ""                       # its author's rationale (stored, never executed)

    @property
    def space(self) -> str:
        return f"{self.family}/raw"

    @property
    def source_sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    @property
    def key(self) -> str:
        """20 hex digits over what decides the machine code and its launch (not origin/note)."""
        blob = json.dumps({"family": self.family, "source": self.source_sha256, "launch": self.launch.to_dict(),
                           "flags": list(self.flags)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]

    def as_dict(self) -> dict[str, Any]:
        """What the store records as the candidate's "genome" (the source itself goes to the
        evaluation's artifacts, under raw_source)."""
        return {"raw": True, "source_sha256": self.source_sha256, "launch": self.launch.to_dict(),
                "flags": list(self.flags), "origin": self.origin, "parent": self.parent}

    def problems(self) -> list[str]:
        """Every reason this candidate may not be compiled (empty: it may)."""
        out = []
        size = len(self.source.encode())
        if size > MAX_SOURCE_BYTES:
            out.append(f"source is {size} bytes, more than {MAX_SOURCE_BYTES}")
        for inc in _INCLUDE.findall(self.source):
            if inc.strip() not in INCLUDE_ALLOWLIST:
                out.append(f"#include <{inc}> is not allowed (allowed: {', '.join(sorted(INCLUDE_ALLOWLIST))})")
        for f in self.flags:
            if not any(p.fullmatch(f) for p in FLAG_PATTERNS):
                out.append(f"nvcc flag {f!r} is not allowed")
        if not re.search(r"\b" + re.escape(self.launch.kernel) + r"\b", self.source):
            # the precise check is on the compiled cubin's entries (fitness.static_checks): a macro
            # may generate the extern "C" declaration; a name absent from the text cannot be there
            out.append(f"the source never names the kernel {self.launch.kernel!r} its launch calls")
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, base_dir: Path | None = None) -> "RawSource":
        """From JSON-like data: {"family", "source" or "source_file", "launch", "flags"?, ...}."""
        if "source" in d:
            source = str(d["source"])
        elif "source_file" in d:
            path = Path(d["source_file"])
            source = (base_dir / path if base_dir and not path.is_absolute() else path).read_text()
        else:
            raise ValueError("a raw source needs 'source' (text) or 'source_file' (a path)")
        return cls(family=str(d["family"]), source=source, launch=LaunchSpec.from_dict(d["launch"]),
                   flags=tuple(d.get("flags", ())), promises={k: tuple(v) for k, v in dict(d.get("promises", {})).items()},
                   origin=str(d.get("origin", "")), parent=str(d.get("parent", "")), note=str(d.get("note", "")))


class RawFamily(KernelFamily):
    """A family's operation with raw candidates' kernels: render/launch come from the candidate,
    everything else (io, inputs, reference, tolerances, cases, baselines, bytes) from `base`."""

    def __init__(self, base: KernelFamily):
        self.base = base
        self.name = base.name
        self.space_name = ""

    def __getattr__(self, item: str) -> Any:          # only reached for what this class lacks
        return getattr(self.base, item)

    # the operation: the base family's
    def benchmark_cases(self, matrix: str = "default") -> list[Case]:
        return self.base.benchmark_cases(matrix)

    def check_cases(self) -> list[Case]:
        return self.base.check_cases()

    def io(self, case: Case):
        return self.base.io(case)

    def make_inputs(self, case: Case, rng: Any, distribution: str, **kw: Any):
        return self.base.make_inputs(case, rng, distribution, **kw)

    def reference(self, case: Case, inputs: Mapping[str, Any]):
        return self.base.reference(case, inputs)

    def tolerances(self, case: Case):
        return self.base.tolerances(case)

    def bytes_moved(self, case: Case) -> int:
        return self.base.bytes_moved(case)

    def baselines(self):
        return self.base.baselines()

    # the kernels: the candidate's own
    def render(self, genome: Any) -> str:
        return genome.source

    def launch(self, genome: Any, case: Case) -> Launch | None:
        return genome.launch.resolve(case)

    def promises(self, genome: Any) -> dict[str, Sequence[str]]:
        return {k: list(v) for k, v in genome.promises.items()}

    def resource_limits(self, genome: Any) -> dict[str, int]:
        """As a template genome: no spills (a rewrite that spills is slower for a reason the
        evidence already names; the judge does not time it)."""
        return {"spill_bytes": 0}

    def compile_flags(self, genome: Any) -> list[str]:
        return list(genome.flags)


__all__ = ["ExpressionError", "FLAG_PATTERNS", "INCLUDE_ALLOWLIST", "LaunchSpec", "MAX_SOURCE_BYTES", "RawFamily",
           "RawSource", "SCALAR_TYPES", "evaluate"]
