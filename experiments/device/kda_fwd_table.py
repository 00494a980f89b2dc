"""KDA forward on the H200: the template's genomes judged on FlashKDA's six scenarios beside
FlashKDA and fla, and the issue's table (results/kda_fwd_h200.json + .md) from one command.

    python experiments/device/kda_fwd_table.py --out results/kda_fwd_h200
    python experiments/device/kda_fwd_table.py --genomes default,longest-first --budget-s 420 --out $OUT/kda_fwd_h200

Lab tooling around the product's judge. First every genome through the judge's CHECK stage on
the family's CHECK cases (a genome that fails it is recorded and goes no further). Then per
scenario, in order, so that a call which runs out of its budget keeps every scenario it finished
(both files are rewritten after each one):

1. Judged: every genome through the judge's GPU side in this process (fitness.device.DeviceRunner,
   a BENCH job of that one case): fresh inputs of both distributions verified against float64
   (poisoned, guarded outputs; inputs unchanged; new data in the same buffers), then timed
   interleaved with FlashKDA and fla on the same inputs (every launch poisoned and fingerprinted,
   the L2 flushed, rotating order, median and IQR of --reps launches), the peers' outputs
   checked against the reference in the same job. speedup_vs_flashkda is FlashKDA's median in
   that job over the genome's.
2. Audited: inputs of both distributions made once more (kda_lab.References, one reference per
   distribution for everything), every genome's kernel and both peers run on them: o's and the
   final state's relative RMS error and the group test's worst row / state, per distribution
   (the judge's record keeps o's error only, and a peer's only when it fails).
3. The row: the fastest genome that the judge passed and the audit found within every
   tolerance, its time, speedup_vs_flashkda, speedup_vs_fla, o_rel_rms and state_rel_rms (the
   worst over the distributions); each peer's time, errors and `within_tolerance`.

A peer outside the tolerances (FlashKDA in session 11: o 5.2e-3 on its own inputs, 7.2e-3 on the
long-memory ones) is timed and reported all the same, with its errors and within_tolerance
false; the speedup against it is still computed (it is the issue's target) and the table marks
it. Only a genome within every tolerance can be a row's best: a peer's miss never excuses one.

Costs on a fresh H200 (session 11): fla's first call at each H compiles and autotunes its Triton
kernels (111 s at H96), FlashKDA's build 113 s (a carried build: seconds, kda_peers_build.sh),
the template's compile ~3 s, a scenario's judging and audit ~10-20 s per genome.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fitness.device import DeviceRunner, as_launches, resolve_args  # noqa: E402
from fitness.family import load_family  # noqa: E402
from fitness.guarded import GuardedBuffer, guards_problem  # noqa: E402
from fitness.jobs import BENCH, CHECK, Job, TimingConfig  # noqa: E402
from fitness.records import Status  # noqa: E402
from genomes.kda import NAMED, SPACE  # noqa: E402

import kda_lab  # noqa: E402

PEERS = ("flashkda", "fla")
FAMILY_ROOT = ROOT / "kernels"
POLICY = ("A peer outside the tolerances is timed and reported with its errors and within_tolerance false; "
          "speedup_vs_flashkda is still computed against it (the issue's target) and marked; only a genome "
          "within every tolerance can be a scenario's best.")
TARGET = 1.3


# -- compiling -----------------------------------------------------------------------------------
def compile_genome(family: Any, genome: Any, cache_dir: Path) -> dict[str, Any]:
    """nvcc through the judge's compiler and its static checks: {ok, cubin, registers, problems, log}."""
    from fitness.compile import Compiler  # noqa: PLC0415
    from fitness.static_checks import static_problems  # noqa: PLC0415

    res = Compiler(cache_dir).compile(family.render(genome), family.compile_flags(genome))
    info: dict[str, Any] = {"ok": bool(res.ok), "registers": {k: r.registers for k, r in res.kernels.items()},
                            "compile_s": round(res.seconds, 2), "problems": [], "log": "" if res.ok else res.log[-2000:]}
    if res.ok:
        info["problems"] = static_problems(res, family, genome)
        info["ok"] = not info["problems"]
        info["cubin"] = res.cubin()
    return info


