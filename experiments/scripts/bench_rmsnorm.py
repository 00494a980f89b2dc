"""Final RMSNorm forward table: the dispatch table's genomes timed beside every baseline.

The generic step is `evo table RUN --out PREFIX` (evo/table.py: any family, one pass beside the
baselines asked). This lab script adds what is RMSNorm's own: QuACK's autotuned path in a second
pass (its exhaustive autotune costs 23-29 s per shape), the faster QuACK path as the headline
figure, QuACK's autotune cache, and the committed table's exact layout.

Each distinct genome of the dispatch table goes through the full judge on the cases the table
gives it (the check cases, then fresh-input verification of every one of its benchmark cases,
then timing interleaved with torch, torch.compile, QuACK and Liger where they import, all in one
process). QuACK's autotuned path costs 23-29 s of JIT compiles per shape on the H200, so it gets
its own pass (`--tuned-cases`): the evolved kernel timed again beside QuACK plain and tuned.

    python experiments/scripts/bench_rmsnorm.py --dispatch results/rmsnorm_dispatch.json \
        --matrix quack:bf16,fp16,fp32 --tuned-cases bf16 --out results/rmsnorm_fwd_h200

A tuned pass run later on other cases (same dispatch table) joins the table without a GPU:

    python experiments/scripts/bench_rmsnorm.py merge --table T.json --tuned T2.json --out PREFIX
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: "copy" is not an RMSNorm: x copied into y (operation.CopyRoofline), the case's memory roofline
#: timed in the same process; speedup_vs_copy = copy_us / evolved_us is the share of it reached
BASELINES = ("torch", "torch_compile", "quack", "quack_tuned", "liger", "copy")

# the dispatch genomes through the judge on the cases the table gives them: the product step `evo table`
from evo.table import case_rows, time_dispatch  # noqa: E402,F401 - after the repo is on the path


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
    """fitness.objectives.geomean of the figures present (None: not measured)."""
    from fitness.objectives import geomean as _geomean

    return _geomean([v for v in vals if v])


def quack_autotune_entries(cache_dir: str | None = None) -> int:
    """Shapes whose autotuning QuACK has on disk: its autotuner writes each shape's timings to
    QUACK_CACHE_DIR/<hash of version, shape, configs>/<function>.autotune.json and, where the file
    exists, takes its choice from there instead of autotuning again (quack/autotuner.py,
    check_disk_cache). Counted before and after a pass, it says which tuned figures were autotuned
    in the pass and which came from an earlier one's cache (device_lib.sh restores it)."""
    root = cache_dir if cache_dir is not None else os.environ.get("QUACK_CACHE_DIR", "")
    return len(list(Path(root).rglob("*.autotune.json"))) if root and Path(root).is_dir() else 0


def table_row(key, cr, tuned=None) -> dict:
    """One row of the table. QuACK's headline figure is the better of its plain path (timed beside
    the evolved kernel in the main pass) and its autotuned path (timed beside the evolved kernel in
    the tuned pass, `tuned`: evolved_us, quack_us, quack_tuned_us of that pass); every speedup is a
    ratio of two times measured in the same process, interleaved."""
    dt, n = cr.params["dtype"], int(cr.params["N"])
    b = dict(cr.baselines_us)
    row = {"M": cr.params["M"], "N": n, "dtype": dt, "status": cr.status.value, "genome_key": key,
           "evolved_us": cr.time_us, "evolved_spread_us": cr.spread_us, "evolved_tbps": cr.tbps,
           "quack_plain_us": b.get("quack"), "quack_tuned_us": b.get("quack_tuned"),
           "torch_us": b.get("torch"), "torch_compile_us": b.get("torch_compile"), "liger_us": b.get("liger"),
           **({"copy_us": b["copy"]} if b.get("copy") else {}),
           "max_abs_err": cr.max_abs_err, "rel_l2_err": cr.rel_l2_err, "notes": cr.message}
    for name in BASELINES:
        base = b.get(name)
        row[f"speedup_vs_{name}"] = (base / cr.time_us) if base and cr.time_us else None
    return with_tuned_pass(row, tuned)


