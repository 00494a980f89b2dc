"""The kernel-family contract: what a folder in kernels/ provides to the judge.

A family folder `kernels/<name>/` holds `family.py` defining `FAMILY`, an instance of a
`KernelFamily` subclass, plus its CUDA C++ templates. Families are loaded by path (kernels/ is a
data folder, not a package) with `load_family(name)`.

The judge never knows what operation it is judging: every operation-specific fact (reference,
inputs, tolerances, bytes moved, launch geometry, promised instructions, baselines) comes from
here, so a new operation needs only a folder in kernels/ and a gene space in genomes/.
"""

from __future__ import annotations

import abc
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from genomes import Genome

KERNELS_DIR = Path(__file__).resolve().parent.parent / "kernels"


@dataclass(frozen=True)
class Case:
    """One problem instance, e.g. RMSNorm bf16 32768 x 4096. `id` is stable across runs."""

    id: str
    params: Mapping[str, Any]


@dataclass(frozen=True)
class Tolerance:
    """An output passes when |out - ref| <= atol + rtol*|ref| elementwise and the relative L2
    error ||out - ref|| / ||ref|| <= rel_l2 (None skips the L2 test), over the elements whose
    float64 reference is finite. A non-finite reference is a broken input unless
    `match_nonfinite`: then the output must be NaN where the reference is NaN (the poison
    pattern never counts as one) and the same infinity where it is infinite, i.e. the float64
    reference with IEEE semantics is the family's stated rule for non-finite inputs.

    `group_rel_l2` bounds the relative L2 error within every group of elements too, so that a
    wrong token, row or boundary cannot hide under the whole output's norm (one wrong token of
    one head is 1e-6 of a KDA output). A group is a range of rows of axis 0 (the boundaries
    `group_rows`, e.g. a packed batch's cu_seqlens; empty: every row its own group) times one
    index of axes 1 .. group_axes - 1: o [T, H, V] with group_rows = cu_seqlens and group_axes
    = 2 is judged per (sequence, head). `group_scale` says what a group's error is measured
    against: "own", its own reference (||err_g|| / ||ref_g||: a relative RMS error per group), or
    "whole", the whole reference's RMS (RMS(err_g) / RMS(ref): an atol relative to the output's
    scale, applied per group, which small groups of tiny values cannot trip; with group_rows
    empty and group_axes = 2, every (token, head) row of an o [T, H, V] is held to it). An empty
    group passes; in a group whose reference is all zeros the error's own norm is held to the
    bound (as the whole-output test does). Not applied to sampled references."""

    atol: float
    rtol: float
    rel_l2: float | None = None
    match_nonfinite: bool = False
    group_rel_l2: float | None = None
    group_axes: int = 1
    group_rows: tuple[int, ...] = ()
    group_scale: str = "own"

    def __post_init__(self) -> None:
        if self.group_rel_l2 is None:
            return
        rows = tuple(int(r) for r in self.group_rows)
        if not isinstance(self.group_axes, int) or self.group_axes < 1:
            raise ValueError(f"Tolerance.group_axes must be an int >= 1, got {self.group_axes!r}")
        if rows and (rows[0] != 0 or any(b < a for a, b in zip(rows, rows[1:]))):
            raise ValueError(f"Tolerance.group_rows must start at 0 and never decrease, got {rows[:8]}...")
        if self.group_scale not in ("own", "whole"):
            raise ValueError(f"Tolerance.group_scale must be 'own' or 'whole', got {self.group_scale!r}")
        object.__setattr__(self, "group_rows", rows)


@dataclass(frozen=True)
class Buffer:
    """A kernel parameter that is a device buffer of the case: an input or output of `io`, or a
    workspace buffer, by name; the kernel receives its device pointer."""

    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Buffer needs the name of one of the case's buffers, got {self.name!r}")


