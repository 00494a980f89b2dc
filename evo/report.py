"""`evo report`: one self-contained Markdown page per run, with its figures as PNGs beside it.

    write_report(load_run("results/<name>_run.json"), "reports/<name>") -> .../report.md

The page holds the run header (id, family, seed, metric, device, toolkit, counts by status, stop
reason), the best genome and its per-case table against every baseline, the dispatch table
(evo.dispatch.build_dispatch over the run's evaluations) and every figure of evo.plots, linked.
Tables print figures to 4 significant digits; the exact values are in the frames (evo.analysis).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

from evo.analysis import RunFrames, case_occupancy, one_gene_occupancy, one_gene_pairs, one_gene_summary, operator_table
from evo.dispatch import build_dispatch, markdown_rows, scope
from fitness.family import KeyPoint
from fitness.objectives import geomean
from fitness.records import CaseResult, Evaluation, Status


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.{digits}g}"
    return str(value)


def _table(header: list[str], rows: Iterable[list[Any]], align: str | None = None) -> list[str]:
    align = align or "|".join("---" if i == 0 else "---:" for i in range(len(header)))
    lines = ["| " + " | ".join(header) + " |", "|" + align + "|"]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return lines


def _evaluations(frames: RunFrames) -> list[Evaluation]:
    """The run's Evaluations: the loaded records, or rebuilt from the frames when built by hand."""
    if frames.records:
        return [r.evaluation for r in frames.records]
    out = []
    bases = frames.baselines
    for _, row in frames.evaluations.iterrows():
        cases = frames.cases[frames.cases["key"] == row["key"]]
        crs = tuple(CaseResult(case=c["case"], status=Status(c["status"]),
                               params={p: c[p] for p in frames.keys.columns},
                               time_us=None if math.isnan(c["time_us"]) else c["time_us"],
                               tbps=None if math.isnan(c["tbps"]) else c["tbps"],
                               baselines_us={b: c[f"base.{b}_us"] for b in bases
                                             if not math.isnan(c[f"base.{b}_us"])})
                    for _, c in cases.iterrows())
        genome = {g: row[f"gene.{g}"] for g in frames.genes}
        out.append(Evaluation(key=row["key"], genome=genome, space=frames.run.get("family", ""),
                              status=Status(row["status"]), cases=crs, suspect=bool(row["suspect"])))
    return out


def _yield_section(frames: RunFrames) -> list[str]:
    """Per operator: proposals, valid, compiled, verified, better than the parent, new bests, GPU
    seconds, tokens and cost (evo.operator_yield); with proposers, one row per rule and answer kind."""
    from evo.operator_yield import exchange_lines, markdown, operator_yield

    events = frames.run.get("events") or []
    if not frames.records:
        return []
    out = ["## Yield per operator", "",
           "Proposals: a proposer's every proposal (also those never judged: invalid, duplicate, skipped, "
           "endpoint errors), a strategy's children; valid: passed validation (repaired: after a repair to the "
           "nearest valid genome); judged: evaluated (the budget may end first); improved: better than the best "
           "parent; new best: better than everything recorded before it.", ""]
    out += markdown(operator_yield(frames.records, events, frames.metric)) + [""]
    if any(e.get("kind") == "proposal" for e in events):
        detail = [r for r in operator_yield(frames.records, events, frames.metric, detail=True)
                  if r.operator.split(":")[0] in ("guided", "llm")]
        out += ["By guided rule and LLM answer kind:", ""] + markdown(detail) + [""]
    talk = exchange_lines(events)
    if talk:
        out += ["### What the model was told and said", "",
                "One line per exchange (the full prompts and answers are the store's `llm` events).", ""] + talk + [""]
    return out


