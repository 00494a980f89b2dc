"""The surrogate's cross-validated error per shape class and the skip rule's backtest, for every
lesson in a store, as a markdown table (results/lessons_recorded.md).

    evo lessons build results/archive/session8/rmsnorm_fwd_h200_run.json.gz results/rmsnorm_fwd_h200_run.json \\
        --store sqlite:///lessons.db
    evo lessons build results/rejudge/rejudge_run.json.gz --store sqlite:///lessons.db
    python experiments/scripts/lessons_table.py sqlite:///lessons.db --out results/lessons_recorded.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evo.lessons import read_lessons


def _f(v, digits=3):
    return "-" if v is None else f"{v:.{digits}f}"


def table(lessons) -> list[str]:
    rows = ["| space | class | evaluations (verified) | ridge CV error | trees CV error | predicting the mean | rank corr. "
            "(used) | skipped / judged | failures caught | skipped but verified (of them >= median) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for x in lessons:
        p = x.payload
        cv = p.get("cv") or {}
        used = cv.get(p.get("surrogate"), {})
        sc = p.get("skip_check") or {}
        rows.append(f"| {x.space_version} | {x.shape_class} | {p['evaluations']} ({p['verified']}) | "
                    f"{_f(cv.get('ridge', {}).get('rmse_log'))} | {_f(cv.get('trees', {}).get('rmse_log'))} | "
                    f"{_f(used.get('baseline_rmse_log'))} | {_f(used.get('spearman'), 2)} ({p.get('surrogate')}) | "
                    f"{sc.get('skipped')} / {sc.get('judged')} | {sc.get('caught')} of {sc.get('failed')} | "
                    f"{sc.get('wrong')} ({sc.get('wrong_good')}) |")
    return rows


def failure_lines(lessons) -> list[str]:
    """One line per (space, class, signature), from the lessons themselves: no figure is typed in."""
    out = []
    for x in lessons:
        for sig in (x.payload.get("failures") or {}).get("signatures", []):
            genes = ", ".join(f"{k} = {v}" for k, v in sorted(sig.get("genes", {}).items())) or "(no shared gene)"
            out.append(f"- {x.space_version} {x.shape_class}: `{sig.get('category')}` when {genes}: "
                       f"{sig.get('failed')} of {sig.get('seen')}")
    return out or ["- none recorded"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lessons", help="a store URL or an `evo lessons export` file")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    found = read_lessons(args.lessons)
    sources = sorted({s for x in found for s in x.sources})
    spaces = sorted({x.space_version for x in found})
    text = ["# Lessons of the recorded H200 runs: how sure the surrogate is, how often the skip was wrong", "",
            f"Recorded data, no synthetic figure: {len(found)} lessons of gene space {', '.join(spaces)} from the runs "
            f"{', '.join(sources)}.", "",
            "CV error: 5-fold held-out RMSE of log(speedup vs torch over the class's cases), i.e. about the relative "
            "error of a predicted speedup; \"predicting the mean\" is what no model scores. Skip rule: failure "
            "signatures learned on 4 folds judge the 5th; \"skipped but verified\" are the skips that were wrong "
            "(candidates that in fact ran), and of those the ones at least as fast as the median verified one.", ""]
    text += table(found)
    text += ["", "Failure signatures (the genes every failure of a kind shares; failed of seen):", ""]
    text += failure_lines(found)
    text += ["", f"Made by: `python experiments/scripts/lessons_table.py {args.lessons} --out {args.out}` after "
             "`evo lessons build` of those runs (this script's docstring).", ""]
    Path(args.out).write_text("\n".join(text))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
