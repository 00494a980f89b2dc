"""Where the GPU judge spends its time: one RMSNorm genome through DeviceRunner in-process.

Runs CHECK once, then BENCH per benchmark case (wall time per case, first and second time), then
one whole BENCH job under cProfile, and prints the hottest functions.

    python experiments/scripts/profile_judge.py --matrix quack:bf16 --reps 50 [--check-per-case]

With --slice CONFIG (a grid config, e.g. experiments/rmsnorm_fwd_slice_h200.toml) the jobs are the
ones that run's judge sends: its matrix, the credited check cases, its reps, warm-up and
baseline_reps, and the grid point --point (default 768: the first genome the slice had left after
session 15) instead of the default genome.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def slice_setup(config: str, point: int, fam, timing):
    """(genome, credited check cases, TimingConfig, matrix) of a grid config's judge (evo.evaluators'
    build_evaluator makes the same)."""
    from dataclasses import replace

    from evo.config import load_config
    from evo.strategies.grid import grid_points, subspace
    from fitness.family import credited_check_cases
    from genomes import load_space

    cfg = load_config(config)
    space = load_space(cfg.experiment.family, cfg.experiment.space_version)
    points = list(grid_points(space, subspace(space, cfg.search.grid.fixed, cfg.search.grid.vary)))
    ev = cfg.evaluator
    bench = fam.benchmark_cases(cfg.benchmark.matrix)
    checks = credited_check_cases(fam.dispatch_key(), bench, fam.check_cases())
    timing = replace(timing, reps=ev.reps, warmup=ev.warmup, flush_l2=ev.flush_l2, rotate_inputs=ev.rotate_inputs,
                     max_case_seconds=ev.max_case_seconds, baseline_reps=ev.baseline_reps or None)
    return points[point], checks, timing, cfg.benchmark.matrix


def main() -> int:
    from fitness.compile import Compiler
    from fitness.device import DeviceRunner
    from fitness.family import KERNELS_DIR, load_family
    from fitness.jobs import BENCH, CHECK, Job, TimingConfig
    from genomes.rmsnorm import DEFAULT

    ap = argparse.ArgumentParser()
    ap.add_argument("--matrix", default="quack:bf16")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--baselines", default="torch")
    ap.add_argument("--check-per-case", action="store_true",
                    help="also time every CHECK case alone and profile one whole CHECK job")
    ap.add_argument("--slice", default="", help="a grid config: its matrix, credited check cases, timing, a point")
    ap.add_argument("--point", type=int, default=768, help="--slice: the grid point (index in its fixed order)")
    args = ap.parse_args()
    fam = load_family("rmsnorm")
    genome, check_cases = DEFAULT, fam.check_cases()
    timing = TimingConfig(reps=args.reps, baselines=tuple(b for b in args.baselines.split(",") if b))
    if args.slice:
        genome, check_cases, timing, args.matrix = slice_setup(args.slice, args.point, fam, timing)
        print(f"slice {args.slice}: point {args.point} {genome.key}, {len(check_cases)} credited check cases, "
              f"matrix {args.matrix}, reps {timing.reps}, warmup {timing.warmup}, baseline_reps {timing.baseline_reps}")
    res = Compiler(tempfile.mkdtemp()).compile(fam.render(genome), fam.compile_flags(genome))
    assert res.ok, res.log
    cubin = Path(res.cubin_path).read_bytes()

    def job(stage, cases, i=0):
        return Job(job_id=f"p{i}", key=genome.key, stage=stage, family="rmsnorm", family_root=str(KERNELS_DIR),
                   cubin=cubin, cases=tuple(cases), launches={c.id: fam.launch(genome, c) for c in cases},
                   seed=i, timing=timing)

    import fitness.device as devmod
    split: dict[str, float] = {}

    def timed(owner, name, label):
        fn = getattr(owner, name, None)
        if fn is None:                 # the judge was reorganised: time what still exists
            print(f"(no {getattr(owner, '__name__', owner)}.{name} to time)")
            return

        def wrapper(*a, **k):
            t1 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                split[label] = split.get(label, 0.0) + time.perf_counter() - t1
        setattr(owner, name, wrapper)

    # where a case's wall time goes (each of these ends in a host sync)
    timed(DeviceRunner, "_verify", "verify")
    timed(DeviceRunner, "_timing_buffers", "inputs")
    timed(devmod.baseline_runs, "prepare", "baselines")
    timed(DeviceRunner, "_fill_inputs", "fill")
    timed(devmod, "judge_outputs", "judge")
    timed(devmod.verify, "fingerprints", "prints")

    t = time.time()
    runner = DeviceRunner(0)
    print(f"runner start {time.time() - t:.2f}s  {runner.describe()}")
    t = time.time()
    for rnd in (1, 2):
        t = time.time()
        split.clear()
        r = runner.run(job(CHECK, check_cases, rnd))
        print(f"CHECK {rnd}: {len(check_cases)} cases {time.time() - t:.2f}s {r.status.value} | "
              + " ".join(f"{k}={v:.3f}" for k, v in sorted(split.items())))
    if args.check_per_case:
        # which CHECK cases the CHECK's seconds go to (one job per case, after the warm rounds above)
        rows = []
        for i, c in enumerate(check_cases):
            t = time.time()
            split.clear()
            r = runner.run(job(CHECK, [c], 500 + i))
            rows.append((time.time() - t, c.id, r.status.value, dict(split)))
        for sec, cid, st, parts in sorted(rows, reverse=True):
            print(f"check case {cid:40s} {sec:6.3f}s {st} | " + " ".join(f"{k}={v:.3f}" for k, v in sorted(parts.items())))
        print(f"check cases one by one: {sum(r[0] for r in rows):.2f}s over {len(rows)}")
        prof = cProfile.Profile()
        prof.enable()
        runner.run(job(CHECK, check_cases, 777))
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumtime").print_stats(30)
        print(s.getvalue())
    cases = fam.benchmark_cases(args.matrix)
    for rnd in (1, 2):
        for i, c in enumerate(cases):
            t = time.time()
            split.clear()
            r = runner.run(job(BENCH, [c], 100 * rnd + i))
            cr = r.cases[0]
            parts = " ".join(f"{k}={v:.3f}" for k, v in sorted(split.items()))
            print(f"round {rnd} {c.id:22s} {time.time() - t:6.2f}s {cr.status.value} {cr.time_us or 0:9.1f}us "
                  f"{dict(cr.baselines_us)} | {parts}")
    prof = cProfile.Profile()
    t = time.time()
    prof.enable()
    r = runner.run(job(BENCH, cases, 999))
    prof.disable()
    print(f"whole BENCH {time.time() - t:.2f}s {r.status.value}")
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
    print(s.getvalue())
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumtime").print_stats(35)
    print(s.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
