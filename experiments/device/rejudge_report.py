"""Lab tooling: the re-judged dispatch table and the judge's cost, from rejudge.py's files.

    python3 experiments/device/rejudge_report.py --before results/rejudge/before.json \
        --after results/rejudge/after.json --out results/rejudge_dispatch

writes OUT.md (per genome: the hardened verdict and why, GPU seconds before and after, split by
stage) and OUT.json (the figures: median GPU seconds per candidate, CHECK share, cost ratio).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _load(path: str) -> dict:
    return json.loads(Path(path).read_text())


def summarize(before: dict, after: dict) -> dict:
    b = {g["key"]: g for g in before["genomes"]}
    a = {g["key"]: g for g in after["genomes"]}
    both = [k for k in a if k in b]
    rows = []
    for k in a:
        ga, gb = a[k], b.get(k)
        rows.append({
            "key": k, "status": ga["status"], "message": ga["message"],
            "gpu_s_after": ga["gpu_seconds"], "check_s_after": ga["check_seconds"], "bench_s_after": ga["bench_seconds"],
            "gpu_s_before": gb["gpu_seconds"] if gb else None,
            "check_s_before": gb["check_seconds"] if gb else None,
            "bench_s_before": gb["bench_seconds"] if gb else None,
            "status_before": gb["status"] if gb else None,
            "check_cases_unsupported": len(ga.get("check_unsupported", [])),
            "geomean_speedup_after": ga.get("geomean_speedup"),
            "geomean_speedup_before": gb.get("geomean_speedup") if gb else None,
        })
    # the first genome of each judge pays the worker's one-time start (cupy kernel compiles):
    # medians over the rest
    first = {before["genomes"][0]["key"], after["genomes"][0]["key"]} if before["genomes"] and after["genomes"] else set()
    warm = [r for r in rows if r["key"] in both and r["key"] not in first
            and (r["bench_s_after"] or 0) > 0 and (r["bench_s_before"] or 0) > 0]

    def med(key: str) -> float | None:
        vals = [r[key] for r in warm if r[key] is not None]
        return statistics.median(vals) if vals else None

    out = {
        "device": after.get("device"), "matrix": after.get("matrix"), "genomes": len(rows),
        "compared": len(warm), "failing_now": [r["key"] for r in rows if r["status"] != "OK"],
        "median_gpu_s_before": med("gpu_s_before"), "median_gpu_s_after": med("gpu_s_after"),
        "median_check_s_before": med("check_s_before"), "median_check_s_after": med("check_s_after"),
        "median_bench_s_before": med("bench_s_before"), "median_bench_s_after": med("bench_s_after"),
        "rows": rows,
    }
    if out["median_gpu_s_before"] and out["median_gpu_s_after"]:
        out["cost_ratio"] = out["median_gpu_s_after"] / out["median_gpu_s_before"]
        out["check_share_after"] = out["median_check_s_after"] / out["median_gpu_s_after"]
        out["candidates_per_gpu_minute_before"] = 60.0 / out["median_gpu_s_before"]
        out["candidates_per_gpu_minute_after"] = 60.0 / out["median_gpu_s_after"]
    return out


def markdown(s: dict, cmd: str) -> str:
    def f(v: float | None, nd: int = 2) -> str:
        return "-" if v is None else f"{v:.{nd}f}"

    lines = ["# The dispatch table re-judged by the hardened judge (protocol 2)", "",
             f"Device: {s['device']}; matrix {s['matrix']} (33 cases), torch baseline, no hopeless cut. "
             f"Made by: `{cmd}`.", "",
             f"- Genomes: {s['genomes']}; failing under the hardened judge: "
             f"{', '.join(k[:8] for k in s['failing_now']) or 'none'}.",
             f"- GPU seconds per candidate (median over the {s['compared']} genomes both judges timed on all cases, "
             f"the first of each judge left out: it pays the worker's start): before {f(s['median_gpu_s_before'])} (CHECK "
             f"{f(s['median_check_s_before'])}, BENCH {f(s['median_bench_s_before'])}), after "
             f"{f(s['median_gpu_s_after'])} (CHECK {f(s['median_check_s_after'])}, BENCH "
             f"{f(s['median_bench_s_after'])}); ratio {f(s.get('cost_ratio'))}; CHECK share after "
             f"{f(100 * s['check_share_after'] if s.get('check_share_after') else None, 1)} %.",
             "", "| genome | verdict now | before | GPU s before | GPU s after | CHECK s after | BENCH s after | "
             "check cases it cannot launch | geomean vs torch before / after | message |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in s["rows"]:
        msg = " ".join(str(r["message"]).split()).replace("|", "\\|")[:200]
        lines.append(f"| {r['key'][:8]} | {r['status']} | {r['status_before'] or '-'} | {f(r['gpu_s_before'])} | "
                     f"{f(r['gpu_s_after'])} | {f(r['check_s_after'])} | {f(r['bench_s_after'])} | "
                     f"{r['check_cases_unsupported']} | {f(r['geomean_speedup_before'], 3)} / "
                     f"{f(r['geomean_speedup_after'], 3)} | {msg} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--out", required=True, help="output path without extension (.json and .md are written)")
    ap.add_argument("--cmd", default="experiments/device/rejudge.py (see results/README.md)")
    args = ap.parse_args()
    s = summarize(_load(args.before), _load(args.after))
    Path(args.out + ".json").write_text(json.dumps(s, indent=1))
    Path(args.out + ".md").write_text(markdown(s, args.cmd))
    print(markdown(s, args.cmd))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
