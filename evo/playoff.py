"""A dispatch playoff: near-tied genomes of each row width timed again, side by side, in one process.

evo.dispatch picks, for every point of the family's dispatch key (e.g. a dtype and a row width), the
genome with the smallest recorded time. Those times
come from different moments: a carried seed's verdict may be a session old, a child's a minute
old, and on the H200 the same genome's ratio to QuACK moves by ~0.6 % (median) and up to 3 %
between sessions (results/archive/NOTES.md, session 8). Where the runner-up is within `margin` of the
winner, the recorded order says little. The playoff re-judges those contenders (correctness
protocol, then timing, through the GPU judge's evaluate_cases) in rotating order, `repeats`
times, and the dispatch takes the genome with the smallest median; the file it writes is the
evidence (every time, every failure) and `evo dispatch/export --playoff FILE` use its winners.

    keys = family.dispatch_key()
    contested = contenders(run_evaluations, keys, margin=0.03, limit=3)
    result = run_playoff(judge.evaluate_cases, genomes, contested, repeats=3)
    build_dispatch(run_evaluations, keys, winners=Playoff(result, 0.03, 3, keys).winners())
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evo.dispatch import complete_evidence, recorded_times
from fitness.family import DispatchKey, KeyPoint
from fitness.objectives import geomean
from fitness.records import read_json


@dataclass(frozen=True)
class Contest:
    """One key point (a width) whose recorded best and runners-up are within the margin."""
    keys: DispatchKey                    # the family's dispatch key (names the point's fields)
    point: KeyPoint
    cases: tuple[str, ...]               # the point's case ids (every other parameter measured there)
    contenders: tuple[str, ...]          # genome keys, fastest recorded first (the run's winner)
    recorded_us: Mapping[str, float]     # key -> geomean of its recorded times over `cases`

    @property
    def where(self) -> str:
        return self.keys.describe(self.point)


def contenders(evaluations: Iterable[Any], keys: DispatchKey, margin: float = 0.03, limit: int = 3) -> list[Contest]:
    """The key points where at least two genomes with complete evidence are within `margin` of the
    fastest recorded geomean time (the fastest `limit` of them), in key order."""
    if margin < 0 or limit < 2:
        raise ValueError(f"margin must be >= 0 and limit >= 2 (got margin={margin}, limit={limit})")
    out = []
    for point, complete in sorted(complete_evidence(evaluations, keys).items()):
        times = recorded_times(complete)
        ranked = sorted(times, key=lambda k: (times[k], k))
        best = times[ranked[0]]
        near = [k for k in ranked if times[k] <= best * (1 + margin)][:limit]
        if len(near) >= 2:
            cases = tuple(sorted(next(iter(complete.values()))))
            out.append(Contest(keys, point, cases, tuple(near), {k: times[k] for k in near}))
    return out


@dataclass
class ContestResult:
    contest: Contest
    geomean_us: dict[str, list[float]] = field(default_factory=dict)   # key -> one figure per repeat
    failures: dict[str, str] = field(default_factory=dict)            # key -> why it was disqualified

    @property
    def medians(self) -> dict[str, float]:
        return {k: statistics.median(v) for k, v in self.geomean_us.items() if v and k not in self.failures}

    @property
    def winner(self) -> str | None:
        """The smallest median time; ties go to the earlier contender (the run's own order)."""
        med = self.medians
        order = self.contest.contenders
        return min(med, key=lambda k: (med[k], order.index(k))) if med else None

    def to_dict(self) -> dict[str, Any]:
        c = self.contest
        return {**c.keys.to_json(c.point), "cases": list(c.cases), "contenders": list(c.contenders),
                "recorded_us": dict(c.recorded_us), "geomean_us": self.geomean_us, "median_us": self.medians,
                "failures": self.failures, "run_winner": c.contenders[0], "winner": self.winner}


@dataclass
class Playoff:
    results: list[ContestResult]
    margin: float
    repeats: int
    keys: DispatchKey
    meta: dict[str, Any] = field(default_factory=dict)     # run_id, device, command, seconds

    def winners(self) -> dict[KeyPoint, str]:
        return {r.contest.point: r.winner for r in self.results if r.winner}

    def changed(self) -> list[ContestResult]:
        return [r for r in self.results if r.winner and r.winner != r.contest.contenders[0]]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "dispatch-playoff", **self.meta, "margin": self.margin, "repeats": self.repeats,
                "widths": [r.to_dict() for r in self.results]}


def winners_from_dict(data: Mapping[str, Any], keys: DispatchKey) -> dict[KeyPoint, str]:
    """The winners a playoff file names, at the points of the family's dispatch key (ValueError for
    a file that is not one, or whose widths lack the key's fields)."""
    if not isinstance(data, Mapping) or data.get("kind") != "dispatch-playoff":
        raise ValueError("not a dispatch playoff file (expected \"kind\": \"dispatch-playoff\"; "
                         "write one with `evo playoff`)")
    return {keys.point(w): w["winner"] for w in data.get("widths", ()) if w.get("winner")}


def read_winners(path: str | Path, keys: DispatchKey) -> dict[KeyPoint, str]:
    """The winners of a playoff file; ValueError saying what is wrong (missing, not JSON, not a playoff)."""
    try:
        data = read_json(path)
    except (OSError, ValueError) as exc:
        raise ValueError(str(exc)) from None
    return winners_from_dict(data, keys)