def with_tuned_pass(row: dict, tuned: dict | None) -> dict:
    """The row's QuACK figures with a tuned pass (or without one): speedup_vs_quack_tuned from the
    tuned pass's own evolved and tuned times, speedup_vs_quack = the faster QuACK path (the lower
    ratio), quack_us = that path's time on the main pass's scale."""
    if tuned is not None:
        row["tuned_pass"] = tuned
        if tuned.get("quack_tuned_us") and tuned.get("evolved_us"):
            row["quack_tuned_us"] = tuned["quack_tuned_us"]
            row["speedup_vs_quack_tuned"] = tuned["quack_tuned_us"] / tuned["evolved_us"]
    plain = row["quack_plain_us"] / row["evolved_us"] if row.get("quack_plain_us") and row.get("evolved_us") else None
    paths = [v for v in (plain, row.get("speedup_vs_quack_tuned")) if v]
    row["speedup_vs_quack"] = min(paths) if paths else None
    row["quack_us"] = row["speedup_vs_quack"] * row["evolved_us"] if row["speedup_vs_quack"] and row.get("evolved_us") else None
    return row


def main() -> int:
    from evo.dispatch import DispatchEntry
    from fitness.family import dispatch_key_of
    from fitness.gpu_evaluator import GPUEvaluator
    from genomes.rmsnorm import SPACE

    ap = argparse.ArgumentParser()
    ap.add_argument("--dispatch", required=True)
    ap.add_argument("--matrix", default="quack:bf16")
    ap.add_argument("--out", required=True, help="path prefix: writes PREFIX.json and PREFIX.md")
    ap.add_argument("--baselines", default=",".join(b for b in BASELINES if b != "quack_tuned"),
                    help="comma list for the main pass; quack_tuned autotunes exhaustively at its first call "
                         "per shape (23-29 s per shape on the H200): prefer --tuned-cases")
    ap.add_argument("--cases", default="",
                    help="comma list of case ids of the matrix to time (e.g. bf16/32768x4096); default: all")
    ap.add_argument("--tuned-cases", default="",
                    help="a second pass on these case ids (or dtypes, e.g. bf16): the evolved kernel timed "
                         "beside QuACK plain and autotuned; its ratio enters speedup_vs_quack_tuned")
    args = ap.parse_args()
    table = json.loads(Path(args.dispatch).read_text())
    keys = dispatch_key_of("rmsnorm")
    entries = [DispatchEntry.from_dict(dict(e, cases={}), keys) for e in table["entries"]]
    genomes = {e.key: SPACE.make(e.genome) for e in entries}
    t0 = time.time()
    baselines = [b for b in args.baselines.split(",") if b]
    wanted = {c for c in args.cases.split(",") if c}
    with GPUEvaluator("rmsnorm", SPACE, matrix=args.matrix, baseline="torch", baselines=baselines,
                      timeout_s=300) as ev:
        ids = {c.id for c in ev.settings.bench_cases}
        if wanted - ids:
            raise SystemExit(f"--cases: {sorted(wanted - ids)} are not cases of --matrix {args.matrix}")
        tuned_ids = set()
        for t in (t for t in args.tuned_cases.split(",") if t):
            match = {i for i in ids if i == t or i.split("/")[0] == t}
            if not match:
                raise SystemExit(f"--tuned-cases: {t!r} is neither a case id nor a dtype of --matrix {args.matrix}")
            tuned_ids |= match
        if wanted:
            tuned_ids &= wanted
        main_rows = case_rows(entries, time_dispatch(ev, entries, genomes, wanted))
        device = ev.describe().get("device")
    tuned_rows: dict[str, dict] = {}
    autotune = {"dir": os.environ.get("QUACK_CACHE_DIR") or None, "entries_at_start": quack_autotune_entries()}

    def publish(final: bool) -> None:
        cases = [table_row(v["key"], v["cr"], tuned_rows.get(cid)) for cid, v in main_rows.items()]
        cases.sort(key=lambda r: (r["dtype"], r["N"]))
        summary = {"gpu": device, "versions": versions(), "command": " ".join(["python", *sys.argv]),
                   "dispatch": args.dispatch, "matrix": args.matrix, "cases_asked": args.cases or "all",
                   "tuned_cases_asked": sorted(tuned_ids), "tuned_cases": sorted(tuned_rows),
                   "complete": final, "seconds": time.time() - t0,
                   "quack_autotune_cache": {**autotune, "entries_now": quack_autotune_entries()}, "cases": cases}
        write_outputs(summarize(summary), args.out, quiet=not final)

    publish(final=not tuned_ids)          # the main pass is on disk before QuACK's autotuning starts
    if tuned_ids:
        t1 = time.time()

        def took(key, e):
            for cid, v in case_rows(entries, {key: e}).items():
                cr = v["cr"]
                tuned_rows[cid] = {"evolved_us": cr.time_us, "quack_us": cr.baselines_us.get("quack"),
                                   "quack_tuned_us": cr.baselines_us.get("quack_tuned"), "notes": cr.message}
            publish(final=False)

        with GPUEvaluator("rmsnorm", SPACE, matrix=args.matrix, baseline="torch", baselines=["quack", "quack_tuned"],
                          timeout_s=600) as ev:
            time_dispatch(ev, entries, genomes, tuned_ids, on_result=took)
        print(f"tuned pass: {len(tuned_rows)} cases in {time.time() - t1:.0f} s", flush=True)
        publish(final=True)
    return 0


