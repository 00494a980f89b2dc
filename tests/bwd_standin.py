"""A labelled STAND-IN of a backward search record, for exporting a training package before any
backward run was recorded on the GPU (issue 17: `evo export FWD_RUN --with BWD_RUN`).

What is real: the genomes are the backward family's own (DEFAULT, which reduces dw through
partial rows, and one of its EXTREMES that reduces with atomics; or those of a seeds file, `--genomes`,
so that a package can be built around genomes that no recorded run holds yet, as the programmatic
dependent launch genomes of space v11 in session 26), rendered by the family, compiled
by the judge's Compiler (nvcc, sm_90a) and passed through the judge's static checks (ptxas report,
SASS promises, shared memory), so their `source_hash` artifacts are what `evo export` checks the
rendered sources against; the cases are the experiment's matrix (experiments/rmsnorm_bwd_h200.toml),
those a genome cannot launch recorded as the judge records them (INVALID, fitness.cascade.UNSUPPORTED),
and the objectives come from fitness.objectives.compute.

What is not: no GPU ran. Every "verdict" is OK by fiat and every time is made up (bytes moved at a
stand-in bandwidth; the genomes in order win ascending bands of N, so each serves a range), and
the device is named `STANDIN_DEVICE` so that nothing downstream can mistake it for a measurement.
The dump is an `evo dump` file (what evo.analysis.load_run reads).

    python -m tests.bwd_standin OUT.json [--cache-dir DIR] [--genomes SEEDS.json [--keys K1,K2]]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "experiments" / "rmsnorm_bwd_h200.toml"
STANDIN_DEVICE = "STAND-IN: no GPU ran (tests/bwd_standin.py)"
STANDIN_TBPS = 3.0          # made-up bandwidth of the stand-in times
BASELINE_TBPS = 2.5         # made-up bandwidth of the stand-in baseline


def standin_genomes(family: Any, seeds: str | Path | None = None, keys: tuple[str, ...] = ()) -> list[Any]:
    """DEFAULT (partial rows + the column-sum kernel) and the first EXTREMES genome (atomics); or
    the genomes of seeds files (comma-separated paths of {"genomes": [{"genome": {...}}, ...]}), those
    whose key starts with one of `keys` when keys are given, in the order of `keys`."""
    from evo.lessons import read_seeds_file
    from genomes import load_space

    space = load_space(family.space_name)
    if seeds is None:
        mod = sys.modules[type(family).__module__]
        return [family.default_genome(), space.make(dict(mod.EXTREMES[0]))]
    listed = [space.make(g) for path in str(seeds).split(",") for g in read_seeds_file(path)]
    if not keys:
        return listed
    chosen = []
    for k in keys:
        hits = [g for g in listed if g.key.startswith(k)]
        if not hits:
            raise ValueError(f"--keys: no genome of {seeds} has a key starting with {k!r}")
        chosen.append(hits[0])
    return chosen


def _times(rank: int, band: int, nbytes: int) -> float:
    """Stand-in microseconds: the genome whose rank is the case's band of N is the fastest."""
    t = nbytes / (STANDIN_TBPS * 1e12) * 1e6
    return t * (1.0 if rank == band else 1.25)


