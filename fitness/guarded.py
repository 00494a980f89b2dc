"""Guarded, poisonable output buffers and the judgement of what a launch left in them.

Every output the judge hands a kernel sits inside one allocation with a guard zone before and
after it; all of it starts as the poison pattern (a NaN no arithmetic produces), so an element the
kernel did not write, a write out of bounds and a NaN result are three different findings.

Guard zones scale with the output (GUARD_MIN_BYTES up to the output's own size, at most
GUARD_MAX_BYTES): a fixed 64 KiB guard around a 4 GiB output saw only writes within 64 KiB of its
ends, while an off-by-a-row-block bug lands megabytes away.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from fitness import dtypes, memfill, verify
from fitness.family import BufferSpec

GUARD_MIN_BYTES = 64 * 1024
GUARD_MAX_BYTES = 256 * 1024 * 1024


def spec_dtype(spec: BufferSpec) -> str:
    return dtypes.canonical(spec.dtype)


def guard_bytes_for(nbytes: int, minimum: int = GUARD_MIN_BYTES) -> int:
    """The guard zone on each side of an output of `nbytes`: as large as the output, within
    [minimum, GUARD_MAX_BYTES], rounded up to 256 bytes (so the data keeps its alignment)."""
    g = max(int(minimum), min(int(nbytes), GUARD_MAX_BYTES))
    return -(-g // 256) * 256


class GuardedBuffer:
    """An output with a guard zone before and after it, all poisonable in one fill.

    `data` (the kernel's view) starts `guard` elements into one allocation."""

    def __init__(self, xp: Any, spec: BufferSpec, guard_bytes: int = GUARD_MIN_BYTES):
        self.xp = xp
        self.dtype = spec_dtype(spec)
        self.shape = tuple(int(s) for s in spec.shape)
        self.n = int(np.prod(self.shape)) if self.shape else 1
        size = dtypes.itemsize(self.dtype)
        self.guard = max(1, guard_bytes_for(self.n * size, guard_bytes) // size)
        self.full = xp.empty(self.n + 2 * self.guard, dtype=dtypes.bits_dtype(self.dtype))
        self.data = self.full[self.guard:self.guard + self.n].view(dtypes.storage_dtype(self.dtype)).reshape(self.shape)

    @property
    def nbytes(self) -> int:
        return int(self.full.nbytes)

    def poison(self) -> None:
        """Everything, guards included."""
        memfill.fill(self.full, dtypes.poison_bits(self.dtype))

    def poison_data(self) -> None:
        """Only the output (guards keep whatever evidence they hold)."""
        memfill.fill(self.full[self.guard:self.guard + self.n], dtypes.poison_bits(self.dtype))

    def guard_damage(self) -> Any:
        """How many guard elements lost the poison pattern: an int, or a 0-d device array (no sync)."""
        xp, p = self.xp, dtypes.poison_bits(self.dtype)
        front, back = self.full[:self.guard], self.full[self.guard + self.n:]
        return xp.count_nonzero(front != p) + xp.count_nonzero(back != p)

    def check_guards(self, name: str) -> verify.Verdict:
        front = self.full[:self.guard].view(dtypes.storage_dtype(self.dtype))
        back = self.full[self.guard + self.n:].view(dtypes.storage_dtype(self.dtype))
        v = verify.guard_intact(back, self.dtype, name=name, where="after")
        if not v:
            return v
        return verify.guard_intact(front[::-1], self.dtype, name=name, where="before")


def guards_problem(outputs: Mapping[str, GuardedBuffer]) -> str | None:
    """The first damaged guard zone, or None: all guards counted in one pass, one host sync."""
    if not outputs:
        return None
    damage = [buf.guard_damage() for buf in outputs.values()]
    xp = outputs[next(iter(outputs))].xp
    counts = xp.stack([xp.asarray(d) for d in damage]).get() if xp is not np else np.array(damage)
    if counts.any():
        for name, buf in outputs.items():
            g = buf.check_guards(name)
            if not g:
                return g.message
    return None


def feed_blocks(checks: Mapping[str, Sequence[verify.OutputCheck]], blocks: Iterable[tuple[str, int, Any]]) -> None:
    """Every block of a reference made in blocks (`KernelFamily.reference_blocks`: output name,
    first flat index, float64 values) to every check of that output (the candidate's and the
    baselines' alike), so each block is made once and dropped before the next. A block for an
    output the case does not have is the family's error (ValueError)."""
    for name, start, values in blocks:
        if name not in checks:
            raise ValueError(f"the family's reference blocks name an output {name!r} the case does not have "
                             f"({sorted(checks)})")
        if checks[name]:                 # on the outputs' device once, however many checks read it
            values = checks[name][0].xp.asarray(values)
        for check in checks[name]:
            check.add(int(start), values)
        del values


def judge_outputs(outputs: Mapping[str, GuardedBuffer], refs: Mapping[str, Any],
                  tols: Mapping[str, Any], *, chunk: int = verify.DEFAULT_CHUNK,
                  sampled: Mapping[str, tuple[Any, Any]] | None = None,
                  blocks: Iterable[tuple[str, int, Any]] | None = None,
                  beside: Mapping[str, Sequence[verify.OutputCheck]] | None = None,
                  scratch: Any = ()) -> tuple[str | None, float | None, float | None]:
    """(problem or None, max_abs_err, rel_l2) over the outputs, guards first (`scratch`: workspace
    buffers among `outputs`, whose guards are checked and contents never judged).

    `refs`: a full float64 reference per output; or, with `sampled`, (flat indices, their float64
    reference) per output, judged by verify.check_sampled_output (every element still written
    and finite); or, with `blocks`, the full reference in blocks (`feed_blocks`), each block also
    fed to the checks in `beside` (output name -> more verify.OutputChecks, e.g. the baselines'
    results), which are read afterwards by their owner. Blocks that leave part of an output out, or
    name an output the case does not have, are the family's error (ValueError), not the candidate's
    verdict. Each output (each block) is one fused pass (one sync each)."""
    problem = guards_problem(outputs)
    if problem:
        return problem, None, None
    judged = [(name, buf) for name, buf in outputs.items() if name not in scratch]
    if blocks is not None:
        mine = {name: verify.OutputCheck(buf.data, tols[name], buf.dtype, name=name, chunk=chunk)
                for name, buf in judged}
        checks = {name: [check, *(beside or {}).get(name, ())] for name, check in mine.items()}
        feed_blocks(checks, blocks)
    max_err = rel = None
    for name, buf in judged:
        if blocks is not None:
            res = mine[name].result()
        elif sampled is not None:
            if name not in sampled:
                return f"the family's sampled reference has no output {name!r}", None, None
            idx, vals = sampled[name]
            res = verify.check_sampled_output(buf.data, idx, vals, tols[name], buf.dtype, name=name, chunk=chunk)
        else:
            if name not in refs:
                return f"the family's reference has no output {name!r}", None, None
            res = verify.check_output(buf.data, refs[name], tols[name], buf.dtype, name=name, chunk=chunk)
        if not res.ok:
            return res.message, res.max_abs_err, res.rel_l2
        if max_err is None:                 # the first output (y) is the one recorded
            max_err, rel = res.max_abs_err, res.rel_l2
    return None, max_err, rel


def output_prints(outputs: Mapping[str, GuardedBuffer], names: Any = None) -> list[Any]:
    """Fingerprint partials of the outputs' data (device arrays, no sync; ints on numpy), for
    comparing what repeated launches on the same inputs wrote."""
    out = []
    for name, buf in outputs.items():
        if names is not None and name not in names:
            continue
        out.append(verify.fingerprint_partials(buf.data))
    return out


__all__ = ["GUARD_MAX_BYTES", "GUARD_MIN_BYTES", "GuardedBuffer", "feed_blocks", "guard_bytes_for", "guards_problem", "judge_outputs",
           "output_prints", "spec_dtype"]