@dataclass(frozen=True)
class ByValue:
    """A kernel parameter passed by value as raw bytes: a struct the kernel takes by value, e.g. a
    128-byte CUtensorMap (a TMA descriptor, `const __grid_constant__ CUtensorMap`, align 64).
    `align` (a power of two, at most 128) is the C type's alignment; the bytes are the value as
    the device reads it. `what` names it in messages."""

    data: bytes
    align: int = 8
    what: str = ""

    def __repr__(self) -> str:
        return f"ByValue({len(self.data)} bytes, align={self.align}{f', what={self.what!r}' if self.what else ''})"

    def __post_init__(self) -> None:
        if not isinstance(self.data, (bytes, bytearray)) or not self.data:
            raise ValueError(f"ByValue{f' {self.what}' if self.what else ''}: data must be non-empty bytes")
        if not isinstance(self.align, int) or self.align < 1 or self.align > 128 or self.align & (self.align - 1):
            raise ValueError(f"ByValue{f' {self.what}' if self.what else ''}: align must be a power of two "
                             f"from 1 to 128, got {self.align!r}")
        if len(self.data) % self.align:
            raise ValueError(f"ByValue{f' {self.what}' if self.what else ''}: {len(self.data)} bytes is not a "
                             f"multiple of its alignment {self.align} (a C struct's size always is)")


#: one kernel parameter: a device buffer, NULL (None), a numpy scalar of the parameter's exact
#: type (np.int32(M), np.float32(eps), np.uint64(...)), or raw bytes by value
KernelArg = Buffer | ByValue | np.generic | None


def kernel_arg(a: Any, index: int = 0) -> KernelArg:
    """One Launch.args entry in its explicit kind: a plain string is the Buffer of that name (the
    older form, still accepted); None, numpy integer/float scalars, Buffer and ByValue as they are.
    ValueError naming the index otherwise (a plain Python int or float has no width: cupy would
    pass it as 64 bits)."""
    if isinstance(a, str):
        return Buffer(a)
    if a is None or isinstance(a, (Buffer, ByValue)):
        return a
    if isinstance(a, np.generic) and a.dtype.kind in "biuf":
        return a
    raise ValueError(f"Launch.args[{index}] = {a!r} ({type(a).__name__}): pass Buffer(name) (or the name), None "
                     "(NULL), a numpy scalar such as np.int32(...)/np.float32(...), or ByValue(bytes, align)")


@dataclass(frozen=True)
class Launch:
    """How to launch one rendered kernel for one case.

    `args` lists the kernel parameters in order, each a `KernelArg`: `Buffer("x")` (or the plain
    string "x") for a device buffer of the case, None for a NULL pointer, a numpy scalar of the
    parameter's type (np.int32(M), np.float32(eps), ...), or `ByValue(bytes, align)` for a struct
    by value (TMA descriptors). `typed_args()` gives them in their explicit kinds.

    `cluster`: CTAs per thread-block cluster. A kernel compiled with `__cluster_dims__` gets that
    cluster from an ordinary launch (then `cluster` must repeat it, or be (1, 1, 1)); one compiled
    without it gets `cluster` at launch time (cuLaunchKernelEx with a cluster-dimension
    attribute; 9 to 16 CTAs are non-portable on sm_90 and opted in per kernel). The grid must be
    a multiple of the cluster either way.

    `overlap`: this launch may begin before the previous launch of the case has finished
    (programmatic dependent launch: cuLaunchKernelEx with the programmatic-stream-serialization
    attribute). Its CTAs can be scheduled once every CTA of the previous kernel has executed
    `griddepcontrol.launch_dependents` (or exited), so the kernel must not read what the previous
    one writes without its own synchronization (`griddepcontrol.wait`, or flags the previous kernel
    stores with release semantics and this one loads with acquire). It is a permission, never a
    promise: a runner that cannot overlap launches it after the previous one, which is always
    correct; so must be a kernel that spins on flags (it may never wait on a later launch).
    """

    kernel: str                         # extern "C" entry name in the rendered source
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[Any, ...]
    shared_bytes: int = 0               # dynamic shared memory
    cluster: tuple[int, int, int] = (1, 1, 1)
    overlap: bool = False               # may start before the previous launch ends (PDL)

    def typed_args(self) -> tuple[KernelArg, ...]:
        """`args` in their explicit kinds (kernel_arg); ValueError naming a bad one."""
        return tuple(kernel_arg(a, i) for i, a in enumerate(self.args))