def run_playoff(evaluate: Callable[[Sequence[Any], Sequence[str]], list], genomes: Mapping[str, Any],
                contests: Sequence[Contest], repeats: int = 3,
                progress: Callable[[str], None] | None = None) -> list[ContestResult]:
    """Each contest's genomes judged on the width's cases, `repeats` times, the order rotated by
    one each repeat (drift in the machine lands on every contender alike). A contender the judge
    does not pass (any status but OK, or a case without a time) is disqualified with the reason;
    `evaluate(genomes, case_ids)` is the GPU judge's evaluate_cases."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1 (got {repeats})")
    results = []
    for contest in contests:
        res = ContestResult(contest, {k: [] for k in contest.contenders})
        keys = list(contest.contenders)
        for r in range(repeats):
            order = keys[r % len(keys):] + keys[:r % len(keys)]
            for key in order:
                if key in res.failures:
                    continue
                (ev,) = evaluate([genomes[key]], list(contest.cases))
                timed = {c.case: c.time_us for c in ev.cases if c.time_us}
                if ev.status.value != "OK" or set(timed) != set(contest.cases):
                    res.failures[key] = f"repeat {r}: {ev.status.value} {ev.message[:200]}".strip()
                    continue
                res.geomean_us[key].append(geomean(list(timed.values())))
        if progress:
            progress(f"{contest.where}: {len(keys)} contenders, winner {res.winner} "
                     f"(run's {keys[0]})")
        results.append(res)
    return results


def markdown(playoff: Playoff) -> str:
    """The playoff as a table: per width, each contender's recorded and playoff times."""
    m, keys = playoff.meta, playoff.keys
    head = [f.title for f in keys.fields]
    lines = ["# Dispatch playoff", "", f"Command: `{m.get('command', '?')}`", "",
             f"Run: {m.get('run_id', '?')}; device: {m.get('device', '?')}; margin {playoff.margin:.3f}, "
             f"{playoff.repeats} repeats (order rotated each repeat).", "",
             "Times: geometric mean over the width's cases, us; playoff = median over the repeats of one "
             "process. The dispatch takes the playoff's fastest.", "",
             "| " + " | ".join([*head, "genome | recorded us | playoff us | repeats | |"]),
             "|" + "---|" * len(keys.exact) + "---:|" * (keys.ordered is not None) + "---|---:|---:|---:|---|"]
    for r in playoff.results:
        c, med = r.contest, r.medians
        for k in c.contenders:
            mark = "winner" if k == r.winner else ("failed: " + r.failures[k] if k in r.failures else "")
            mark += " (run's)" if k == c.contenders[0] else ""
            play = f"{med[k]:.1f}" if k in med else "-"
            lines.append(f"| {' | '.join(_cells(keys, c.point))} | `{k[:8]}` | {c.recorded_us[k]:.1f} | {play} | "
                         f"{len(r.geomean_us.get(k, []))} | {mark.strip()} |")
    changed = playoff.changed()
    lines += ["", f"{len(playoff.results)} contested widths; the playoff changed the winner on {len(changed)}"
              + (": " + ", ".join(" ".join(_cells(keys, r.contest.point)) for r in changed) if changed else "") + "."]
    return "\n".join(lines) + "\n"


def _cells(keys: DispatchKey, point: KeyPoint) -> list[str]:
    """A point's values, one per key field (the playoff table's first columns)."""
    return [*point.group, *([str(point.at)] if keys.ordered is not None else [])]


def play(source: str, out: str, *, margin: float = 0.02, limit: int = 3, repeats: int = 3,
         matrix: str | None = None, max_s: float = 0.0, run_id: str | None = None, command: str = "",
         timeout_s: float = 300.0) -> str:
    """`evo playoff`: the contested widths of `source` (a run directory, dump or store URL) judged
    again through the GPU judge; writes OUT.json (the evidence and the winners: `evo dispatch/export
    --playoff` read it) and OUT.md after every width, so a call killed by its time limit keeps the
    widths done; --max-s starts no new width after that many seconds (the rest keep the run's
    winner). Returns the markdown."""
    from evo.analysis import run_to_judge
    from evo.progress import Progress

    run = run_to_judge(source, run_id=run_id, matrix=matrix)
    frames, space, keys = run.frames, run.space, run.frames.keys
    evaluations = [r.evaluation for r in frames.records]
    contests = contenders(evaluations, keys, margin=margin, limit=limit)
    genomes = {e.key: space.make(e.genome) for e in evaluations}
    print(f"{len(contests)} contested widths, {sum(len(c.contenders) for c in contests)} contenders", flush=True)
    t0 = time.time()
    results: list[ContestResult] = []

    def write(device: str) -> str:
        playoff = Playoff(results, margin, repeats, keys,
                          meta={"run_id": frames.run["run_id"], "device": device, "command": command,
                                "seconds": round(time.time() - t0, 1), "contested": len(contests)})
        Path(out + ".json").write_text(json.dumps(playoff.to_dict(), indent=1))
        text = markdown(playoff)
        Path(out + ".md").write_text(text)
        return text

    with run.judge([run.baseline], timeout_s) as judge, Progress(len(contests), "evo playoff", "widths") as bar:
        # every contender compiled up front, in parallel (carried seeds were never compiled on this machine)
        judge.prefetch(list({k: genomes[k] for c in contests for k in c.contenders}.values()))
        for contest in contests:
            if max_s and time.time() - t0 > max_s:
                print(f"--max-s {max_s:.0f} reached: {len(contests) - len(results)} widths keep the run's winner")
                break
            results += run_playoff(judge.evaluate_cases, genomes, [contest], repeats=repeats, progress=print)
            write(judge.describe().get("device") or "?")   # the judge learns its device from its first evaluation
            bar.advance()
        return write(judge.describe().get("device") or "?")