#: the columns a summary aggregates: each baseline, QuACK's two paths separately, and "quack" = the
#: faster QuACK path measured for the case
SUMMARY_OF = ("torch", "torch_compile", "quack", "quack_plain", "quack_tuned", "liger")


def _summary_names(summary: dict) -> tuple[str, ...]:
    """SUMMARY_OF, and "copy" where the copy roofline was timed (tables made before it existed keep
    their exact form)."""
    has_copy = any(r.get("copy_us") for r in summary["cases"])
    return SUMMARY_OF + (("copy",) if has_copy else ())


def summarize(summary: dict) -> dict:
    """Adds the geomean and minimum speedup against each baseline (over the cases that have one)."""
    for r in summary["cases"]:
        plain = r.get("quack_plain_us")
        r["speedup_vs_quack_plain"] = plain / r["evolved_us"] if plain and r.get("evolved_us") else None
    for name in _summary_names(summary):
        sp = [r[f"speedup_vs_{name}"] for r in summary["cases"] if r.get(f"speedup_vs_{name}")]
        summary[f"geomean_speedup_vs_{name}"] = geomean(sp)
        summary[f"min_speedup_vs_{name}"] = min(sp) if sp else None
        summary[f"cases_vs_{name}"] = len(sp)
    return summary


def merge_tuned(summary: dict, others: list[dict]) -> dict:
    """Rows of `summary` without a tuned pass take one from `others` (bench JSONs of the same
    dispatch table whose --tuned-cases covered them): the ratio stays a same-process one (the
    other run's evolved time beside its QuACK tuned time); the row's headline QuACK figure becomes
    the faster path."""
    by_case = {(r["dtype"], r["M"], r["N"]): r for r in summary["cases"]}
    merged = []
    for other in others:
        for o in other["cases"]:
            r = by_case.get((o["dtype"], o["M"], o["N"]))
            tp = o.get("tuned_pass")
            if r is None or not tp or r.get("tuned_pass"):
                continue
            if o["genome_key"] != r["genome_key"]:
                raise SystemExit(f"--merge-tuned: {o['dtype']}/{o['M']}x{o['N']} was timed with genome "
                                 f"{o['genome_key']}, the table has {r['genome_key']}: not the same dispatch table")
            r["tuned_pass_command"] = other.get("command")
            with_tuned_pass(r, tp)
            merged.append(f"{o['dtype']}/{o['M']}x{o['N']}")
        summary.setdefault("tuned_commands", []).append(other.get("command"))
        if other.get("quack_autotune_cache"):
            summary.setdefault("tuned_autotune_caches", []).append(other["quack_autotune_cache"])
    summary["tuned_cases"] = sorted(set(summary.get("tuned_cases", [])) | set(merged))
    return summarize(summary)


