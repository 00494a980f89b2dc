"""The baselines of one case, for one BENCH job: prepared on each input set, trial-run, checked.

Baselines are timed on the job's own fresh inputs, so their outputs are checked against the
float64 reference in every job (their last timed result on the first input set, against the
reference the candidate's last launch there is judged by), not once per case for the life of a
worker. Callables are prepared anew in every job (found by this very check: torch's adapter casts
the weight once when prepared, so a callable kept from an earlier job normalised by an old weight);
what cannot change between jobs (not importable, does not support the case) is remembered.
Since nothing prepared outlives its job, the runner drops the prepared callables, and the device
buffers they hold (a roofline's output, an autograd graph, torch views), when the case has been
timed (`BaselineCache.drop_runs`): a case's baselines never hold memory while another case runs.

Device memory: a baseline that runs out of it while prepared (or on its trial run) is retried
once after `release()` (the runner's: its caches dropped, every allocator's cached blocks freed,
cupy's and torch's alike, since neither can use the other's); a second out-of-memory error is that
baseline's note for this job ("unusable: out of device memory ..."), never a lasting one and never
the candidate's failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from fitness import dtypes, verify
from fitness.cuda_backend import STICKY_CUDA_ERRORS, first_line, format_bytes, is_out_of_memory, oom_bytes
from fitness.cuda_errors import clear_pending_errors
from fitness.family import BufferSpec, Case, KernelFamily
from fitness.guarded import spec_dtype


#: the note of a baseline whose module or checkout this machine lacks
NOT_IMPORTABLE = "not importable here"
#: what `_prepare_one` says of a baseline that ran out of device memory
OUT_OF_MEMORY = "out of memory"
#: how the note of such a baseline begins (after "unusable: ")
OUT_OF_DEVICE_MEMORY = "out of device memory"
#: notes that say the machine, not the case, keeps a baseline from running: a module or checkout
#: that is missing, a name the family does not offer, an import that fails when it is prepared
MACHINE_LEVEL = (NOT_IMPORTABLE, "not offered by the family", "unusable: ModuleNotFoundError",
                 "unusable: ImportError")


def baseline_notes(message: str | None, name: str) -> list[str]:
    """What a case's message says of baseline `name`: the text after each "baseline NAME: " part
    (the judge joins its notes with "; ")."""
    prefix = f"baseline {name}: "
    return [part[len(prefix):] for part in str(message or "").split("; ") if part.startswith(prefix)]


def machine_missing(cases: Sequence[Any], name: str) -> str:
    """'' or the note saying why baseline `name` cannot run on this machine at all, from the
    results of one job (a timed case without `name`'s time whose note is machine-level). A
    baseline that does not support one case, or fails on one case, is that case's gap, not this."""
    for cr in cases:
        if getattr(cr, "time_us", None) is None or name in (cr.baselines_us or {}):
            continue
        for note in baseline_notes(cr.message, name):
            if note.startswith(MACHINE_LEVEL):
                return f"baseline {name}: {note}"
    return ""


def lasting_gap(message: str, name: str) -> str:
    """'' or the note of a case's message saying that baseline `name` could not run on that case
    for a reason a new judgment on the same machine would meet again: it does not support the case,
    or it failed on it (e.g. INT21's "invalid argument" at fp32 8192x262144). Not a gap that lasts:
    running out of device memory (that depends on what else held memory then) and machine-level
    notes (another machine may have the baseline). How a carried verdict (search.carry_seeds) may
    stand on a case its primary baseline never timed."""
    for note in baseline_notes(message, name):
        if note.startswith(MACHINE_LEVEL) or OUT_OF_DEVICE_MEMORY in note:
            return ""
        if note.startswith(("does not support this case", "unusable: ")):
            return note
    return ""


@dataclass
class BaselineCache:
    """Per cached input buffers of a case: prepared callables and lasting notes."""

    runs: dict[tuple[str, int], Any] = field(default_factory=dict)     # (name, set) -> callable
    lasting: dict[str, str] = field(default_factory=dict)              # name -> why it is never usable

    def drop_runs(self) -> None:
        """Forget the prepared callables (and with them the device memory they hold); `prepare`
        makes them anew in every job anyway. The lasting notes stay."""
        self.runs.clear()


def _result_arrays(xp: Any, fn: Any, result: Any, outs: Mapping[str, BufferSpec],
                   judged: Any) -> tuple[dict[str, tuple[Any, str]], list[str]]:
    """({output: (storage array in the output's shape, dtype)} of a baseline's result, notes on
    outputs that come back in another width); only outputs in `outs` and `judged`."""
    arrays: dict[str, tuple[Any, str]] = {}
    notes: list[str] = []
    for out_name, value in fn.as_outputs(result).items():
        if out_name not in outs or out_name not in judged:
            continue
        dt = spec_dtype(outs[out_name])
        arr = xp.asarray(value)
        want = dtypes.storage_dtype(dt)
        if arr.dtype != want:
            if arr.dtype.itemsize != want.itemsize:
                notes.append(f"{out_name} comes back as {arr.dtype}, not {dtypes.numpy_name(dt)}")
                continue
            arr = arr.view(want)
        arrays[out_name] = (arr.reshape(tuple(outs[out_name].shape)), dt)
    return arrays, notes


def _note(name: str, notes: Sequence[str], results: Sequence[verify.CheckResult]) -> str:
    notes = [*notes, *(f"disagrees with the reference: {r.message}" for r in results if not r.ok)]
    return f"baseline {name}: " + "; ".join(notes) if notes else ""


def checkable(fn: Any) -> bool:
    """Whether a prepared baseline's result is checked against the reference: it maps its result to the
    family's outputs (`as_outputs`, fitness.family.BaselineRun); a plain callable (a roofline copy) is not."""
    return callable(getattr(fn, "as_outputs", None))


def check_result(xp: Any, fn: Any, result: Any, refs: Mapping[str, Any] | None, tols: Mapping[str, Any],
                 outs: Mapping[str, BufferSpec], name: str) -> str:
    """'' or why a baseline's result disagrees with the reference (a note, never a failure of
    the candidate). Baselines without `as_outputs` (a roofline copy) are not checked."""
    if not checkable(fn) or refs is None:
        return ""
    arrays, notes = _result_arrays(xp, fn, result, outs, refs)
    return _note(name, notes, [verify.check_output(arr, refs[o], tols[o], dt, name=o) for o, (arr, dt) in arrays.items()])


class BlockChecks:
    """A baseline's result judged against a reference made in blocks (guarded.feed_blocks: the
    candidate's blocks, fed to these checks too); `note()` afterwards, as `check_result` gives it."""

    def __init__(self, xp: Any, fn: Any, result: Any, tols: Mapping[str, Any], outs: Mapping[str, BufferSpec],
                 name: str):
        self.name = name
        self.checks: dict[str, verify.OutputCheck] = {}
        self.notes: list[str] = []
        if checkable(fn):
            arrays, self.notes = _result_arrays(xp, fn, result, outs, tols)
            self.checks = {o: verify.OutputCheck(arr, tols[o], dt, name=o) for o, (arr, dt) in arrays.items()}

    def note(self) -> str:
        """As check_result's note; no verdict on the outputs when no block came (the candidate failed on its
        guards before the reference was made)."""
        fed = any(c.covered for c in self.checks.values())
        return _note(self.name, self.notes, [c.result() for c in self.checks.values()] if fed else [])


def by_output(checks: Any) -> dict[str, list[verify.OutputCheck]]:
    """output name -> every baseline's check of it (guarded.judge_outputs' `beside`)."""
    out: dict[str, list[verify.OutputCheck]] = {}
    for c in checks:
        for name, check in c.checks.items():
            out.setdefault(name, []).append(check)
    return out


def prepare(backend: Any, family: KernelFamily, case: Case, sets: Sequence[Mapping[str, Any]],
            names: Sequence[str], cache: BaselineCache,
            release: Callable[[], Any] | None = None) -> tuple[list[str], dict[str, str]]:
    """(the names that can be timed, notes per name). Each usable baseline has run once on every
    input set of this job (compiles, warms up); its timed results are checked later (`check_result`
    on the last result on set 0, against the reference the candidate is judged by). A CUDA error
    that spoils the context is raised (the worker must go). Out of device memory: `release()`
    (default: backend.free_all) and one more try; then a note."""
    offered = {b.name: b for b in family.baselines()}
    usable: list[str] = []
    notes: dict[str, str] = {}
    for name in names:
        if name in cache.lasting:
            notes[name] = cache.lasting[name]
            continue
        b = offered.get(name)
        if b is None:
            cache.lasting[name] = notes[name] = "not offered by the family"
            continue
        if not _available(b, cache, notes):
            continue
        for attempt in (1, 2):
            kind, note = _prepare_one(backend, b, case, sets, cache)
            if kind != OUT_OF_MEMORY:
                break
            # tried again outside the except block: the error's traceback no longer pins the
            # failed attempt's tensors
            if attempt == 1:
                _release(backend, release)
        if kind == "ok":
            usable.append(name)
        elif kind == OUT_OF_MEMORY:
            notes[name] = f"unusable: {note}, also after freeing every allocator's cache and trying again"
        else:
            notes[name] = note
    return usable, notes


def _available(b: Any, cache: BaselineCache, notes: dict[str, str]) -> bool:
    try:
        ok = bool(b.available())
    except Exception as exc:  # noqa: BLE001 - an import failing is the machine's gap, not the case's
        notes[b.name] = f"unusable: {type(exc).__name__}: {str(exc).strip()[:300]}"
        return False
    if not ok:
        cache.lasting[b.name] = notes[b.name] = NOT_IMPORTABLE + (f" (needs {b.needs})" if b.needs else "")
    return ok


def _prepare_one(backend: Any, b: Any, case: Case, sets: Sequence[Mapping[str, Any]],
                 cache: BaselineCache) -> tuple[str, str]:
    """("ok", ""), ("unsupported", note) (remembered in cache.lasting), (OUT_OF_MEMORY, what the
    error said) or ("failed", note). Nothing of a failed attempt stays in cache.runs."""
    name = b.name
    try:
        for s, dev in enumerate(sets):
            # prepared anew in every job: a baseline may copy what it needs at prepare time
            # (torch's casts its weight once), and the inputs are new in every job
            fn = b.prepare(case, dev)
            if fn is None:
                _forget(cache, name, len(sets))
                cache.lasting[name] = "does not support this case"
                return "unsupported", cache.lasting[name]
            cache.runs[(name, s)] = fn
            result = fn()                               # trial run: compiles, warms up, may raise
            backend.synchronize(600.0)
            del result
        return "ok", ""
    except Exception as exc:  # noqa: BLE001 - a baseline failing is not the candidate's fault
        _forget(cache, name, len(sets))
        if is_out_of_memory(exc):
            needed = oom_bytes(exc)
            size = f"an allocation of {format_bytes(needed)} failed: " if needed else ""
            return OUT_OF_MEMORY, f"{OUT_OF_DEVICE_MEMORY} ({size}{type(exc).__name__}: {first_line(exc)})"
        status = backend.cuda_status(exc)
        if status is not None and (status in STICKY_CUDA_ERRORS or not backend.context_alive()):
            raise
        clear_pending_errors()          # a refused call's error must not become the next baseline's
        return "failed", f"unusable: {type(exc).__name__}: {str(exc).strip()[:300]}"


def _forget(cache: BaselineCache, name: str, n_sets: int) -> None:
    for s in range(n_sets):
        cache.runs.pop((name, s), None)


def _release(backend: Any, release: Callable[[], Any] | None) -> None:
    if release is not None:
        release()
        return
    if backend is not None and callable(getattr(backend, "free_all", None)):
        backend.free_all()
    clear_pending_errors()          # the failed cudaMalloc's error must not become the next call's


__all__ = ["BaselineCache", "BlockChecks", "by_output", "checkable", "MACHINE_LEVEL", "NOT_IMPORTABLE", "OUT_OF_MEMORY", "check_result", "machine_missing",
           "prepare"]
