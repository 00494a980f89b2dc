"""Final RMSNorm forward table: the dispatch table's genomes timed beside every baseline.

Each distinct genome of the dispatch table goes through the full judge on the cases the table
gives it (the check cases, then fresh-input verification of every one of its benchmark cases,
then timing interleaved with torch, torch.compile, QuACK and Liger where they import, all in one
process).

    python experiments/scripts/bench_rmsnorm.py --dispatch results/rmsnorm_dispatch.json \
        --matrix quack:bf16 --out results/rmsnorm_fwd_h200
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

BASELINES = ("torch", "torch_compile", "quack", "quack_tuned", "liger")


def versions() -> dict:
    out = {"python": platform.python_version()}
    for dist in ("torch", "cupy-cuda13x", "triton", "quack-kernels", "nvidia-cutlass-dsl", "liger-kernel", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    try:
        out["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True).stdout.strip()
    except OSError:
        out["driver"] = None
    from fitness.toolchain import toolkit_version

    out["nvcc"] = toolkit_version()
    return out


def geomean(vals):
    vals = [v for v in vals if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def main() -> int:
    from evo.dispatch import DispatchEntry, lookup
    from fitness.gpu_evaluator import GPUEvaluator
    from genomes.rmsnorm import SPACE

    ap = argparse.ArgumentParser()
    ap.add_argument("--dispatch", required=True)
    ap.add_argument("--matrix", default="quack:bf16")
    ap.add_argument("--out", required=True, help="path prefix: writes PREFIX.json and PREFIX.md")
    ap.add_argument("--baselines", default=",".join(BASELINES),
                    help="comma list; quack_tuned autotunes exhaustively at its first call per shape "
                         "(minutes of JIT compiles): leave it out when device time is short")
    ap.add_argument("--cases", default="",
                    help="comma list of case ids of the matrix to time (e.g. bf16/32768x4096); default: all")
    args = ap.parse_args()
    table = json.loads(Path(args.dispatch).read_text())
    entries = [DispatchEntry(e["dtype"], e["n_min"], e["n_max"], e["key"], e["genome"]) for e in table["entries"]]
    genomes = {e.key: SPACE.make(e.genome) for e in entries}
    t0 = time.time()
    results = {}
    baselines = [b for b in args.baselines.split(",") if b]
    with GPUEvaluator("rmsnorm", SPACE, matrix=args.matrix, baseline="torch", baselines=baselines,
                      timeout_s=300) as ev:
        serves: dict[str, list[str]] = {}          # genome key -> the cases the table gives it
        wanted = {c for c in args.cases.split(",") if c}
        unknown = wanted - {c.id for c in ev.settings.bench_cases}
        if unknown:
            raise SystemExit(f"--cases: {sorted(unknown)} are not cases of --matrix {args.matrix}")
        for c in ev.settings.bench_cases:
            if wanted and c.id not in wanted:
                continue
            serves.setdefault(lookup(entries, c.params["dtype"], int(c.params["N"])).key, []).append(c.id)
        for key, g in genomes.items():
            if key not in serves:
                print(f"{key}: serves no case of {args.matrix}", flush=True)
                continue
            (e,) = ev.evaluate_cases([g], serves[key])
            print(f"{key}: {len(serves[key])} cases {e.status.value} {e.message[:200]}", flush=True)
            results[key] = e
        device = ev.describe().get("device")
    cases = []
    for key, e in results.items():
        for cr in e.cases:
            dt, n = cr.params["dtype"], int(cr.params["N"])
            if lookup(entries, dt, n).key != key:
                continue
            b = dict(cr.baselines_us)
            # QuACK = the better of its plain and autotuned paths (the tuned one fails to launch
            # for N >= 32768 on the H200 and is then absent)
            quack_paths = [v for v in (b.get("quack"), b.get("quack_tuned")) if v]
            b["quack"] = min(quack_paths) if quack_paths else None
            row = {"M": cr.params["M"], "N": n, "dtype": dt, "status": cr.status.value, "genome_key": key,
                   "evolved_us": cr.time_us, "evolved_spread_us": cr.spread_us, "evolved_tbps": cr.tbps,
                   "quack_us": b.get("quack"), "quack_plain_us": cr.baselines_us.get("quack"),
                   "quack_tuned_us": cr.baselines_us.get("quack_tuned"), "torch_us": b.get("torch"), "torch_compile_us": b.get("torch_compile"),
                   "liger_us": b.get("liger"), "max_abs_err": cr.max_abs_err, "rel_l2_err": cr.rel_l2_err,
                   "notes": cr.message}
            for name in BASELINES:
                base = b.get(name)
                row[f"speedup_vs_{name}"] = (base / cr.time_us) if base and cr.time_us else None
            cases.append(row)
    cases.sort(key=lambda r: (r["dtype"], r["N"]))
    summary = {"gpu": device, "versions": versions(), "command": " ".join(["python", *sys.argv]),
               "dispatch": args.dispatch, "matrix": args.matrix, "cases_asked": args.cases or "all", "seconds": time.time() - t0, "cases": cases}
    for name in BASELINES:
        sp = [r[f"speedup_vs_{name}"] for r in cases if r.get(f"speedup_vs_{name}")]
        summary[f"geomean_speedup_vs_{name}"] = geomean(sp)
        summary[f"min_speedup_vs_{name}"] = min(sp) if sp else None
    Path(args.out + ".json").write_text(json.dumps(summary, indent=1, default=str))
    lines = [f"# RMSNorm forward on {device}", "", f"Command: `{summary['command']}`", "",
             f"Versions: {json.dumps(summary['versions'])}", "",
             "| dtype | M x N | evolved us | TB/s | torch us | torch.compile us | QuACK us | Liger us | vs torch | vs QuACK |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def f(v, fmt="{:.1f}"):
        return fmt.format(v) if v else "-"

    for r in cases:
        lines.append(f"| {r['dtype']} | {r['M']} x {r['N']} | {f(r['evolved_us'])} | {f(r['evolved_tbps'], '{:.2f}')} | "
                     f"{f(r['torch_us'])} | {f(r['torch_compile_us'])} | {f(r['quack_us'])} | {f(r['liger_us'])} | "
                     f"{f(r['speedup_vs_torch'], '{:.3f}')} | {f(r['speedup_vs_quack'], '{:.3f}')} |")
    lines += ["", "| baseline | geomean speedup | min speedup |", "|---|---:|---:|"]
    for name in BASELINES:
        lines.append(f"| {name} | {f(summary[f'geomean_speedup_vs_{name}'], '{:.3f}')} | "
                     f"{f(summary[f'min_speedup_vs_{name}'], '{:.3f}')} |")
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