def markdown(summary: dict) -> str:
    def f(v, fmt="{:.1f}"):
        return fmt.format(v) if v else "-"

    has_copy = "copy" in _summary_names(summary)
    lines = [f"# RMSNorm forward on {summary['gpu']}", "", f"Command: `{summary['command']}`", ""]
    for cmd in summary.get("tuned_commands", []):
        lines += [f"QuACK autotuned pass: `{cmd}`", ""]
    caches = [("this pass", summary["quack_autotune_cache"])] if summary.get("quack_autotune_cache") else []
    caches += [("the merged tuned pass", c) for c in summary.get("tuned_autotune_caches", [])]
    for name, cache in caches:
        lines += [f"QuACK's autotune cache ({name}): {cache['entries_at_start']} shapes on disk at the start, "
                  f"{cache['entries_now']} at the end; a shape found there is not autotuned again (QuACK times the "
                  "choice its autotuner made in an earlier process on this GPU).", ""]
    lines += [f"Versions: {json.dumps(summary['versions'])}", "",
              "QuACK us = the faster of QuACK's plain path and its autotuned path (where the tuned path "
              f"was timed: {len(summary.get('tuned_cases', []))} cases), on the evolved kernel's scale; every "
              "ratio compares two times measured in one process, interleaved.", "",
              "| dtype | M x N | evolved us | TB/s | torch us | torch.compile us | QuACK plain us | QuACK tuned us "
              "| QuACK us | Liger us | vs torch | vs QuACK |" + (" copy us | of copy |" if has_copy else ""),
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if has_copy else "")]
    for r in summary["cases"]:
        tuned = (r.get("tuned_pass") or {}).get("quack_tuned_us")
        copy = f" {f(r.get('copy_us'))} | {f(r.get('speedup_vs_copy'), '{:.3f}')} |" if has_copy else ""
        lines.append(f"| {r['dtype']} | {r['M']} x {r['N']} | {f(r['evolved_us'])} | {f(r['evolved_tbps'], '{:.2f}')} | "
                     f"{f(r['torch_us'])} | {f(r['torch_compile_us'])} | {f(r['quack_plain_us'])} | {f(tuned)} | "
                     f"{f(r['quack_us'])} | {f(r['liger_us'])} | "
                     f"{f(r['speedup_vs_torch'], '{:.3f}')} | {f(r['speedup_vs_quack'], '{:.3f}')} |" + copy)
    if has_copy:
        lines += ["", "copy us: x copied into y in the same process (the case's memory roofline, launch included; "
                      "not an RMSNorm, never verified); of copy = copy us / evolved us, the share of it reached."]
    lines += ["", "| baseline | geomean speedup | min speedup | cases |", "|---|---:|---:|---:|"]
    for name in _summary_names(summary):
        lines.append(f"| {name} | {f(summary.get(f'geomean_speedup_vs_{name}'), '{:.3f}')} | "
                     f"{f(summary.get(f'min_speedup_vs_{name}'), '{:.3f}')} | {summary.get(f'cases_vs_{name}', '-')} |")
    return "\n".join(lines) + "\n"


def write_outputs(summary: dict, out: str, quiet: bool = False) -> None:
    Path(out + ".json").write_text(json.dumps(summary, indent=1, default=str))
    text = markdown(summary)
    Path(out + ".md").write_text(text)
    if not quiet:
        print(text)


def merge_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description="merge QuACK autotuned passes into a table (no GPU)")
    ap.add_argument("--table", required=True, help="bench JSON of the main pass")
    ap.add_argument("--tuned", nargs="+", required=True, help="bench JSONs run with --tuned-cases")
    ap.add_argument("--out", required=True, help="path prefix: writes PREFIX.json and PREFIX.md")
    args = ap.parse_args(argv)
    summary = json.loads(Path(args.table).read_text())
    others = [json.loads(Path(p).read_text()) for p in args.tuned]
    write_outputs(merge_tuned(summary, others), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(merge_main(sys.argv[2:]) if sys.argv[1:2] == ["merge"] else main())
