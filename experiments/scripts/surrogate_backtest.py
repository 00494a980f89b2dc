"""Would the GA's screening model (operators/surrogate.py) have picked the better offspring of the
recorded H200 searches? No GPU: for every generation g >= 1 of a recorded run, the model is fitted
on what was known before g (earlier runs, `--prior`, plus the run's generations < g) and ranks
generation g's offspring; the table compares the measured fitness of the half it ranks first with
the whole generation and with the true best half.

    python3 experiments/scripts/surrogate_backtest.py \\
        --run results/archive/session4/rmsnorm_fwd_h200_run.json.gz results/archive/session3/rmsnorm_fwd_h200_run.json.gz \\
        --prior results/archive/session2/rmsnorm_fwd_h200_run.json.gz --out results/surrogate_backtest.md

Each `--run` is backtested on its own; its history is the `--prior` runs plus the `--run`s listed
after it (list newest first). Only a generation's verified offspring are ranked (a failed genome
has no fitness); the model is fitted as the GA fits it (operators.surrogate.RidgeSurrogate).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fitness.records import read_json  # noqa: E402 - after the repo is on the path


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="mergesort")
    r = np.empty(len(v))
    r[order] = np.arange(len(v))
    for val in np.unique(v):                     # average ranks of ties
        idx = np.where(v == val)[0]
        r[idx] = r[idx].mean()
    return r


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = _ranks(np.asarray(a, float)), _ranks(np.asarray(b, float))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def load(path: Path, space, metric: str) -> list[tuple[int, object, float | None]]:
    """(generation, genome, fitness) of every evaluation of a dumped run valid in `space`."""
    from fitness.records import Evaluation

    data = read_json(path)
    gen = {x["key"]: x["generation"] for x in data["lineage"]}
    out = []
    for raw in data["evaluations"]:
        e = Evaluation.from_dict(raw)
        if e.space == space.name and space.is_valid(e.genome):
            out.append((gen.get(e.key, 0), space.make(e.genome), e.fitness(metric)))
    return out


def backtest(run, prior, space, ridge: float, metric: str = "geomean_speedup") -> list[dict]:
    from operators.surrogate import RidgeSurrogate

    rows = []
    for g in sorted({gen for gen, _, _ in run if gen >= 1}):
        before = [(x, f) for _, x, f in prior] + [(x, f) for gen, x, f in run if gen < g]
        test = [(x, f) for gen, x, f in run if gen == g and RidgeSurrogate.usable(f)]
        model = RidgeSurrogate(space, ridge)
        if len(test) < 4 or not model.fit([x for x, _ in before], [f for _, f in before]):
            continue
        pred = model.predict([x for x, _ in test])
        actual = np.log([f for _, f in test])
        half = max(1, len(test) // 2)
        top = np.argsort(-pred, kind="mergesort")[:half]
        rows.append({"generation": g, "trained_on": model.samples, "offspring": len(test),
                     "spearman": spearman(pred, actual),
                     "model_half": math.exp(actual[top].mean()), "all": math.exp(actual.mean()),
                     "best_half": math.exp(np.sort(actual)[-half:].mean())})
    return rows


def main(argv: list[str] | None = None) -> int:
    from genomes import load_space

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", nargs="+", required=True, help="dumped runs to backtest, newest first")
    ap.add_argument("--prior", nargs="*", default=[], help="older dumped runs: history only")
    ap.add_argument("--family", default="rmsnorm")
    ap.add_argument("--space-version", default="v2")
    ap.add_argument("--ridge", type=float, default=1.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    space = load_space(args.family, args.space_version)
    loaded = [load(Path(p), space, "geomean_speedup") for p in args.run]
    priors = [x for p in args.prior for x in load(Path(p), space, "geomean_speedup")]
    lines = ["# Screening model backtest on the recorded searches", "",
             f"Command: `python3 experiments/scripts/surrogate_backtest.py --run {' '.join(args.run)}"
             + (f" --prior {' '.join(args.prior)}" if args.prior else "") + f" --ridge {args.ridge} --out {args.out}`", "",
             "For each generation: the ridge model (operators/surrogate.py) fitted on everything measured before it "
             "(the older runs and the run's earlier generations) ranks that generation's verified offspring. "
             "Columns: geometric mean of the measured fitness (geomean speedup vs torch) of the half the model "
             "ranks first, of the whole generation, and of the truly best half; Spearman rank correlation "
             "of prediction and measurement.", "",
             "| run | generation | trained on | offspring | Spearman | model's half | all | best half |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    wins = total = 0
    for i, (path, run) in enumerate(zip(args.run, loaded)):
        older = priors + [x for later in loaded[i + 1:] for x in later]
        for r in backtest(run, older, space, args.ridge):
            total += 1
            wins += r["model_half"] > r["all"]
            lines.append(f"| {Path(path).parent.name}/{Path(path).name} | {r['generation']} | {r['trained_on']} | "
                         f"{r['offspring']} | {r['spearman']:.2f} | {r['model_half']:.3f} | {r['all']:.3f} | "
                         f"{r['best_half']:.3f} |")
    lines += ["", f"The model's half beats the whole generation in {wins} of {total} generations."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
