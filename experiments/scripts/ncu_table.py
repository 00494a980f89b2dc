"""Nsight Compute's raw CSV (`ncu --csv --page raw --metrics ...`) of short_rows_probe.py's calls as
one table per case: for each implementation its kernel time, DRAM bytes and throughput, achieved
and theoretical occupancy, launch shape, instructions and hit rates (medians over the repeats).

    python3 ncu_table.py --csv ncu.csv --order order.json --out short_rows_ncu   # writes .json and .md

Calls are matched to ncu's rows by their NVTX label (`impl|case|repeat`, kept as the kernel name
when ncu runs with --nvtx --print-nvtx-rename kernel); without labels, by launch order when there
is one kernel per call; otherwise the rows are listed unmatched, in order, with ncu's names.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import statistics
import sys
from pathlib import Path

#: a unit ncu prints -> its size in the base unit (seconds, bytes): ncu picks the unit per metric and
#: per run (a 0.5 ms kernel's time in us, a 600 MB read in Mbyte; a 20 us one in ns and byte)
UNIT_SIZE = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3, "second": 1.0,
             "s": 1.0, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12}
#: the unit assumed where the CSV has no units row (ncu's units for short kernels)
BASE_UNIT = {"time": "nsecond", "bytes": "byte"}


def scaled(value: float, scale: "float | tuple[str, float]", unit: str) -> float:
    """value (in the unit ncu printed) times a table's scale; a (kind, factor) scale converts to the
    kind's base unit (seconds, bytes) first. A unit this table does not know is an error, not a
    silent misreading."""
    if not isinstance(scale, tuple):
        return value * scale
    kind, factor = scale
    unit = unit or BASE_UNIT[kind]
    if unit.endswith("/block"):                    # launch__shared_mem_per_block_*: bytes a block
        unit = unit[: -len("/block")]
    if unit not in UNIT_SIZE:
        raise ValueError(f"ncu printed the unit {unit!r} for a {kind} metric; UNIT_SIZE does not know it")
    return value * UNIT_SIZE[unit] * factor


#: ncu metric -> (column, scale): what the table shows, in the units it shows them; a (kind, factor)
#: scale applies to the value in base units (`scaled`)
METRICS = {
    "gpu__time_duration.sum": ("us", ("time", 1e6)),
    "dram__bytes_read.sum": ("DRAM read MB", ("bytes", 1e-6)),
    "dram__bytes_write.sum": ("DRAM write MB", ("bytes", 1e-6)),
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("DRAM % of peak", 1.0),
    "sm__warps_active.avg.pct_of_peak_sustained_active": ("achieved occupancy %", 1.0),
    "sm__maximum_warps_per_active_cycle_pct": ("theoretical occupancy %", 1.0),
    "launch__registers_per_thread": ("registers", 1.0),
    "launch__grid_size": ("grid", 1.0),
    "launch__block_size": ("block", 1.0),
    "launch__shared_mem_per_block_dynamic": ("dynamic smem B", ("bytes", 1.0)),
    "launch__waves_per_multiprocessor": ("waves", 1.0),
    "smsp__inst_executed.sum": ("instructions M", 1e-6),
    "lts__t_sector_hit_rate.pct": ("L2 hit %", 1.0),
    "l1tex__t_sector_hit_rate.pct": ("L1 hit %", 1.0),
    "sm__cycles_elapsed.avg": ("SM cycles", 1.0),
}
#: why a kernel of a memory-bound operation is slower than another at the same bytes (the
#: RMSNorm backward's INT21 comparison, bwd_ncu.sh): where its warps wait, per issued instruction
#: (ncu's WarpStateStats section), how busy the issue slots and the shared-memory pipe are
#: (SchedulerStats, MemoryWorkloadAnalysis); a metric ncu did not collect shows as "-"
_STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
STALLS = {
    "smsp__issue_active.avg.pct_of_peak_sustained_active": ("issue active %", 1.0),
    "smsp__warps_active.avg.per_cycle_active": ("warps per scheduler", 1.0),
    "smsp__warps_eligible.avg.per_cycle_active": ("eligible warps per scheduler", 1.0),
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum": ("shared wavefronts M", 1e-6),
    "l1tex__throughput.avg.pct_of_peak_sustained_active": ("L1 throughput %", 1.0),
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": ("L2 throughput %", 1.0),
    "smsp__cycles_active.avg": ("SMSP active cycles", 1.0),
    **{_STALL.format(r): (f"stall {r}", 1.0) for r in (
        "long_scoreboard", "short_scoreboard", "mio_throttle", "lg_throttle", "barrier", "membar", "wait",
        "math_pipe_throttle", "not_selected", "selected", "dispatch_stall", "drain", "no_instruction",
        "sleeping", "branch_resolving", "misc", "tex_throttle", "imc_miss")},
}
#: the column sets a table can show (--set)
METRIC_SETS = {"short_rows": METRICS, "stalls": {**METRICS, **STALLS}}
#: summed over the kernels of one call; the rest are taken from its longest kernel
ADDITIVE = {"gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "smsp__inst_executed.sum",
            "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"}
LABEL = re.compile(r"(?P<impl>[A-Za-z0-9_]+)\|(?P<case>(?:bf16|fp16|fp32)/\d+x\d+)\|(?P<repeat>\d+)")


def _number(text: str) -> float | None:
    text = (text or "").replace(",", "").strip()
    if not text or text in ("n/a", "N/A"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def read_rows(text: str) -> list[dict[str, str]]:
    """The kernel rows of ncu's raw CSV: ncu's own messages (==PROF==, ==WARNING==) and the units
    row that follows the header are skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise SystemExit("no ncu CSV header (a line starting with \"ID\") in the input: did ncu profile anything?")
    rows = list(csv.DictReader(io.StringIO("\n".join(line for line in lines[start:] if not line.startswith("=="))))) 
    return [r for r in rows if (r.get("ID") or "").strip().isdigit()]


