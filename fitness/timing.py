"""Timing one case: the candidate and its baselines interleaved, with nothing to condition on.

The protocol (DESIGN.md, "Timing protocol" and the timing half of the correctness protocol):

- Rounds of `warmup + reps` launches of every implementation, interleaved in an order that
  rotates every round (the candidate is not always first), the L2 flushed before every launch,
  each launch between its own pair of CUDA events.
- Every launch of the candidate finds its output freshly poisoned (outside the events): no launch
  can be told from another by what its output holds, so a kernel that skips work or writes junk
  when it thinks nobody looks leaves the poison behind.
- Every launch of the candidate is fingerprinted right after it (outside the events, no sync):
  all launches on the same input set must write bit-identical outputs (a family may name outputs
  that are not deterministic, e.g. atomically reduced ones), and the last launch on every set is
  judged against the float64 reference, so every timed launch is as good as verified.
- Besides the last launch on every set, CHECKED_RANDOM_ROUNDS more are judged in full, chosen
  at random after they ran (the choice is made when the batch holding them has finished).
- A kernel whose host call outlasts the flush gets a "launch shield" (see LaunchShield).

Nothing here allocates inputs or computes references: `time_case` gets the buffers, the launch
arguments, the prepared baselines and a `judge(set)` callable from the runner.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from fitness import verify
from fitness.cuda_backend import STICKY_CUDA_ERRORS, LaunchOutOfMemory, is_out_of_memory
from fitness.cuda_errors import clear_pending_errors
from fitness.guarded import GuardedBuffer, output_prints
from fitness.records import Status

MAX_INPUT_SETS = 8
CANDIDATE = "<candidate>"
CHECKED_RANDOM_ROUNDS = 2          # launches judged in full besides the last one on every input set
WARMUP_BUDGET_S = 0.005            # warm-up rounds beyond the first stop once they would take this long
SHIELD_MIN_HOST_S = 20e-6          # host calls longer than this get a launch shield (the flush takes ~35 us)
SHIELD_FACTOR = 1.5                # shield = this x the median host time of the implementation's call
SHIELD_MAX_S = 2e-3
#: a baseline result larger than this is not kept through the timing for the final check: that baseline is
#: called once more after the timing, untimed, and its result checked alone, then let go. Session 29's H100
#: table: the fp32 cases of 2**31 elements held two timing sets (48 GiB) beside three peers' kept 8 GiB
#: results, and INT21, QuACK and torch found no room for their own 8 GiB outputs (74 GiB of 80 held).
KEEP_RESULT_BYTES = 1 << 30


def rotation_sets(working_bytes: int, l2_bytes: int, enabled: bool = True, cap: int = MAX_INPUT_SETS,
                  minimum: int = 1) -> int:
    """How many input sets to rotate: ceil(3*L2 / bytes) capped at `cap` when a set fits in L2,
    and never fewer than `minimum` (one set per input distribution)."""
    if not enabled or working_bytes <= 0 or working_bytes >= l2_bytes:
        return max(1, minimum)
    return max(1, minimum, min(cap, math.ceil(3 * l2_bytes / working_bytes)))


def launch_candidate(backend: Any, steps: Sequence[tuple[Any, Any]], args: Sequence[Sequence[Any]]) -> None:
    """The candidate's launches in order (step i with args[i]). A launch refused for want of device
    memory is the candidate's failure (its kernel's local memory, reserved for every resident
    thread), raised as LaunchOutOfMemory: never the judge's out-of-memory error to free and retry."""
    for (kernel, launch), a in zip(steps, args):
        try:
            backend.launch(kernel, launch, a)
        except Exception as exc:  # noqa: BLE001
            if not is_out_of_memory(exc):
                raise
            status = backend.cuda_status(exc)
            raise LaunchOutOfMemory(2 if status is None else status,
                                    f"the kernel's launch was refused: {type(exc).__name__}: {exc}") from exc