# -- one scenario ------------------------------------------------------------------------------------
def judge(runner: Any, family: Any, label: str, genome: Any, cubin: bytes, case: Any,
          timing: TimingConfig) -> dict[str, Any]:
    """One BENCH job of one case through the judge's GPU side: status, time, the peers' times."""
    job = Job(job_id=f"{genome.key}-{case.id}", key=genome.key, stage=BENCH, family=family.name,
              family_root=str(FAMILY_ROOT), cubin=cubin, cases=(case,),
              launches={case.id: family.launch(genome, case)}, seed=secrets.randbits(48),
              timing_seed=secrets.randbits(63), timing=timing)
    result = runner.run(job)
    cr = result.cases[0] if result.cases else None
    out: dict[str, Any] = {"status": (cr.status if cr else result.status).value,
                           "message": (cr.message if cr else result.message)[:2000]}
    if cr is not None and cr.status is Status.OK and cr.time_us:
        out.update(time_ms=cr.time_us * 1e-3, iqr_ms=cr.spread_us * 1e-3 if cr.spread_us is not None else None,
                   samples=cr.samples, tbps=cr.tbps, judge_o_rel_rms=cr.rel_l2_err,
                   peers_ms={n: t * 1e-3 for n, t in (cr.baselines_us or {}).items()})
        for n, t in out["peers_ms"].items():
            out[f"speedup_vs_{n}"] = t / out["time_ms"] if out["time_ms"] > 0 else None
    return out


def check_stage(runner: Any, family: Any, genome: Any, cubin: bytes) -> dict[str, Any]:
    """The judge's CHECK stage of a genome on the family's CHECK cases (odd lengths, empty and
    one-token sequences, H = 1, 40 sequences, every option): status, message, seconds."""
    cases = tuple(family.check_cases())
    job = Job(job_id=f"{genome.key}-check", key=genome.key, stage=CHECK, family=family.name,
              family_root=str(FAMILY_ROOT), cubin=cubin, cases=cases,
              launches={c.id: family.launch(genome, c) for c in cases}, seed=secrets.randbits(48))
    result = runner.run(job)
    return {"status": result.status.value, "message": result.message[:2000], "cases": len(result.cases),
            "seconds": round(result.seconds, 1)}


def audit_kernel(backend: Any, family: Any, genome: Any, module: Any, case: Any, inputs: Mapping[str, Any],
                 refs: Mapping[str, Any]) -> dict[str, Any]:
    """The genome's launches once on the inputs, in order (a split genome: kda_prep, then kda_rec;
    fitness.device.as_launches), into poisoned guarded outputs and a poisoned guarded workspace
    (family.workspace, as the judge gives it): its error figures."""
    xp = backend.xp
    _, outs = family.io(case)
    bufs = {n: GuardedBuffer(xp, s) for n, s in outs.items()}
    scratch = {n: GuardedBuffer(xp, s) for n, s in (family.workspace(case) or {}).items()}
    for b in [*bufs.values(), *scratch.values()]:
        b.poison()
    arrays = {**inputs, **{n: b.data for n, b in bufs.items()}, **{n: b.data for n, b in scratch.items()}}
    for launch in as_launches(family.launch(genome, case)):
        kernel = backend.get_kernel(module, launch.kernel)
        backend.prepare_kernel(kernel, launch)
        backend.launch(kernel, launch, resolve_args(launch, arrays))
    backend.synchronize(60.0)
    got = kda_lab.check(xp, case, family, {n: b.data for n, b in bufs.items()}, refs)
    problem = guards_problem({**bufs, **scratch})
    if problem:
        got["ok"] = False
        got.setdefault("messages", []).append(problem)
    return got


def audit(backend: Any, family: Any, case: Any, refs: Any, kernels: Mapping[str, tuple[Any, Any]],
          peers: list[str]) -> dict[str, dict[str, Any]]:
    """{implementation: {distribution: error figures}} for every genome's kernel and every peer."""
    offered = {b.name: b for b in family.baselines()}
    out: dict[str, dict[str, Any]] = {name: {} for name in [*kernels, *peers]}
    for dist in family.distributions:
        inputs, ref = refs.get(case, dist)
        for label, (genome, kernel) in kernels.items():
            try:
                out[label][dist] = audit_kernel(backend, family, genome, kernel, case, inputs, ref)
            except Exception as exc:  # noqa: BLE001 - recorded; the judge's verdict stands beside it
                out[label][dist] = {"ok": False, "messages": [f"{type(exc).__name__}: {str(exc)[:500]}"]}
        for name in peers:
            b = offered.get(name)
            if b is None or not b.available():
                continue
            try:
                run = b.prepare(case, inputs)
                if run is None:
                    continue
                result = run()
                backend.synchronize(600.0)
                out[name][dist] = kda_lab.check(backend.xp, case, family, run.as_outputs(result), ref)
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                out[name][dist] = {"ok": False, "messages": [f"{type(exc).__name__}: {str(exc)[:500]}"]}
    refs.drop(case)
    return out