def read_units(text: str) -> dict[str, str]:
    """metric -> the unit ncu printed for it in the row under the header ("us", "Mbyte", "%", ...): ncu
    picks a unit per metric and per run (a 0.5 ms kernel's time in us, a 600 MB read in Mbyte), so a
    value is read with its unit, never with an assumed one."""
    lines = [line for line in text.splitlines() if not line.startswith("==")]
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None or start + 1 >= len(lines):
        return {}
    header = next(csv.reader(io.StringIO(lines[start])))
    units = list(csv.reader(io.StringIO(lines[start + 1])))[0]
    if (units[0] if units else "").strip().isdigit():      # no units row: the first kernel row
        return {}
    return {name: unit.strip() for name, unit in zip(header, units)}


def match_calls(rows: list[dict[str, str]], order: list[dict]) -> tuple[dict[str, list[dict]], list[dict]]:
    """label -> its kernel rows, and the rows left unmatched."""
    by_label: dict[str, list[dict]] = {}
    unmatched = []
    labelled = [LABEL.search(r.get("Kernel Name", "")) for r in rows]
    if any(labelled):
        for r, m in zip(rows, labelled):
            if m:
                by_label.setdefault(m.group(0), []).append(r)
            else:
                unmatched.append(r)
    elif len(rows) == len(order):
        for r, call in zip(rows, order):
            by_label.setdefault(call["label"], []).append(r)
    else:
        unmatched = list(rows)
    return by_label, unmatched


def call_metrics(kernels: list[dict], units: dict[str, str] | None = None,
                 metrics: dict | None = None) -> dict[str, float | None]:
    units, metrics = units or {}, metrics or METRICS
    longest = max(kernels, key=lambda r: _number(r.get("gpu__time_duration.sum", "")) or 0.0)
    out: dict[str, float | None] = {}
    for metric, (column, scale) in metrics.items():
        unit = units.get(metric, "")
        if metric in ADDITIVE:
            vals = [_number(r.get(metric, "")) for r in kernels]
            out[column] = scaled(sum(v for v in vals if v is not None), scale, unit) \
                if any(v is not None for v in vals) else None
        else:
            v = _number(longest.get(metric, ""))
            out[column] = scaled(v, scale, unit) if v is not None else None
    out["kernels"] = len(kernels)
    return out


def summarize(rows: list[dict[str, str]], order: list[dict], units: dict[str, str] | None = None,
              metrics: dict | None = None) -> dict:
    metrics = metrics or METRICS
    by_label, unmatched = match_calls(rows, order)
    groups: dict[tuple[str, str], list[dict]] = {}
    for call in order:
        kernels = by_label.get(call["label"])
        if kernels:
            groups.setdefault((call["case"], call["impl"]), []).append(call_metrics(kernels, units, metrics))
    table = []
    for (case, impl), calls in groups.items():
        row = {"case": case, "impl": impl, "calls": len(calls)}
        for column in [c for c, _ in metrics.values()] + ["kernels"]:
            vals = [c[column] for c in calls if c.get(column) is not None]
            row[column] = statistics.median(vals) if vals else None
        table.append(row)
    return {"columns": [c for c, _ in metrics.values()] + ["kernels"], "rows": table, "unmatched": [{"Kernel Name": r.get("Kernel Name"), "ID": r.get("ID")} for r in unmatched],
            "kernel_rows": len(rows), "calls": len(order)}


def markdown(summary: dict, command: str = "", title: str = "Nsight Compute on short rows") -> str:
    columns = summary.get("columns") or [c for c, _ in METRICS.values()] + ["kernels"]
    lines = [f"# {title}", ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    lines += [f"{summary['calls']} profiled calls, {summary['kernel_rows']} kernel rows; medians over the repeats "
              "of each implementation on each case.", ""]
    for case in dict.fromkeys(r["case"] for r in summary["rows"]):
        lines += [f"## {case}", "", "| impl | " + " | ".join(columns) + " |",
                  "|---|" + "---:|" * len(columns)]
        for r in (r for r in summary["rows"] if r["case"] == case):
            cells = ["-" if r[c] is None else (f"{r[c]:.0f}" if abs(r[c]) >= 1000 else f"{r[c]:.3g}") for c in columns]
            lines.append(f"| {r['impl']} | " + " | ".join(cells) + " |")
        lines.append("")
    if summary["unmatched"]:
        lines += ["Unmatched kernel rows (ncu's names, in order): "
                  + ", ".join(str(u["Kernel Name"]) for u in summary["unmatched"][:40]), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", required=True)
    ap.add_argument("--order", required=True)
    ap.add_argument("--out", required=True, help="path prefix: writes PREFIX.json and PREFIX.md")
    ap.add_argument("--command", default="", help="the command that produced the CSV, for the record")
    ap.add_argument("--set", default="short_rows", choices=sorted(METRIC_SETS), help="the columns to show")
    ap.add_argument("--title", default="Nsight Compute on short rows")
    args = ap.parse_args(argv)
    text = Path(args.csv).read_text(errors="replace")
    summary = summarize(read_rows(text), json.loads(Path(args.order).read_text()), read_units(text),
                        METRIC_SETS[args.set])
    summary["command"] = args.command
    Path(args.out + ".json").write_text(json.dumps(summary, indent=1))
    text = markdown(summary, args.command, args.title)
    Path(args.out + ".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
