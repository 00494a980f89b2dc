"""Nsight Compute's raw CSV of kda_prep_probe.py's launches (experiments/device/kda_ncu.sh) as one
table per kernel: time, the SM's and memory's share of their peaks, DRAM bytes, occupancy, how busy
the issue slots are, the busiest pipes and the warp stall reasons that dominate.

    python3 ncu_kda.py --csv kda_ncu_raw.csv --probe kda_ncu_probe.json --out kda_ncu   # .json and .md

Why: the KDA table measures each genome's two kernels as totals; whether kda_prep and kda_rec are
bound by issue, a pipe (the tensor cores, FMA, MUFU), shared memory, DRAM or latency (stalls) is
what decides the next change (kernels/kda/README.md "Measured: v8"). Rows are matched to the probe's
launches by order (per scenario, per genome, kda_prep then kda_rec, as kda_prep_probe.py launches
them with --reps 1 --warmup 0), each checked by kernel name; a count that does not match is an error,
never a silent misattribution. Metrics are picked by name pattern, so a section that ncu did not
collect leaves its columns out instead of failing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ncu_table import _number as number  # noqa: E402  (the raw CSV's reader: one place for it)
from ncu_table import read_rows, read_units, scaled  # noqa: E402

#: ncu metric -> (label, scale) for the main table, when present; a scale given as (kind, factor) is
#: applied to the value in base units (seconds, bytes) after converting from the unit ncu printed
MAIN = {
    "gpu__time_duration.sum": ("us", ("time", 1e6)),
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": ("SM % peak", 1.0),
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": ("memory % peak", 1.0),
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("DRAM % peak", 1.0),
    "dram__bytes_read.sum": ("DRAM read MB", ("bytes", 1e-6)),
    "dram__bytes_write.sum": ("DRAM write MB", ("bytes", 1e-6)),
    "sm__warps_active.avg.pct_of_peak_sustained_active": ("occupancy % (achieved)", 1.0),
    "sm__maximum_warps_per_active_cycle_pct": ("occupancy % (theoretical)", 1.0),
    "smsp__issue_active.avg.pct_of_peak_sustained_active": ("issue slots busy %", 1.0),
    "smsp__average_warps_active_per_issue_active.ratio": ("warp cycles per issue", 1.0),
    "smsp__inst_executed.sum": ("instructions M", 1e-6),
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed": ("shared wavefronts % peak", 1.0),
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": ("shared bank conflicts", 1.0),
    "lts__t_sector_hit_rate.pct": ("L2 hit %", 1.0),
    "launch__registers_per_thread": ("registers", 1.0),
    "launch__grid_size": ("grid", 1.0),
    "launch__occupancy_limit_registers": ("CTAs/SM by registers", 1.0),
    "launch__occupancy_limit_shared_mem": ("CTAs/SM by shared memory", 1.0),
    "launch__shared_mem_config_size": ("shared memory configured KB", ("bytes", 1e-3)),   # the carveout the driver chose
}
STALL = re.compile(r"^smsp__average_warps_issue_stalled_(?P<what>\w+?)_per_issue_active\.ratio$")
NOT_STALLS = {"selected"}           # the warp that issued: a share of the cycles, not a stall
#: a pipe's busy cycles and its issued instructions, each as % of its peak: two measures, two labels
PIPE = re.compile(r"^sm__(?:pipe_(?P<cycles>\w+?)_cycles_active|inst_executed_pipe_(?P<inst>\w+?))"
                  r"\.avg\.pct_of_peak_sustained_active$")
PROFILED = re.compile(r"^kda_(prep|rec)")     # kda_ncu.sh's --kernel-name filter
TOP = 6


def probe_launches(probe: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(scenario, genome, kernel) in the order kda_prep_probe.py launched them, those ncu profiled
    (kda_flags_zero, a pdl genome's first launch, is not)."""
    return [(sc["case"], name, kernel) for sc in probe["scenarios"] for name, g in sc["genomes"].items()
            for kernel in g["launch_ms"] if PROFILED.match(kernel)]