def errors_of(checks: Mapping[str, Any]) -> dict[str, Any]:
    """The worst figures over the distributions and whether every check was within tolerance."""
    return {"o_rel_rms": kda_lab.worst(checks, "o_rel_rms"), "state_rel_rms": kda_lab.worst(checks, "state_rel_rms"),
            "o_row_rms": kda_lab.worst(checks, "o_row_rms"), "state_group_rms": kda_lab.worst(checks, "state_group_rms"),
            "within_tolerance": bool(checks) and all(c.get("ok") for c in checks.values()), "by_distribution": dict(checks)}


def scenario_row(case: Any, judged: Mapping[str, dict[str, Any]], audited: Mapping[str, dict[str, Any]],
                 peers: list[str]) -> dict[str, Any]:
    """The scenario's row: every genome's record, the peers', and the best genome's figures."""
    p = case.params
    row: dict[str, Any] = {"case": case.id, "T": p["T"], "H": p["H"], "N": p["N"], "recurrences": p["recurrences"],
                           "lens": list(p["lens"]), "genomes": {}, "peers": {}}
    for label, j in judged.items():
        row["genomes"][label] = {**j, **errors_of(audited.get(label, {}))}
    passing = {lab: g for lab, g in row["genomes"].items()
               if g["status"] == Status.OK.value and g.get("time_ms") and g["within_tolerance"]}
    best = min(passing, key=lambda lab: passing[lab]["time_ms"]) if passing else None
    for name in peers:
        entry = errors_of(audited.get(name, {}))
        source = row["genomes"][best] if best else next((g for g in row["genomes"].values() if g.get("peers_ms")), {})
        entry["time_ms"] = (source.get("peers_ms") or {}).get(name)
        entry["status"] = Status.OK.value if entry["time_ms"] is not None else "not timed"
        row["peers"][name] = entry
    row["best"] = best
    if best:
        g = row["genomes"][best]
        row.update(time_ms=g["time_ms"], iqr_ms=g.get("iqr_ms"), o_rel_rms=g["o_rel_rms"], state_rel_rms=g["state_rel_rms"],
                   o_row_rms=g["o_row_rms"], state_group_rms=g["state_group_rms"])
        for name in peers:
            row[f"{name}_ms"] = row["peers"][name]["time_ms"]
            row[f"speedup_vs_{name}"] = g.get(f"speedup_vs_{name}")
        row["flashkda_within_tolerance"] = row["peers"].get("flashkda", {}).get("within_tolerance")
    else:
        row.update(time_ms=None, speedup_vs_flashkda=None, o_rel_rms=None, state_rel_rms=None,
                   note="no genome passed the judge and the audit")
    return row


def summary(rows: list[dict[str, Any]], wanted: int) -> dict[str, Any]:
    """Over the scenarios with a best genome: the worst and the geometric-mean speedup vs FlashKDA,
    and whether the issue's target (>= 1.3x on every one of the six) is met."""
    s = [r["speedup_vs_flashkda"] for r in rows if r.get("speedup_vs_flashkda")]
    return {"scenarios": len(rows), "with_a_passing_genome": len(s),
            "min_speedup_vs_flashkda": min(s) if s else None,
            "geomean_speedup_vs_flashkda": math.exp(sum(math.log(v) for v in s) / len(s)) if s else None,
            "target": TARGET, "target_met": len(s) == wanted and bool(s) and min(s) >= TARGET}


# -- the table -------------------------------------------------------------------------------------
fmt = kda_lab.fmt