def write_report(frames: RunFrames, out_dir: str | Path, dpi: int = 110,
                 winners: Mapping[KeyPoint, str] | None = None, playoff: str | Path | None = None) -> Path:
    """Write out_dir/report.md and one PNG per figure; returns the path of report.md. `winners`
    (evo.playoff.read_winners of the file `playoff`) replace the recorded fastest of the widths a
    dispatch playoff contested, as in `evo dispatch --playoff`; ValueError if the run cannot
    explain one of them."""
    from evo import plots

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run, ev, metric = frames.run, frames.evaluations, frames.metric
    lines: list[str] = [f"# Run {run['run_id']}", ""]

    devices = sorted({d for d in ev["device"] if d}) or ["-"]
    toolkits = sorted({t for t in ev["toolkit"] if t}) or ["-"]
    counts = ev["status"].value_counts()
    suspect = int(ev["suspect"].sum())
    header = [["family", run.get("family") or "-"], ["seed", run.get("seed")], ["metric", metric],
              ["baseline", run.get("baseline") or "-"], ["device", "; ".join(devices)],
              ["toolkit", "; ".join(toolkits)], ["evaluations", len(ev)],
              ["by status", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"],
              ["suspect (faster than physics)", suspect]]
    if run.get("stop_reason"):
        header.append(["stop reason", run["stop_reason"]])
    if run.get("state") and run["state"] != "dumped":
        header.append(["state", run["state"]])
    if run.get("elapsed_s"):
        header.append(["wall time", f"{run['elapsed_s']:.1f} s"])
    if ev["gpu_seconds"].notna().any():
        header.append(["GPU seconds (sum over evaluations)", f"{ev['gpu_seconds'].sum():.1f}"])
    lines += _table(["", ""], header, "---|---") + [""]

    best = frames.best()
    lines += ["## Best genome", ""]
    if best is None:
        lines += ["No evaluation in this run could compete (every one failed or was suspect).", ""]
    else:
        lines += [f"Key `{best['key']}`: {metric} = {float(best['fitness'])!r} (seq {best['seq']}, stage {best['stage']}, "
                  f"generation {best['generation']}, operator {best['operator']}"
                  + (f", parents {', '.join(best['parents'])}" if best["parents"] else "") + ").", ""]
        lines += _table(["gene", "value"], [[g, best[f"gene.{g}"]] for g in frames.genes], "---|---") + [""]
        objectives = [c for c in ev.columns if c.startswith("obj.")]
        if objectives:
            lines += _table(["objective", "value"], [[c[4:], best[c]] for c in objectives], "---|---:") + [""]
        cases = frames.best_cases()
        if not cases.empty:
            bases = frames.baselines
            head = ["case", "status", "time us", "spread us", "TB/s"]
            for b in bases:
                head += [f"{b} us", f"speedup vs {b}"]
            rows = []
            for _, c in cases.iterrows():
                row = [c["case"], c["status"], c["time_us"], c["spread_us"], c["tbps"]]
                for b in bases:
                    row += [c[f"base.{b}_us"], c[f"speedup.{b}"]]
                rows.append(row)
            lines += ["### Per case", ""] + _table(head, rows) + [""]
            for b in bases:
                gm = geomean([v for v in cases[f"speedup.{b}"] if v is not None])
                if gm:
                    lines.append(f"Geomean speedup vs {b} over these {len(cases)} cases: {gm:.4g}x.")
            lines.append("")

    occupancy = case_occupancy(frames)       # per (genome, case): resident CTAs and warps per SM
    lines += ["## Dispatch table", ""]
    baseline = run.get("baseline") or (frames.baselines[0] if frames.baselines else "torch")
    keys = frames.keys
    entries = build_dispatch(_evaluations(frames), keys, baseline=baseline, winners=winners)
    if not entries:
        lines += ["No verified evaluation with timed cases in this run.", ""]
    else:
        lines += [f"For each {scope(keys)}, the verified genome with the smallest geomean time "
                  "there (evo.dispatch)" + (f"; on the {len(winners)} widths the playoff `{Path(playoff).name}` "
                                            "contested, its winner (genomes judged again side by side in one "
                                            "process, `evo playoff`)." if winners else "."), ""]
        lines += markdown_rows(entries, baseline, code=True) + [""]
        if not occupancy.empty:
            occ = occupancy.set_index(["key", "case"])
            tb = frames.cases.set_index(["key", "case"])
            per_case = []
            for e in entries:
                here = [c for c in e.cases if (e.key, c) in occ.index and (e.key, c) in tb.index]
                for case in sorted(here, key=lambda c: keys.point(tb.loc[(e.key, c)])):   # by the ordered field
                    o, c = occ.loc[(e.key, case)], tb.loc[(e.key, case)]
                    per_case.append([case, f"`{e.key[:8]}`", c["time_us"], c["tbps"], int(o["ctas_per_sm"]),
                                     int(o["warps_per_sm"]), o["occupancy_limit"]])
            if per_case:
                lines += ["### Its cases: resident CTAs and warps per SM", "",
                          "From the launch the genome makes for the case and the registers ptxas reported "
                          "(fitness.occupancy); 'bound by' names the resource that stops one more CTA.", ""]
                lines += _table(["case", "genome", "time us", "TB/s", "CTAs per SM", "warps per SM", "bound by"],
                                per_case, "---|---|---:|---:|---:|---:|---") + [""]

    ops = operator_table(frames)
    if not ops.empty:
        lines += ["## Operators", ""]
        lines += _table(["operator", "children", "better than best parent", "share"],
                        [[r.operator, r.children, r.better, r.share_better] for r in ops.itertuples()]) + [""]

    lines += _yield_section(frames)

    pairs = one_gene_pairs(frames, baseline)
    if not pairs.empty:
        lines += ["## One-gene differences", "",
                  "Pairs of verified genomes that differ in exactly one gene (seed variants, one-gene "
                  f"mutations): the run's natural A/B experiments. Ratio: geometric mean, over the cases both "
                  f"timed, of b's speedup vs {baseline} over a's (evo.analysis.one_gene_pairs); better / worse: "
                  "pairs that moved by more than 0.5 %.", ""]
        summary = one_gene_summary(pairs)
        lines += _table(["gene", "a", "b", "pairs", "median ratio b/a", "better", "worse"],
                        [[r.gene, r.value_a, r.value_b, r.pairs, r.median_ratio, r.better, r.worse]
                         for r in summary.itertuples()], "---|---|---|---:|---:|---:|---:") + [""]
        by_warps = one_gene_occupancy(frames, pairs, baseline, occupancy=occupancy)
        if not by_warps.empty:
            lines += ["### By resident warps", "",
                      "The same pairs case by case, grouped by what the gene did to the warps one SM holds "
                      "for that case (fitness.occupancy: the launch's block and shared memory, the registers "
                      "ptxas reported; evo.analysis.one_gene_occupancy). A gene that costs registers helps "
                      "where it leaves them unchanged and hurts where it evicts CTAs.", ""]
            lines += _table(["gene", "a", "b", "warps per SM", "cases", "median ratio b/a", "better", "worse"],
                            [[r.gene, r.value_a, r.value_b, r.warps, r.cases, r.median_ratio, r.better, r.worse]
                             for r in by_warps.itertuples()], "---|---|---|---|---:|---:|---:|---:") + [""]

    lines += ["## Figures", ""]
    captions = {"fitness_curve": f"Best and median {metric} per generation; bars: share failed or suspect.",
                "best_so_far": "Best so far against evaluations and against cumulative time.",
                "speedup_per_case": "Best genome: speedup per case against each baseline.",
                "bandwidth": "Best genome: achieved TB/s per case against the copy ceiling.",
                "gene_effects": f"Mean {metric} per gene value (labels: scored evaluations).",
                "operator_success": "Share of children better than their best parent, per operator."}
    for name, fn in plots.ALL.items():
        fig = fn(frames)
        fig.savefig(out / f"{name}.png", dpi=dpi)
        lines += [f"### {name.replace('_', ' ')}", "", captions.get(name, ""), "", f"![{name}]({name}.png)", ""]

    path = out / "report.md"
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path