def kernel_summary(row: dict[str, str], units: dict[str, str] | None = None) -> dict[str, Any]:
    units = units or {}
    main = {label: round(scaled(v, scale, units.get(m, "")), 4) for m, (label, scale) in MAIN.items()
            if (v := number(row.get(m))) is not None}
    stalls = {mt["what"]: v for m, val in row.items()
              if (mt := STALL.match(m)) and mt["what"] not in NOT_STALLS and (v := number(val)) is not None}
    pipes = {(f"{mt['cycles']} (cycles)" if mt["cycles"] else f"{mt['inst']} (inst)"): v for m, val in row.items()
             if (mt := PIPE.match(m)) and (v := number(val)) is not None}
    top = lambda d: dict(sorted(((k, round(v, 3)) for k, v in d.items()), key=lambda kv: -kv[1])[:TOP])  # noqa: E731
    return {"metrics": main, "stalls": top(stalls), "pipes": top(pipes)}


def summarize(rows: list[dict[str, str]], probe: dict[str, Any], units: dict[str, str] | None = None) -> dict[str, Any]:
    launches = probe_launches(probe)
    if len(rows) != len(launches):
        raise ValueError(f"ncu profiled {len(rows)} kernels, the probe launched {len(launches)} kda kernels: "
                         "run the probe with --reps 1 --warmup 0 and ncu's --kernel-name filter")
    out = []
    for row, (case, genome, kernel) in zip(rows, launches):
        name = row.get("Kernel Name", "")
        if not name.startswith(kernel):
            raise ValueError(f"ncu row {row.get('ID')} is {name!r}, the probe's launch there was {kernel!r}")
        out.append({"case": case, "genome": genome, "kernel": kernel, **kernel_summary(row, units)})
    return {"device": probe.get("device", ""), "kernels": out}


def markdown(summary: dict[str, Any], command: str = "") -> str:
    lines = [f"# kda_prep and kda_rec under Nsight Compute ({summary['device']})", ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    lines += ["One launch of each kernel, the caches flushed before it, the clocks left alone "
              "(--clock-control none); one column per (scenario, genome, kernel).", ""]
    ks = summary["kernels"]
    head = [f"{k['case']} {k['genome'].replace('split-bf16-', '')} {k['kernel']}" for k in ks]
    lines += ["| metric | " + " | ".join(head) + " |", "|---|" + "---:|" * len(ks)]
    labels = [label for label, _ in MAIN.values() if any(label in k["metrics"] for k in ks)]
    for label in labels:
        lines.append(f"| {label} | " + " | ".join(f"{k['metrics'][label]:g}" if label in k["metrics"] else "-"
                                                   for k in ks) + " |")
    for part, what in (("pipes", "busiest pipes, % of peak: busy cycles (cycles) or issued instructions (inst)"),
                       ("stalls", "stall reasons, warp cycles per issued instruction")):
        lines += ["", f"{what}:", ""]
        for k, h in zip(ks, head):
            lines.append(f"- {h}: " + (", ".join(f"{n} {v:g}" for n, v in k[part].items()) or "not collected"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", required=True, help="ncu --import REPORT --csv --page raw")
    ap.add_argument("--probe", required=True, help="kda_prep_probe.py's --out of the profiled run")
    ap.add_argument("--out", required=True, help="path stem: writes .json and .md")
    ap.add_argument("--command", default="")
    args = ap.parse_args(argv)
    try:
        text = Path(args.csv).read_text()
        summary = summarize(read_rows(text), json.loads(Path(args.probe).read_text()), read_units(text))
    except (OSError, ValueError, KeyError) as exc:
        print(f"ncu_kda: {exc}", file=sys.stderr)
        return 2
    summary["command"] = args.command
    Path(args.out + ".json").write_text(json.dumps(summary, indent=1) + "\n")
    Path(args.out + ".md").write_text(markdown(summary, args.command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