@dataclass(frozen=True)
class KeyField:
    """One case parameter a dispatch table is keyed by: `name` is its key in `Case.params` (and the
    field name in the JSON files the engine writes: dispatch tables, playoffs), `label` its header
    in tables ("" -> the name)."""

    name: str
    label: str = ""

    @property
    def title(self) -> str:
        return self.label or self.name


@dataclass(frozen=True, order=True)
class KeyPoint:
    """Where a case sits in a dispatch table: `group`, the values of the key's exact fields (what a
    table splits on, e.g. ("bf16",)), and `at`, the value of its ordered field (e.g. a row width;
    0 when the key has none). Ordered, so tables and playoffs list points in one stable order."""

    group: tuple[str, ...]
    at: int = 0


@dataclass(frozen=True)
class DispatchKey:
    """How a family's table of winners is keyed (`KernelFamily.dispatch_key()`), so that the engine
    builds, prints, writes and reads dispatch tables without knowing any family's parameters.

    `exact`: case parameters a table splits on (values compared as strings, e.g. a dtype); one
    group of ranges per distinct tuple of values. `ordered`: the integer case parameter whose
    ranges a group covers (e.g. a row width), or None: each group is one open range. `shape`: the
    case parameters that say a case's size in tables, joined "M x N"; with `exact`, they are the
    case columns of a run's frames (`columns`). In JSON, a range is written `<ordered>_min` /
    `<ordered>_max` (lower-cased, e.g. n_min / n_max), a point by its field names.

    The key is computed from a case's parameters (`point`), which every record stores, so a
    recorded run is keyed the same way without running the family's code again: a derived key
    belongs in `Case.params` when the family makes the case."""

    exact: tuple[KeyField, ...] = ()
    ordered: KeyField | None = None
    shape: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        if any(not isinstance(n, str) or not n for n in names) or len(set(names)) != len(names):
            raise ValueError(f"DispatchKey fields must be distinct non-empty case parameter names, got {names}")
        if any(not isinstance(s, str) or not s for s in self.shape):
            raise ValueError(f"DispatchKey.shape must name case parameters, got {self.shape!r}")

    @property
    def fields(self) -> tuple[KeyField, ...]:
        return self.exact + ((self.ordered,) if self.ordered is not None else ())

    @property
    def columns(self) -> tuple[str, ...]:
        """The case parameters that identify a case in tables and frames: shape, then the rest of
        the key, each once."""
        return tuple(dict.fromkeys([*self.shape, *(f.name for f in self.fields)]))

    @property
    def range_names(self) -> tuple[str, str] | None:
        """JSON names of a range's bounds (`<ordered>_min`, `<ordered>_max`); None without an ordered field."""
        if self.ordered is None:
            return None
        base = self.ordered.name.lower()
        return f"{base}_min", f"{base}_max"

    def point(self, params: Mapping[str, Any] | Case) -> KeyPoint:
        """The key of a case (or of its parameters, or of a JSON object holding the key's fields):
        ValueError naming the missing field."""
        p = params.params if isinstance(params, Case) else params
        missing = [f.name for f in self.fields if p.get(f.name) is None]
        if missing:
            raise ValueError(f"case parameters {sorted(p)} lack the dispatch key field(s) {missing} "
                             "(the family's dispatch_key() names them)")
        group = tuple(str(p[f.name]) for f in self.exact)
        return KeyPoint(group, int(p[self.ordered.name]) if self.ordered is not None else 0)

    def to_json(self, point: KeyPoint) -> dict[str, Any]:
        """A point as JSON fields (what `point` reads back)."""
        out: dict[str, Any] = {f.name: v for f, v in zip(self.exact, point.group)}
        if self.ordered is not None:
            out[self.ordered.name] = point.at
        return out

    def describe(self, point: KeyPoint) -> str:
        """A point in words for progress lines, e.g. "bf16 N=1024"."""
        parts = list(point.group)
        if self.ordered is not None:
            parts.append(f"{self.ordered.title}={point.at}")
        return " ".join(parts) or "all cases"

    def slug(self, point: KeyPoint) -> str:
        """A point as one path-like token, e.g. "bf16/1024" (provenance files)."""
        return "/".join([*point.group, *([str(point.at)] if self.ordered is not None else [])]) or "all"

    def shape_of(self, params: Mapping[str, Any]) -> str:
        """A case's size, e.g. "32768 x 4096" (shape parameters joined)."""
        return " x ".join(str(params.get(s)) for s in self.shape)

    @property
    def shape_title(self) -> str:
        return " x ".join(self.shape)