def markdown(report: Mapping[str, Any]) -> str:
    lines = [f"# KDA forward on {report['device']}", "",
             f"{report['timing']}. Seed {report['seed']}. Versions: "
             + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v) + ".", "",
             "| scenario | H x N | best genome | ms (IQR) | FlashKDA ms | fla ms | speedup vs FlashKDA | vs fla | "
             "o rel RMS | state rel RMS | FlashKDA o / state rel RMS |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    marked = False
    for r in report["scenarios"]:
        if "genomes" not in r:
            lines.append(f"| {r['case']} | | {r.get('status', '-')} | | | | | | | | |")
            continue
        fk = r["peers"].get("flashkda", {})
        flag = "" if fk.get("within_tolerance", True) else " †"
        marked = marked or bool(flag)
        lines.append("| " + " | ".join([
            r["case"], str(r["recurrences"]), r["best"] or "none passed",
            f"{fmt(r.get('time_ms'))} ({fmt(r.get('iqr_ms'))})", fmt(r.get("flashkda_ms")), fmt(r.get("fla_ms")),
            fmt(r.get("speedup_vs_flashkda"), ".3f") + flag, fmt(r.get("speedup_vs_fla"), ".3f"),
            fmt(r.get("o_rel_rms"), ".2e"), fmt(r.get("state_rel_rms"), ".2e"),
            f"{fmt(fk.get('o_rel_rms'), '.2e')} / {fmt(fk.get('state_rel_rms'), '.2e')}"]) + " |")
    s = report.get("summary", {})
    lines += ["", f"Speedup vs FlashKDA: min {fmt(s.get('min_speedup_vs_flashkda'))}, geomean "
              f"{fmt(s.get('geomean_speedup_vs_flashkda'))} over {s.get('with_a_passing_genome', 0)} of "
              f"{s.get('scenarios', 0)} scenarios; target >= {TARGET}x on all six: "
              f"{'met' if s.get('target_met') else 'not met'}."]
    if marked:
        lines += ["", "† FlashKDA is outside the tolerances on this scenario (its errors beside); it was timed and the "
                  "speedup computed all the same."]
    lines += ["", "Errors are the worst over both input distributions (flashkda, long_memory), vs float64. "
              "Tolerances: o <= 0.005, final state <= 0.006 relative RMS; every (token, head) row of o within 0.1 "
              "and every (sequence, head) state within 0.05 of the whole reference's RMS. " + POLICY, "",
              "## Genomes", "", "| genome | key | registers | CHECK |", "|---|---|---|---|"]
    for label, g in report.get("genomes", {}).items():
        chk = g.get("check") or {}
        cell = f"{chk.get('status', 'not run')} {chk.get('message', '')[:160]}".replace("|", "\\|").rstrip()
        lines.append(f"| {label} | {g['key'][:8]} | {max((g.get('registers') or {0: '-'}).values())} | {cell} |")
    lines += ["", "## Every genome on every scenario", "", "| scenario | genome | status | ms | speedup vs FlashKDA | o rel RMS | "
              "state rel RMS | worst o row | worst state |", "|---|---|---|---|---|---|---|---|---|"]
    for r in report["scenarios"]:
        for label, g in r.get("genomes", {}).items():
            lines.append("| " + " | ".join([
                r["case"], label, g["status"] + ("" if g.get("within_tolerance") or g["status"] != Status.OK.value else " (audit: out)"),
                fmt(g.get("time_ms")), fmt(g.get("speedup_vs_flashkda")), fmt(g.get("o_rel_rms"), ".2e"),
                fmt(g.get("state_rel_rms"), ".2e"), fmt(g.get("o_row_rms"), ".3f"), fmt(g.get("state_group_rms"), ".3f")]) + " |")
    return "\n".join(lines) + "\n"


def _strip(info: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if k != "cubin"}


