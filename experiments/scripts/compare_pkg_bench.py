"""Does the exported package's benchmark reproduce the judge's table? Row by row, from files.

    python3 experiments/scripts/compare_pkg_bench.py --table results/rmsnorm_fwd_h200.json \
        --pkg results/archive/session3/pkg_bench_c.json results/archive/session3/pkg1/pkg_bench.json \
              results/archive/session3/pkg2/pkg_bench.json \
        [--judge results/archive/session3/judge_fp32.json] --out results/package_vs_judge.md

A row "reproduces" when every package run is within `--tolerance` (relative) of the table, or
within the table's own spread (its interquartile range) plus the package run's; the summary
names every row that does not, so a reader sees the exceptions rather than an average.
No GPU needed: it reads JSON written on the device (bench_rmsnorm.py, `python -m <pkg>.bench`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _key(row: dict) -> tuple[str, int, int]:
    return (row["dtype"], int(row["M"]), int(row["N"]))


def compare(table: dict, pkgs: list[dict], judge: dict | None, tolerance: float) -> tuple[list[str], list[str]]:
    """(markdown lines of the row table, ids of the rows that do not reproduce)."""
    rows = {_key(c): c for c in table["cases"]}
    pkg_rows = [{_key(c): c for c in p["cases"]} for p in pkgs]
    judge_rows = {_key(c): c for c in judge["cases"]} if judge else {}
    head = "| dtype | M x N | genome | table us (spread) | " + " | ".join(f"package run {i + 1} us (IQR)" for i in range(len(pkgs)))
    head += " | judge again us |" if judge else " |"
    head += " worst difference | reproduces |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    misses = []
    for key in sorted(rows, key=lambda k: ("bf16fp16fp32".index(k[0]), k[2])):
        t = rows[key]
        base, spread = t["evolved_us"], t.get("evolved_spread_us") or 0.0
        cells, worst, ok = [], 0.0, True
        for pr in pkg_rows:
            p = pr.get(key)
            if p is None:
                cells.append("-")
                ok = False
                continue
            diff = p["kernel_us"] / base - 1.0
            worst = diff if abs(diff) > abs(worst) else worst
            near = abs(diff) <= tolerance or abs(p["kernel_us"] - base) <= spread + (p.get("kernel_iqr_us") or 0.0)
            ok &= near
            cells.append(f"{p['kernel_us']:.1f} ({p.get('kernel_iqr_us') or 0:.1f})")
        again = judge_rows.get(key)
        judge_cell = f" {again['evolved_us']:.1f} |" if again else (" - |" if judge else "")
        if not ok:
            misses.append(f"{key[0]} {key[1]}x{key[2]}")
        lines.append(f"| {key[0]} | {key[1]} x {key[2]} | {t['genome_key'][:8]} | {base:.1f} ({spread:.1f}) | "
                     + " | ".join(cells) + f" |{judge_cell} {100 * worst:+.1f} % | {'yes' if ok else '**no**'} |")
    return lines, misses


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", required=True, help="bench_rmsnorm.py JSON (the judge's table)")
    ap.add_argument("--pkg", nargs="+", required=True, help="the package's bench JSON, one per run")
    ap.add_argument("--judge", default="", help="optional: a second judge bench JSON (same dispatch)")
    ap.add_argument("--tolerance", type=float, default=0.03, help="relative difference counted as noise")
    ap.add_argument("--out", default="", help="write the markdown here (else print)")
    args = ap.parse_args(argv)
    table = json.loads(Path(args.table).read_text())
    pkgs = [json.loads(Path(p).read_text()) for p in args.pkg]
    judge = json.loads(Path(args.judge).read_text()) if args.judge else None
    lines, misses = compare(table, pkgs, judge, args.tolerance)
    n = len(table["cases"])
    text = "\n".join([
        "# The exported package's benchmark beside the judge's table",
        "",
        "Command: `python3 experiments/scripts/compare_pkg_bench.py " + " ".join(sys.argv[1:] if argv is None else argv) + "`",
        "",
        f"A row reproduces when every package run is within {100 * args.tolerance:.0f} % of the table or "
        "within the two measurements' spreads added.",
        "",
        *lines,
        "",
        f"{n - len(misses)} of {n} rows reproduce" + (f"; not: {', '.join(misses)}." if misses else "."),
        "",
    ])
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