def credited_check_cases(key: DispatchKey, bench: Sequence[Case], check: Sequence[Case]) -> tuple[Case, ...]:
    """The check cases a candidate must pass when it is timed on `bench`: those of every dispatch
    group (the key's exact fields, e.g. a dtype) some benchmark case credits, and those that name
    no group. A group no benchmark case times is never served by a dispatch table built from the
    run, so checking it verifies nothing a record credits: a bf16-only slice (issue 19) checks the
    bf16 check cases, 48 of the forward's 144, at a third of the CHECK time per genome; a matrix
    of every dtype checks every case, as before."""
    if not key.exact:
        return tuple(check)

    def group(c: Case) -> tuple[str, ...] | None:
        vals = [c.params.get(f.name) for f in key.exact]
        return None if any(v is None for v in vals) else tuple(str(v) for v in vals)

    credited = {group(c) for c in bench} - {None}
    return tuple(c for c in check if group(c) is None or group(c) in credited)


#: the key of a family that declares none (and of a run whose family is not in kernels/): no
#: exact fields, no ordered field, so a dispatch table is one entry, the fastest genome overall
NO_DISPATCH_KEY = DispatchKey()


@dataclass(frozen=True)
class BufferSpec:
    shape: tuple[int, ...]
    dtype: str                           # numpy dtype name; "bfloat16" is carried as uint16 bits


@dataclass(frozen=True)
class Baseline:
    """A reference implementation timed beside candidates, e.g. torch or QuACK.

    `prepare(case, device_inputs)` returns a zero-argument callable that runs the baseline once
    on the device inputs (torch tensors or cupy arrays, as the baseline needs), or None when the
    baseline does not support the case; a `BaselineRun` when its result can be checked. It is
    called anew in every job (the inputs are new). `available()` says whether it can be imported.
    """

    name: str
    available: Callable[[], bool]
    prepare: Callable[[Case, Mapping[str, Any]], Callable[[], Any] | None]
    #: False for a reference that is not the operation (e.g. a plain copy of the same bytes, timed
    #: as the case's memory roofline): reported beside the others, never a run's speedup baseline
    objective: bool = True
    #: what a machine needs before this baseline can run (one line, the fix a user reads when
    #: it is missing: "pip install quack-kernels ...", "a checkout in .peers/... or EVO_..._ROOT")
    needs: str = ""