def main(argv: list[str] | None = None, *, backend: Any = None, family: Any = None,
         compile_fn: Callable[[Any, Any], dict[str, Any]] | None = None) -> int:
    """`backend`, `family` and `compile_fn(family, genome)` default to the H200's (CupyBackend),
    the kda family and nvcc through the judge's compiler (tests pass numpy doubles)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "results"), "kda_fwd_h200"),
                    help="output prefix: PREFIX.json and PREFIX.md")
    ap.add_argument("--genomes", default="default,longest-first,all-bf16,all-split", help=f"names among {sorted(NAMED)}")
    ap.add_argument("--genome", action="append", default=[], help="a genome as JSON (repeatable)")
    ap.add_argument("--matrix", default="flashkda")
    ap.add_argument("--cases", default="", help="comma-separated substrings of case ids to keep")
    ap.add_argument("--baselines", default=",".join(PEERS))
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=None, help="the audit's inputs (default: drawn now, recorded)")
    ap.add_argument("--budget-s", type=float, default=480.0,
                    help="no scenario is started after this many seconds (the rest are listed as not run)")
    ap.add_argument("--cache-dir", default=str(ROOT / ".cache" / "evo-compile"))
    ap.add_argument("--no-check", action="store_true", help="skip the judge's CHECK stage (the family's CHECK cases)")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()

    family = load_family("kda") if family is None else family
    if backend is None:
        from fitness.cuda_backend import CupyBackend  # noqa: PLC0415
        backend = CupyBackend()
    compile_fn = compile_fn or (lambda fam, g: compile_genome(fam, g, Path(args.cache_dir)))
    genomes: dict[str, Any] = {}
    for name in [g for g in args.genomes.split(",") if g]:
        if name not in NAMED:
            ap.error(f"unknown genome {name!r}; named genomes: {sorted(NAMED)}")
        genomes[name] = NAMED[name]
    for text in args.genome:
        g = SPACE.make(json.loads(text))
        genomes[g.key[:8]] = g
    peers = [n for n in args.baselines.split(",") if n]
    keep = [s for s in args.cases.split(",") if s]
    cases = [c for c in family.benchmark_cases(args.matrix) if not keep or any(s in c.id for s in keep)]
    seed = int(args.seed if args.seed is not None else np.random.SeedSequence().entropy % 2**31)
    timing = TimingConfig(reps=args.reps, warmup=args.warmup, baselines=tuple(peers), max_case_seconds=10.0)
    runner = DeviceRunner(backend=backend)
    # the runner judges with this very family object (it loads families by path otherwise, and a
    # stand-in family, a test's, would not be the one judged)
    runner._families[(family.name, str(FAMILY_ROOT))] = family
    report: dict[str, Any] = {
        "command": " ".join([sys.executable, *sys.argv]), "device": backend.describe(), "versions": kda_lab.versions(),
        "seed": seed, "matrix": args.matrix, "distributions": list(family.distributions),
        "copy_ceiling_tbps": runner.copy_ceiling_tbps, "policy": POLICY,
        "timing": (f"the judge's BENCH protocol in this process: median of {args.reps} launches after {args.warmup} "
                   f"warm-up rounds, {', '.join(peers)} interleaved in rotating order on the same inputs, L2 flushed "
                   "before each launch, every launch poisoned and fingerprinted"),
        "genomes": {}, "scenarios": [], "summary": {}}
    kernels: dict[str, tuple[Any, Any]] = {}
    cubins: dict[str, bytes] = {}
    modules = []
    for label, g in genomes.items():
        info = compile_fn(family, g)
        report["genomes"][label] = {"genome": dict(g), "key": g.key, **_strip(info)}
        if info.get("ok"):
            cubins[label] = info["cubin"]
            module = backend.load(info["cubin"])
            modules.append(module)
            kernels[label] = (g, module)
        print(f"{label} {g.key[:8]}: {'compiled' if info.get('ok') else 'not compiled'} {info.get('registers')} "
              f"{info.get('problems') or ''}", flush=True)
    for label in list(cubins) if not args.no_check else []:
        chk = check_stage(runner, family, genomes[label], cubins[label])
        report["genomes"][label]["check"] = chk
        print(f"{label}: CHECK {chk['status']} on {chk['cases']} cases in {chk['seconds']} s {chk['message'][:300]}",
              flush=True)
        if chk["status"] != Status.OK.value:
            del cubins[label], kernels[label]
    refs = kda_lab.References(backend, family, seed)
    for case in cases:
        elapsed = time.perf_counter() - t_start
        if elapsed > args.budget_s:
            report["scenarios"].append({"case": case.id, "status": f"not run: {elapsed:.0f} s > budget {args.budget_s:g} s"})
            continue
        t0 = time.perf_counter()
        judged = {label: judge(runner, family, label, genomes[label], cubins[label], case, timing) for label in cubins}
        audited = audit(backend, family, case, refs, kernels, peers)
        row = scenario_row(case, judged, audited, peers)
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        report["scenarios"].append(row)
        report["summary"] = summary([r for r in report["scenarios"] if "genomes" in r], len(cases))
        kda_lab.write(args.out, report, markdown)
        print(json.dumps({k: row.get(k) for k in ("case", "best", "time_ms", "flashkda_ms", "fla_ms", "speedup_vs_flashkda",
                                                  "o_rel_rms", "state_rel_rms", "flashkda_within_tolerance", "wall_s")},
                         default=float), flush=True)
        for label, g in row["genomes"].items():
            print(f"   {label:10s} {g['status']:12s} {fmt(g.get('time_ms'))} ms  x{fmt(g.get('speedup_vs_flashkda'))} "
                  f"o {fmt(g.get('o_rel_rms'), '.2e')} state {fmt(g.get('state_rel_rms'), '.2e')} "
                  f"{'' if g['within_tolerance'] else 'OUT ' + '; '.join(m for c in g['by_distribution'].values() for m in c.get('messages', []))[:300]}"
                  f"{g['message'][:200] if g['status'] != 'ok' else ''}", flush=True)
    report["summary"] = summary([r for r in report["scenarios"] if "genomes" in r], len(cases))
    report["wall_s"] = round(time.perf_counter() - t_start, 1)
    kda_lab.write(args.out, report, markdown)
    runner.close()
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