def median_iqr(samples: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(samples, dtype=np.float64)
    if a.size == 0:
        return float("nan"), float("nan")
    q25, q50, q75 = np.percentile(a, [25, 50, 75])
    return float(q50), float(q75 - q25)


def rotated(impls: Sequence[str], r: int) -> list[str]:
    """The launch order of round r: the implementations rotated by r."""
    k = r % len(impls) if impls else 0
    return list(impls[k:]) + list(impls[:k])


class LaunchShield:
    """Per implementation, the GPU spin that keeps its host call out of its event pair.

    An implementation whose host call outlasts the L2 flush (Python wrappers: QuACK, torch.compile,
    Liger: 50-150 us) would have the rest of that host time inside its events: the GPU reaches the
    start event and waits for the launch. A spin kernel of SHIELD_FACTOR x its measured host time
    (median of the last 8 calls), between the flush and the start event, hides it. Shields only
    grow, so a slow stretch of the host is not forgotten within a case."""

    def __init__(self) -> None:
        self.host_s: dict[str, list[float]] = {}
        self.ns: dict[str, int] = {}

    def record(self, impl: str, host_seconds: float) -> None:
        self.host_s.setdefault(impl, []).append(host_seconds)

    def update(self) -> None:
        for impl, hs in self.host_s.items():
            h = float(np.median(hs[-8:]))
            if h > SHIELD_MIN_HOST_S:
                self.ns[impl] = max(self.ns.get(impl, 0), int(min(SHIELD_MAX_S, SHIELD_FACTOR * h) * 1e9))

    def note(self) -> str:
        if not self.ns:
            return ""
        return "launch shield: " + ", ".join(
            f"{'candidate' if i == CANDIDATE else i} {self.ns[i] / 1e3:.0f} us (host call median "
            f"{float(np.median(self.host_s[i])) * 1e6:.0f} us)" for i in sorted(self.ns))


@dataclass
class TimingOutcome:
    samples: dict[str, list[float]]
    status: Status = Status.OK
    message: str = ""
    dropped: dict[str, str] = field(default_factory=dict)     # baseline -> why it stopped being timed
    judged: list[tuple[int, int]] = field(default_factory=list)   # (launch index, input set) judged in full
    launches: int = 0
    notes: list[str] = field(default_factory=list)


def _fail(samples: dict[str, list[float]], status: Status, message: str, **kw: Any) -> TimingOutcome:
    return TimingOutcome(samples=samples, status=status, message=message, **kw)


def time_case(backend: Any, *, steps: Sequence[tuple[Any, Any]], args: Sequence[Sequence[Sequence[Any]]],
              out_sets: Sequence[Mapping[str, GuardedBuffer]], baselines: Mapping[tuple[str, int], Callable[[], Any]],
              names: Sequence[str], timing: Any, rng: np.random.Generator,
              judge: Callable[[int, Mapping[str, Any] | None], str | None],
              deterministic: Sequence[str], keep_bytes: int | None = None,
              checked: Any = None) -> TimingOutcome:
    """Time the candidate (`steps`: (kernel, Launch) pairs run in order between one pair of events,
    step i with `args[s][i]`, writing `out_sets[s]`) and the baselines
    `names` (`baselines[(name, s)]`) on every input set s, in rotating interleaved rounds.

    `judge(s, baseline_results)` judges the outputs now in out_sets[s] (the candidate's last
    launch on set s) and returns a problem or None; for set 0's final judgement it also gets each
    baseline's last result there, to check against the same reference. A baseline call after which
    the callable's `freed` is true (the judge freed device memory inside it) is no sample.
    `deterministic`: the outputs whose every launch on a set must be bit-identical. `rng` is the job's run-time generator (which launches are judged).
    A baseline whose result on set 0 is larger than `keep_bytes` (default KEEP_RESULT_BYTES) is checked after the timing instead, on a
    call of its own (`judge(0, {name: result})`, one baseline at a time), so that no two large results are
    ever held together; a failure there is a note, the baseline's samples stand. `checked`: the baselines
    whose results the judge checks (None: all); the others' results are never kept."""
    n_sets = len(out_sets)
    impls = [CANDIDATE] + list(names)
    samples: dict[str, list[float]] = {i: [] for i in impls}
    dropped: dict[str, str] = {}
    judged: list[tuple[int, int]] = []
    limit_ms = 1e3 * float(timing.max_case_seconds)
    reps = int(timing.reps)
    warmup = max(1, int(timing.warmup))       # round 0 is always a warm-up round
    rounds = warmup + reps
    base_reps = getattr(timing, "baseline_reps", None)
    base_reps = reps if base_reps is None else max(1, min(reps, int(base_reps)))
    spin = getattr(backend, "spin", None)
    shield = LaunchShield()
    prints: list[tuple[int, int, list[Any]]] = []    # (round, set, fingerprint partials per output)
    keep_bytes = KEEP_RESULT_BYTES if keep_bytes is None else int(keep_bytes)
    kept: dict[str, Any] = {}                        # each baseline's last result on input set 0
    alone: list[str] = []                            # baselines whose results are too large to keep: checked after
    p_extra = 0.0                                    # chance that a finished batch's last launch is judged

    def runs(impl: str, rr: int) -> bool:
        if impl == CANDIDATE or base_reps >= reps:
            return True
        t = rr - warmup
        stride = max(1, reps // base_reps)
        return t >= 0 and t % stride == 0 and t // stride < base_reps

    pending: list[tuple[int, str, Any, Any]] = []
    batch, round_wall, r = 1, None, 0
    while r < rounds:
        t_batch = time.perf_counter()
        stop = min(rounds, r + batch)
        for rr in range(r, stop):
            s = rr % n_sets
            for impl in rotated(impls, rr):
                if impl in dropped or not runs(impl, rr):
                    continue
                if impl == CANDIDATE:
                    for g in out_sets[s].values():
                        g.poison_data()
                if timing.flush_l2:
                    backend.flush_l2()
                if spin is not None and shield.ns.get(impl):
                    spin(shield.ns[impl])
                start = backend.record()
                t_host = time.perf_counter()
                if impl == CANDIDATE:
                    launch_candidate(backend, steps, args[s])
                else:
                    call = baselines[(impl, s)]
                    try:
                        result = call()
                        if s == 0 and impl not in alone and (checked is None or impl in checked):
                            if result_nbytes(result) <= keep_bytes:
                                kept[impl] = result      # checked after the timing (judge's `baselines`)
                            else:
                                alone.append(impl)       # checked on a call of its own after the timing
                        del result
                    except Exception as exc:  # noqa: BLE001 - a baseline failing is not the candidate's fault
                        _survivable(backend, exc)
                        dropped[impl] = f"baseline {impl}: failed while timed: {type(exc).__name__}: {exc}"
                        continue
                    if getattr(call, "freed", False):
                        continue                        # the device's memory was freed between its events: no sample
                shield.record(impl, time.perf_counter() - t_host)
                end = backend.record()
                pending.append((rr, impl, start, end))
                if impl == CANDIDATE:
                    prints.append((rr, s, output_prints(out_sets[s], deterministic)))
        slack = 2.0 * (round_wall or 0.0) * (stop - r)
        backend.wait(pending[-1][3], float(timing.max_case_seconds) * 2 + slack)
        for rr, impl, start, end in pending:
            ms = backend.elapsed_ms(start, end)
            if impl == CANDIDATE and ms > limit_ms:
                return _fail(samples, Status.TIMEOUT, f"a timed launch took {ms / 1e3:.3g} s > "
                                                       f"max_case_seconds={timing.max_case_seconds:g}")
            if rr >= warmup:
                samples[impl].append(ms)
        pending.clear()
        shield.update()
        last = stop - 1
        if round_wall is None:
            # round 0 told how long a round takes: long rounds need fewer warm-up rounds
            round_wall = (time.perf_counter() - t_batch) / max(1, stop - r)
            per_round = max(round_wall, 1e-6)
            warmup = max(1, min(warmup, math.ceil(WARMUP_BUDGET_S / per_round)))
            rounds = warmup + reps
            batch = max(1, min(16, int(float(timing.max_case_seconds) / (4 * per_round))))
            p_extra = min(1.0, CHECKED_RANDOM_ROUNDS / max(1.0, math.ceil((rounds - stop) / batch)))
        elif stop < rounds and rng.random() < p_extra:
            # decided now, after the launch ran: nothing it could see told it this one is judged
            problem = judge(last % n_sets, None)
            judged.append((last, last % n_sets))
            if problem:
                return _fail(samples, Status.WRONG_RESULT,
                             f"[timed launches: launch {last + 1} of {rounds}, input set {last % n_sets}] {problem}",
                             judged=judged)
        r = stop
    n_launches = len(prints)
    # every set's last launch judged in full ...
    for s in range(n_sets):
        last = max(rr for rr, ss, _ in prints if ss == s) if any(ss == s for _, ss, _ in prints) else None
        if last is None:
            continue
        problem = judge(s, kept if s == 0 else None)
        judged.append((last, s))
        if problem:
            return _fail(samples, Status.WRONG_RESULT,
                         f"[timed launches: launch {last + 1} of {rounds} (the last on input set {s})] {problem}",
                         judged=judged)
    kept.clear()
    notes: list[str] = []
    for impl in alone:                                   # one large result at a time, nothing else kept
        if impl in dropped:
            continue
        try:
            result = baselines[(impl, 0)]()
            problem = judge(0, {impl: result})
            del result
        except Exception as exc:  # noqa: BLE001 - the baseline's check, not the candidate's verdict
            _survivable(backend, exc)
            notes.append(f"baseline {impl}: its result was not checked (called alone after the timing: "
                         f"{type(exc).__name__}: {exc})")
            continue
        if problem:                                      # the candidate's set-0 output, judged again with it
            return _fail(samples, Status.WRONG_RESULT, f"[timed launches, input set 0, judged again beside "
                                                       f"baseline {impl}] {problem}", judged=judged)
    # ... and every launch on a set wrote what that one wrote
    if deterministic and prints:
        folded = _fold_all(backend, prints)
        for s in range(n_sets):
            on_set = [(rr, fp) for (rr, ss, _), fp in zip(prints, folded) if ss == s]
            if not on_set:
                continue
            want = on_set[-1][1]
            odd = [rr for rr, fp in on_set if fp != want]
            if odd:
                return _fail(samples, Status.WRONG_RESULT,
                             f"[timed launches, input set {s}] {len(odd)} of {len(on_set)} launches on the same "
                             f"inputs wrote other {'/'.join(deterministic)} bits than the verified last one "
                             f"(first: launch {odd[0] + 1} of {rounds}): every timed launch must compute the "
                             f"same outputs", judged=judged)
    notes += [n for n in (shield.note(),) if n]
    return TimingOutcome(samples=samples, dropped=dropped, judged=judged, launches=n_launches, notes=notes)


def _survivable(backend: Any, exc: BaseException) -> None:
    """A baseline's error the timing can go on after: re-raised when the context is gone (a sticky
    CUDA error, maybe the candidate's fault surfacing), else cleared so it does not become the next
    call's."""
    status = backend.cuda_status(exc)
    if status is not None and (status in STICKY_CUDA_ERRORS or not backend.context_alive()):
        raise exc
    clear_pending_errors()


def result_nbytes(result: Any) -> int:
    """Device bytes a baseline's result holds: arrays and tensors (their `nbytes`), inside tuples,
    lists and dicts; anything else counts 0."""
    if isinstance(result, (tuple, list)):
        return sum(result_nbytes(r) for r in result)
    if isinstance(result, dict):
        return sum(result_nbytes(r) for r in result.values())
    n = getattr(result, "nbytes", None)
    return int(n) if isinstance(n, (int, np.integer)) else 0


def _fold_all(backend: Any, prints: Sequence[tuple[int, int, list[Any]]]) -> list[tuple[tuple[int, int], ...]]:
    """Every launch's output fingerprints as tuples, fetched from the device in one transfer."""
    xp = backend.xp
    flat = [p for _, _, ps in prints for p in ps]
    if xp is np or not flat:
        host = flat
    else:
        sizes = [int(p.size) for p in flat]
        blob = xp.concatenate([p.reshape(-1) for p in flat]).get()
        host, pos = [], 0
        for k in sizes:
            host.append(blob[pos:pos + k])
            pos += k
    out, i = [], 0
    for _, _, ps in prints:
        out.append(tuple(verify.fold(host[i + j]) for j in range(len(ps))))
        i += len(ps)
    return out


__all__ = ["CANDIDATE", "CHECKED_RANDOM_ROUNDS", "KEEP_RESULT_BYTES", "LaunchShield", "MAX_INPUT_SETS", "TimingOutcome", "launch_candidate",
           "median_iqr", "result_nbytes", "rotated", "rotation_sets", "time_case"]