def importable(module: str) -> bool:
    """Whether `module` can be imported, found without importing it (a Baseline's `available`
    must not pull torch into a process that only lists baselines)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class BaselineRun:
    """A prepared baseline (what `Baseline.prepare` returns): call it to run once;
    `as_outputs(result)` maps its result to the family's output names in storage form (bf16 as
    16-bit integers) so the judge can check it against the float64 reference in every job. A
    plain callable without `as_outputs` (e.g. a roofline copy) is timed and never checked."""

    def __init__(self, fn: Callable[[], Any], outputs: Callable[[Any], dict[str, Any]]):
        self._fn = fn
        self._outputs = outputs

    def __call__(self) -> Any:
        return self._fn()

    def as_outputs(self, result: Any) -> dict[str, Any]:
        return self._outputs(result)


class KernelFamily(abc.ABC):
    """An operation plus the templates that implement it. See kernels/rmsnorm/family.py."""

    name: str = ""
    space_name: str = ""                # the gene space in genomes/ (usually == name)
    #: make_inputs(..., xp=cupy) and reference(device arrays) work, so the judge makes and checks
    #: large cases on the device
    supports_device_arrays: bool = False
    #: input distributions (make_inputs' `distribution`): every candidate is verified and timed on
    #: each; the first is the typical one, the second adversarial magnitudes
    distributions: tuple[str, ...] = ("normal", "wide")

    # -- the operation ---------------------------------------------------------------------
    @abc.abstractmethod
    def benchmark_cases(self, matrix: str = "default") -> list[Case]:
        """The cases a candidate is timed on (the benchmark matrix named by the config)."""

    @abc.abstractmethod
    def check_cases(self) -> list[Case]:
        """Small, awkward cases for the cheap verification stage: shapes that divide no tile."""

    @abc.abstractmethod
    def io(self, case: Case) -> tuple[dict[str, BufferSpec], dict[str, BufferSpec]]:
        """(inputs, outputs) buffer specs for a case."""

    @abc.abstractmethod
    def make_inputs(self, case: Case, rng: np.random.Generator, distribution: str) -> dict[str, np.ndarray]:
        """Fresh host inputs. `distribution` is "normal" or "wide" (large and tiny magnitudes).
        Never all zeros. bf16 arrays are returned as uint16 bit patterns."""

    @abc.abstractmethod
    def reference(self, case: Case, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Float64 reference outputs, computed from the (already rounded) inputs."""

    @abc.abstractmethod
    def tolerances(self, case: Case) -> dict[str, Tolerance]:
        """A tolerance per output buffer."""

    @abc.abstractmethod
    def bytes_moved(self, case: Case) -> int:
        """The fewest bytes the operation must move through device memory."""

    def flops(self, case: Case) -> int:
        """The fewest floating-point operations the operation must do (0: not counted). With
        bytes_moved, the roofline: a result faster than flops / tensor-core peak is suspect."""
        return 0

    def reference_sample(self, case: Case, inputs: Mapping[str, Any],
                         rng: np.random.Generator) -> dict[str, tuple[Any, Any]] | None:
        """For a case too large for a full float64 reference (e.g. a CHECK case of more than
        2**31 elements): per output, (flat indices, their float64 reference), on the inputs'
        device. The judge then checks every element written and finite and the sample within
        tolerance. None (the default): the full reference is used."""
        return None

    def reference_blocks(self, case: Case, inputs: Mapping[str, Any]) -> Iterable[tuple[str, int, Any]] | None:
        """The full float64 reference in blocks, for outputs whose whole reference would not fit
        beside what the judge holds (a 2**31-element output is 16 GiB in float64): an iterable,
        best a generator, of (output name, first flat index, float64 values), ascending and
        without gaps per output, covering every output once; the judge checks each block as it
        comes and drops it (verify.OutputCheck). Must agree with `reference` (a contract test
        assembles it). None (the default): `reference` whole. Not for tolerances with groups."""
        return None

    def nondeterministic_outputs(self, case: Case) -> Sequence[str]:
        """Outputs that may differ bit for bit between launches on the same inputs (e.g. reduced
        with atomics). Every other output must be identical on every timed launch."""
        return ()

    # -- the kernels -----------------------------------------------------------------------
    @abc.abstractmethod
    def render(self, genome: Genome) -> str:
        """CUDA C++ (with inline PTX) source for a genome. Pure: same genome, same text."""

    @abc.abstractmethod
    def launch(self, genome: Genome, case: Case) -> Launch | Sequence[Launch] | None:
        """Launch geometry for a case: one Launch, or several run in order and timed as one (e.g.
        partial sums into a workspace, then their reduction); None when the genome cannot handle
        the case (then it is recorded as unsupported for this genome, never silently skipped)."""

    def workspace(self, case: Case) -> dict[str, BufferSpec]:
        """Scratch buffers a case's launches may use (named in Launch.args like inputs and outputs):
        poisoned before every launch sequence and guarded like outputs, never judged. A kernel
        must write what it reads there: nothing carries over between launches."""
        return {}

    def promises(self, genome: Genome) -> dict[str, Sequence[str]]:
        """SASS evidence a genome promises: {"TMA": ["UBLKCP", "UTMALDG"], ...}. A compiled
        candidate missing any promised opcode family is INVALID."""
        return {}

    def resource_limits(self, genome: Genome) -> dict[str, int]:
        """Static limits checked on the ptxas report, e.g. {"spill_bytes": 0, "registers": 255}."""
        return {"spill_bytes": 0}

    def compile_flags(self, genome: Genome) -> list[str]:
        """Extra nvcc flags a genome asks for (e.g. -maxrregcount)."""
        return []

    def baselines(self) -> list[Baseline]:
        return []

    # -- how results are keyed -------------------------------------------------------------
    def dispatch_key(self) -> DispatchKey:
        """How a table of winners is keyed (`evo dispatch`, `playoff`, `report`, `table` and
        `export` all go through it). Default: no key, one winner for every case."""
        return NO_DISPATCH_KEY

    def shape_class(self, params: Mapping[str, Any]) -> str:
        """The shape class a case belongs to (what lessons are filed under, evo.lesson_build): cases
        whose best kernels tend to share their structure. Computed from a case's recorded
        parameters, like the dispatch key. Default: the dispatch key's exact group (e.g. the
        dtype), or "all" for a family without one."""
        point = self.dispatch_key().point(params)
        return "/".join(point.group) or "all"

    def export_groups(self) -> list[tuple[str, ...]]:
        """The groups (values of the dispatch key's exact fields) an exported package serves, in
        the family's order; a group the run did not time reuses the ranges of the first measured
        group in this order (the same kernels, verified by the package's tests, not tuned).
        Default: only the groups the run measured."""
        return []

    def export_settings(self) -> dict[str, str]:
        """Family facts an exported package needs beside its dispatch table (e.g. the weight dtype
        its kernels were compiled for): written into its dispatch.json after "arch" and substituted
        into the export templates as `__NAME__` (the key upper-cased)."""
        return {}

    def export_templates(self) -> Path | None:
        """The folder of the family's export templates (`evo export`: __init__.py.tmpl,
        bench.py.tmpl, test_pkg.py.tmpl, and the README's usage.md.tmpl / files.md.tmpl): by
        default `export/` beside the family's file; None when there is none."""
        module = sys.modules.get(type(self).__module__)
        path = getattr(module, "__file__", None)
        folder = Path(path).resolve().parent / "export" if path else None
        return folder if folder is not None and folder.is_dir() else None

    def export_companions(self) -> dict[str, str]:
        """Families whose exported tables this family's package can carry beside its own, by role
        (`evo export RUN --with OTHER_RUN`): role -> family name, e.g. a forward naming its
        backward so that one package trains. A companion's table, kernels and `_geometry.py` go
        under `<package>/<role>/`; the templates under `export/<role>/` of this family wire them
        (and `#@with <role>` ... `#@end` blocks of its other templates are kept only then).
        Default: none."""
        return {}

    def export_launch_source(self) -> str | None:
        """Python source of a standalone module (standard library only) defining
        `launch(genome, **case_params) -> dict | None` with the keys kernel, grid, block,
        shared_bytes, cluster: the same geometry as `launch`, for packages made by `evo export`
        that must not import this project. None: the family cannot be exported."""
        return None


