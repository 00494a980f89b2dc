"""The final table (`evo table`): a run's dispatch table timed beside the family's baselines.

Each distinct genome of the dispatch table goes through the full GPU judge on the benchmark cases
the table gives it (check cases, fresh-input verification of every one of them, then timing
interleaved with the baselines, all in one process), so that every ratio in the table compares two
times measured side by side. The files (PREFIX.json and PREFIX.md) are rewritten after every
genome: a device call's time limit keeps what is done. `evo export --bench PREFIX.json` puts the
table in the package's README.

Family-agnostic: the cases, their parameters and the baselines are the family's (its benchmark
matrix and `baselines()`); evo only assigns cases to dispatch entries (evo.dispatch.lookup) and
computes ratios and geomeans (fitness.objectives.geomean).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from evo.dispatch import DispatchEntry, build_dispatch, entry_for
from fitness.baseline_runs import baseline_notes
from fitness.cascade import one_line
from fitness.objectives import geomean
from fitness.records import CaseResult


class TableError(ValueError):
    """A table that cannot be made as asked (one line saying why)."""


def time_dispatch(ev: Any, entries: Sequence[DispatchEntry], genomes: Mapping[str, Any], wanted: set[str],
                  on_result: Callable[[str, Any], None] | None = None, max_s: float = 0.0) -> dict[str, Any]:
    """Each genome of the table through the judge `ev` on the cases the table gives it (of `wanted`,
    or all of the judge's benchmark cases): genome key -> Evaluation. `on_result(key, evaluation)`
    after each genome, so that a pass cut short by a time limit still leaves what it measured;
    `max_s` > 0: no genome is started after that many seconds."""
    t0 = time.time()
    serves: dict[str, list[str]] = {}          # genome key -> the cases the table gives it
    for c in ev.settings.bench_cases:
        if wanted and c.id not in wanted:
            continue
        serves.setdefault(entry_for(entries, c.params).key, []).append(c.id)
    results = {}
    for key, g in genomes.items():
        if key not in serves:
            continue
        if max_s and time.time() - t0 > max_s:
            print(f"--max-s {max_s:.0f} reached: the cases of genome {key} and those after it are not timed")
            break
        (e,) = ev.evaluate_cases([g], serves[key])
        print(f"{key}: {len(serves[key])} cases {e.status.value} {e.message[:200]}", flush=True)
        results[key] = e
        if on_result is not None:
            on_result(key, e)            # published before any case is judged again: a limit keeps it
        again = judged_again_alone(ev, g, e, serves[key], deadline=t0 + max_s if max_s else None)
        if again is not e:
            results[key] = again
            if on_result is not None:
                on_result(key, again)
    return results


def judged_again_alone(ev: Any, genome: Any, e: Any, served: Sequence[str], deadline: float | None = None) -> Any:
    """`e` with each of its `served` cases on which the judge ran out of device memory judged
    again alone (the others, and `e`'s status and message, as they were).

    A genome's cases run in one job, one worker process, and what a 2**31-element case leaves
    behind in it (session 27, an 80 GB H100 beside five baselines: torch held 24-32 GB that freeing
    every cache did not give back) can starve the next one; the case is the machine's gap, not the
    genome's. A job in which the judge ran out asks for a new worker, so the first case judged
    again starts in a clean process; a later one follows a case judged in full in the same worker,
    so if it runs out there it is judged once more, in the new worker that asked for. A case that
    runs out in a clean worker keeps that verdict, with its message. Past `deadline` (time.time()),
    or when the judge raises, a case keeps the verdict it has."""
    again = [cr.case for cr in e.cases if cr.judge_ran_out_of_memory and cr.case in served]
    if not again:
        return e
    print(f"{e.key}: the judge ran out of device memory on {', '.join(again)}: each judged again alone", flush=True)
    got: dict[str, Any] = {}
    clean = True                         # the worker is new: the job before ran out of memory
    for case in again:
        for _ in range(2):
            if deadline is not None and time.time() > deadline:
                print(f"{e.key}: --max-s reached: {case} keeps its verdict", flush=True)
                break
            try:
                (r,) = ev.evaluate_cases([genome], [case])
            except Exception as exc:  # noqa: BLE001 - the table keeps what it has; the reason is printed
                print(f"{e.key}: {case} could not be judged again ({type(exc).__name__}: {exc}): it keeps its verdict",
                      flush=True)
                break
            cr = next((c for c in r.cases if c.case == case), None)
            if cr is None:
                break
            got[case] = cr
            print(f"{e.key}: {case} {cr.status.value}", flush=True)
            ran_out_after_another, clean = cr.judge_ran_out_of_memory and not clean, cr.judge_ran_out_of_memory
            if not ran_out_after_another:
                break
    if not got:
        return e
    return replace(e, cases=tuple(got.get(cr.case, cr) for cr in e.cases))


def case_rows(entries: Sequence[DispatchEntry], results: Mapping[str, Any], bench: Sequence[Any]) -> dict[str, dict]:
    """case id -> {"key": genome key, "cr": CaseResult} of the genome the table picks for the case.

    Only the cases of `bench` (the judge's benchmark cases the table asked for) have rows, and a
    case whose genome was judged but has no result for it (the genome failed a check case
    before timing: its evaluation holds the check cases it passed, not the benchmark's) gets the
    evaluation's own verdict and message, so the table says why instead of listing check cases."""
    rows = {}
    ids = {c.id for c in bench}
    for key, e in results.items():
        for cr in e.cases:
            if cr.case in ids and entry_for(entries, cr.params).key == key:
                rows[cr.case] = {"key": key, "cr": cr}
    for c in bench:
        key = entry_for(entries, c.params).key
        if c.id not in rows and key in results:
            e = results[key]
            rows[c.id] = {"key": key, "cr": CaseResult(case=c.id, status=e.status, params=dict(c.params),
                                                       message=e.message)}
    return rows


def row(key: str, cr: Any, roofline: str | None = None) -> dict[str, Any]:
    """One case of the table: the case's parameters, the dispatch genome's time, spread, TB/s and
    errors, each baseline's time and the speedup over it (baseline us / evolved us); with the name
    of the family's roofline reference (its one baseline that is not the operation, e.g. a kernel
    that only moves the bytes), also `fraction_of_roofline`: roofline us / evolved us."""
    out: dict[str, Any] = {"case": cr.case, **{k: v for k, v in cr.params.items()
                                               if isinstance(v, (str, int, float, bool))},
                           "status": cr.status.value, "genome_key": key, "evolved_us": cr.time_us,
                           "evolved_spread_us": cr.spread_us, "evolved_tbps": cr.tbps}
    for name, us in cr.baselines_us.items():
        out[f"{name}_us"] = us
        out[f"speedup_vs_{name}"] = us / cr.time_us if us and cr.time_us else None
    if roofline is not None:
        out["fraction_of_roofline"] = out.get(f"speedup_vs_{roofline}")
    out.update(max_abs_err=cr.max_abs_err, rel_l2_err=cr.rel_l2_err, notes=cr.message)
    return out


def roofline_reference(family: str) -> str | None:
    """The family's roofline reference: its one baseline marked `objective=False` (timed beside
    the others, never a speedup baseline), or None when it has none or several."""
    from fitness.family import load_family

    refs = [b.name for b in load_family(family).baselines() if not b.objective]
    return refs[0] if len(refs) == 1 else None


def missing_baselines(asked: Sequence[str], rows: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """name -> why, for each baseline the table asked for that no case timed: the judge's first
    note about it (e.g. "baseline quack: unusable: ModuleNotFoundError: ..."), so a table timed on
    a machine that lacked a peer says so in its own files instead of dropping the column."""
    timed = {b for v in rows.values() for b in v["cr"].baselines_us}
    out = {}
    for name in asked:
        if name in timed:
            continue
        notes = (f"baseline {name}: {note}" for v in rows.values() for note in baseline_notes(v["cr"].message, name))
        out[name] = next(notes, "not timed on any case")
    return out


def summarize(summary: dict[str, Any]) -> dict[str, Any]:
    """The geomean and the minimum speedup against each baseline timed (over the cases that have
    one), and how many cases that is."""
    for name in summary["baselines"]:
        sp = [r[f"speedup_vs_{name}"] for r in summary["cases"] if r.get(f"speedup_vs_{name}")]
        summary[f"geomean_speedup_vs_{name}"] = geomean(sp)
        summary[f"min_speedup_vs_{name}"] = min(sp) if sp else None
        summary[f"cases_vs_{name}"] = len(sp)
    fr = [r["fraction_of_roofline"] for r in summary["cases"] if r.get("fraction_of_roofline")]
    if fr:
        summary["geomean_fraction_of_roofline"] = geomean(fr)
        summary["min_fraction_of_roofline"] = min(fr)
    return summary


def markdown(summary: Mapping[str, Any]) -> str:
    def f(v: Any, fmt: str = "{:.1f}") -> str:
        return fmt.format(v) if v else "-"

    names = list(summary["baselines"])
    lines = [f"# {summary['family']}: the dispatch table of run {summary['run_id']} on {summary['gpu']}", "",
             f"Command: `{summary['command']}`", "",
             "Each dispatch genome verified and timed on the cases the table gives it, beside every baseline, "
             "interleaved in one process; vs X = X us / evolved us.", "",
             "| case | genome | evolved us | TB/s | " + " | ".join(f"{n} us" for n in names) + " | "
             + " | ".join(f"vs {n}" for n in names) + " |",
             "|---|---|---:|---:|" + "---:|" * (2 * len(names))]
    for r in summary["cases"]:
        lines.append(f"| {r['case']} | `{r['genome_key'][:8]}` | {f(r['evolved_us'])} | {f(r['evolved_tbps'], '{:.2f}')} | "
                     + " | ".join(f(r.get(f"{n}_us")) for n in names) + " | "
                     + " | ".join(f(r.get(f"speedup_vs_{n}"), "{:.3f}") for n in names) + " |")
    for name, why in (summary.get("missing_baselines") or {}).items():
        lines[4:4] = [f"**Not timed: {name}** ({why})", ""]
    lines += ["", "| baseline | geomean speedup | min speedup | cases |", "|---|---:|---:|---:|"]
    for n in names:
        lines.append(f"| {n} | {f(summary.get(f'geomean_speedup_vs_{n}'), '{:.3f}')} | "
                     f"{f(summary.get(f'min_speedup_vs_{n}'), '{:.3f}')} | {summary.get(f'cases_vs_{n}', '-')} |")
    untimed = [r for r in summary["cases"] if r.get("evolved_us") is None]
    if untimed:      # a row of dashes says nothing: why each case has no time (the judge's own words, cut)
        lines += ["", f"Cases without a time ({len(untimed)}):", ""]
        lines += [f"- {r['case']} (`{r['genome_key'][:8]}`): {r['status']}: {one_line(str(r.get('notes') or '').replace('|', '/'), 240)}"
                  for r in untimed]
    return "\n".join(lines) + "\n"


def build_table(source: str, out: str, *, playoff: str | None = None, baselines: Sequence[str] | None = None,
                matrix: str | None = None, cases: Sequence[str] = (), run_id: str | None = None,
                command: str = "", timeout_s: float = 300.0, max_s: float = 0.0) -> str:
    """`evo table`: the dispatch table of `source` (a run directory, dump or store URL; with a
    playoff file, its winners where it contested, as `evo dispatch/export --playoff`) timed through
    the GPU judge beside `baselines` (default: every baseline the family offers) on the run's
    benchmark matrix (or `matrix`; `cases`: only these case ids). Writes OUT.json and OUT.md after
    every genome and returns the markdown."""
    from evo.analysis import run_to_judge
    from evo.playoff import read_winners
    from evo.progress import Progress

    run = run_to_judge(source, run_id=run_id, matrix=matrix)
    frames, space, family, matrix = run.frames, run.space, run.family, run.matrix
    entries = build_dispatch(frames.records, frames.keys, baseline=run.baseline,
                             winners=read_winners(playoff, frames.keys) if playoff else None)
    if not entries:
        raise TableError(f"run {frames.run['run_id']}: no verified evaluation with timed cases, no dispatch table")
    genomes = {e.key: space.make(e.genome) for e in entries}
    wanted = {c for c in cases if c}
    t0 = time.time()
    roofline = roofline_reference(family)
    with run.judge(baselines or None, timeout_s) as ev:
        ids = {c.id for c in ev.settings.bench_cases}
        if wanted - ids:
            raise TableError(f"--cases: {sorted(wanted - ids)} are not cases of the matrix {matrix!r}")
        results: dict[str, Any] = {}
        asked = [c for c in ev.settings.bench_cases if not wanted or c.id in wanted]

        def publish(final: bool) -> str:
            rows = case_rows(entries, results, asked)
            names = list(dict.fromkeys(b for v in rows.values() for b in v["cr"].baselines_us))   # as timed
            summary = summarize({"family": family, "run_id": frames.run["run_id"], "playoff": playoff,
                                 "gpu": ev.describe().get("device") or "?", "command": command, "matrix": matrix,
                                 "baselines": names, "cases_asked": sorted(wanted) or "all", "complete": final,
                                 "missing_baselines": missing_baselines(ev.settings.baselines, rows),
                                 "seconds": round(time.time() - t0, 1),
                                 "roofline": roofline,
                                 "cases": [row(v["key"], v["cr"], roofline if roofline in names else None)
                                           for _, v in sorted(rows.items())]})
            Path(out + ".json").write_text(json.dumps(summary, indent=1, default=str))
            text = markdown(summary)
            Path(out + ".md").write_text(text)
            return text

        with Progress(len(genomes), "evo table", "genomes") as bar:
            def took(key: str, e: Any) -> None:
                first = key not in results          # a genome's cases judged again publish a second time
                results[key] = e
                publish(final=False)
                if first:
                    bar.advance()
            time_dispatch(ev, entries, genomes, wanted, on_result=took, max_s=max_s)
        text = publish(final=True)
        for name, why in missing_baselines(ev.settings.baselines, case_rows(entries, results, asked)).items():
            print(f"warning: evo table: baseline {name} was not timed on any case: {why}", file=sys.stderr)
        return text