def _bands(ns: list[int], k: int) -> dict[int, int]:
    """The distinct N cut into k ascending bands of about equal count: {N: band}."""
    distinct = sorted(set(ns))
    return {n: min(k - 1, i * k // len(distinct)) for i, n in enumerate(distinct)}


def standin_dump(cache_dir: str | Path, seeds: str | Path | None = None, keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """The stand-in record as an `evo dump` mapping (run_id labelled STANDIN)."""
    from evo.config import load_config
    from fitness import objectives
    from fitness.cascade import UNSUPPORTED, compile_artifacts
    from fitness.compile import Compiler
    from fitness.family import load_family
    from fitness.records import CaseResult, Evaluation, Status
    from fitness.static_checks import classify, static_problems

    cfg = load_config(CONFIG)
    family = load_family(cfg.experiment.family)
    cases = family.benchmark_cases(cfg.benchmark.matrix)
    compiler = Compiler(cache_dir, arch=cfg.target.arch, keep_ptx=True)
    genomes = standin_genomes(family, seeds, keys)
    ns = [int(c.params["N"]) for c in cases]
    band = _bands(ns, len(genomes)) if seeds else {n: int(n > 4096) for n in ns}   # default: DEFAULT up to 4K
    results = compiler.compile_many([(family.render(g), list(family.compile_flags(g))) for g in genomes])
    baseline = cfg.objective.baseline
    evaluations = []
    now = time.time()
    for rank, (g, res) in enumerate(zip(genomes, results)):
        problems = static_problems(res, family, g)
        if not res.ok or classify(res, problems) is not Status.OK:
            raise RuntimeError(f"stand-in genome {g.key} fails the judge's static stage: {problems or res.log[-400:]}")
        crs, unsupported = [], 0
        for c in cases:
            if family.launch(g, c) is None:
                unsupported += 1
                crs.append(CaseResult(case=c.id, status=Status.INVALID, params=dict(c.params), message=UNSUPPORTED))
                continue
            nbytes = family.bytes_moved(c)
            t = _times(rank, band[int(c.params["N"])], nbytes)
            crs.append(CaseResult(case=c.id, params=dict(c.params), time_us=t, samples=0,
                                  tbps=nbytes / (t * 1e-6) / 1e12,
                                  baselines_us={baseline: nbytes / (BASELINE_TBPS * 1e12) * 1e6},
                                  message="STAND-IN time (no GPU ran)"))
        obj = objectives.compute(crs, baseline, bytes_moved={c.id: family.bytes_moved(c) for c in cases},
                                 unsupported=unsupported,
                                 unsupported_speedup=cfg.evaluator.unsupported_speedup or None)
        evaluations.append(Evaluation(
            key=g.key, genome=dict(g), space=family.space_name, status=Status.OK, objectives=obj, cases=tuple(crs),
            artifacts=compile_artifacts(res), device=STANDIN_DEVICE, toolkit=f"nvcc {res.toolkit}",
            started_at=now, finished_at=now, message="STAND-IN verdict: compiled and statically checked, never run"))
    config = json.loads(json.dumps(cfg.to_dict()))
    config["experiment"]["description"] = "STAND-IN record (tests/bwd_standin.py): " + config["experiment"]["description"]
    return {"run_id": f"STANDIN-{cfg.experiment.name}", "family": family.name, "seed": cfg.experiment.seed,
            "config": config, "evaluations": [e.to_dict() for e in evaluations],
            "lineage": [{"key": e.key, "seq": i, "generation": 0, "stage": "ga", "operator": "standin", "parents": []}
                        for i, e in enumerate(evaluations)]}


def write_standin(out: str | Path, cache_dir: str | Path, seeds: str | Path | None = None,
                  keys: tuple[str, ...] = ()) -> Path:
    out = Path(out)
    out.write_text(json.dumps(standin_dump(cache_dir, seeds, keys), indent=1) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bwd_standin", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the dump to write (JSON)")
    ap.add_argument("--cache-dir", default=".cache/evo-compile", help="the compile cache")
    ap.add_argument("--genomes", default=None, help="seeds files (comma-separated) whose genomes the stand-in holds (default: "
                    "the family's DEFAULT and first EXTREMES genome)")
    ap.add_argument("--keys", default="", help="with --genomes: comma-separated key prefixes to take, in order")
    args = ap.parse_args(argv)
    keys = tuple(k for k in args.keys.split(",") if k)
    if keys and not args.genomes:
        ap.error("--keys needs --genomes")
    try:
        out = write_standin(args.out, args.cache_dir, args.genomes, keys)
    except (OSError, ValueError, KeyError) as e:
        ap.error(str(e))
    print(f"wrote {out} (a STAND-IN record: no GPU ran)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