class FamilyNotFound(LookupError):
    pass


def available_families(root: Path = KERNELS_DIR) -> list[str]:
    return sorted(p.name for p in root.iterdir() if (p / "family.py").is_file()) if root.is_dir() else []


def load_family(name: str, root: Path = KERNELS_DIR) -> KernelFamily:
    path = root / name / "family.py"
    if not path.is_file():
        raise FamilyNotFound(
            f"no kernel family {name!r} in {root} (expected {path}); available: {available_families(root)}")
    mod_name = f"_kernels_{name}_family"
    if mod_name in sys.modules:
        module = sys.modules[mod_name]
    else:
        spec = importlib.util.spec_from_file_location(mod_name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    family = getattr(module, "FAMILY", None)
    if not isinstance(family, KernelFamily):
        raise FamilyNotFound(f"{path} must define FAMILY, an instance of fitness.family.KernelFamily")
    return family




def dispatch_key_of(name: str, root: Path = KERNELS_DIR) -> DispatchKey:
    """The dispatch key of the family `name` (how a recorded run of it is keyed), NO_DISPATCH_KEY
    when kernels/ holds no such family (frames of a run this checkout cannot judge still load)."""
    try:
        return load_family(name, root).dispatch_key() if name else NO_DISPATCH_KEY
    except FamilyNotFound:
        return NO_DISPATCH_KEY


def import_sibling(family_file: str, module: str):
    """Import `module`.py from the folder of a family file (kernels/ is not a package)."""
    path = Path(family_file).resolve().parent / f"{module}.py"
    mod_name = f"_kernels_{path.parent.name}_{module}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    spec.loader.exec_module(mod)
    return mod
