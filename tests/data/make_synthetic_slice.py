"""A SYNTHETIC densely recorded slice: every genome of the synthetic space on three shape classes.

Stands in for the H200 slice (experiments/rmsnorm_fwd_slice_h200.toml) until it is recorded, so the
lessons, the grid, the Kernel Tuner export and the race can be built and tested without a GPU.
Nothing here was measured: the "times" come from the formula below, written to look like a row
kernel's (three classes that share what makes memory traffic fast: wide vectors, the .nc path,
streaming stores; and differ in geometry: short rows want few threads per row and several rows per
CTA, long rows many threads and clusters; a few interactions; deterministic ruggedness from a hash
of the genome key; failures where real kernels fail). Figures computed on it are labelled
synthetic wherever they are written.

    python tests/data/make_synthetic_slice.py [--out FILE.json.gz]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
from pathlib import Path

from fitness.objectives import geomean
from fitness.records import CaseResult, Evaluation, Status
from genomes.synthetic import SPACE

#: (class, M, N, torch time in us): one benchmark case per class
CASES = (("short", 32768, 1024, 48.0), ("mid", 32768, 16384, 540.0), ("long", 8192, 262144, 2400.0))
VECTOR = {4: 0.80, 8: 0.92, 16: 1.0}
CACHE = {"ca": 0.965, "cg": 0.985, "nc": 1.0}
#: threads per row each class likes best (log2 distance from it costs)
BEST_TPR = {"short": 64, "mid": 256, "long": 512}
BEST_ROWS = {"short": 4, "mid": 1, "long": 1}
CLUSTER = {"short": {1: 1.0, 2: 0.93, 4: 0.86}, "mid": {1: 1.0, 2: 0.99, 4: 0.96},
           "long": {1: 0.86, 2: 0.95, 4: 1.0}}
BEST_STAGES = {"short": 1, "mid": 2, "long": 3}


def _unit(key: str, salt: str) -> float:
    h = hashlib.sha256((salt + key).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def _speedup(v: dict, cls: str, key: str) -> float:
    s = VECTOR[v["vector_bytes"]] * CACHE[v["load_cache"]] * CLUSTER[cls][v["cluster"]]
    s *= 1.03 if v["streaming_store"] else 1.0
    s *= 1.0 - 0.06 * abs(math.log2(v["threads_per_row"] / BEST_TPR[cls]))
    s *= 1.0 - 0.05 * abs(math.log2(v["rows_per_cta"] / BEST_ROWS[cls]))
    s *= 1.0 - 0.025 * abs(v["stages"] - BEST_STAGES[cls]) - 0.012 * abs(v["unroll"] - 3)
    if v["load_cache"] == "nc" and v["vector_bytes"] == 16:
        s *= 1.02
    if cls == "long" and v["stages"] == 3 and v["cluster"] == 4:
        s *= 1.03
    s *= 1.0 + 0.03 * (_unit(key, "noise/" + cls) - 0.5)
    return 1.15 * s


def verdict(g, names: dict[str, str] | None = None) -> Evaluation:
    """`names`: a class's name in the cases' params, when not its own (a family's path-like names)."""
    v = dict(g)
    base = dict(key=g.key, genome=v, space=SPACE.name, device="synthetic", toolkit="none")
    if v["vector_bytes"] == 16 and v["stages"] == 3 and v["unroll"] == 4:
        return Evaluation(status=Status.INVALID, message="INVALID: ptxas: 96 bytes spill stores; limit 0", **base)
    if v["load_cache"] == "ca" and v["cluster"] == 4:
        return Evaluation(status=Status.WRONG_RESULT, message="WRONG_RESULT: rel L2 error 0.31 (race)", **base)
    if _unit(g.key, "compile") < 0.02:
        return Evaluation(status=Status.COMPILE_ERROR, message="COMPILE_ERROR: ptxas fatal (synthetic)", **base)
    cases = []
    for cls, m, n, torch_us in CASES:
        sp = _speedup(v, cls, g.key)
        t = torch_us / sp
        cases.append(CaseResult(case=f"{cls}/{m}x{n}", status=Status.OK,
                                params={"M": m, "N": n, "dtype": "bf16",
                                        "shape_class": (names or {}).get(cls, cls)},
                                time_us=round(t, 4), spread_us=round(0.01 * t, 4), samples=20,
                                baselines_us={"torch": torch_us}))
    speedups = [c.speedup("torch") for c in cases]
    return Evaluation(status=Status.OK, objectives={"geomean_speedup": round(geomean(speedups), 6),
                                                    "min_speedup": round(min(speedups), 6)},
                      cases=tuple(cases), **base)


def evaluations(names: dict[str, str] | None = None) -> list[Evaluation]:
    return [verdict(g, names) for g in SPACE.enumerate()]


def dump(out: Path, names: dict[str, str] | None = None) -> None:
    """The slice as an `evo dump`-shaped file (replays and reports like a recorded run); `names`:
    the classes renamed (e.g. {"short": "x/short"}), the same verdicts."""
    evs = evaluations(names)
    payload = {"run_id": "synthetic-slice", "family": "synthetic", "seed": 0,
               "config": {"experiment": {"name": "synthetic-slice", "family": "synthetic", "space_version": "",
                                         "description": "SYNTHETIC slice (tests/data/make_synthetic_slice.py): "
                                                        "no GPU measured any of it"},
                          "target": {"gpu": "synthetic", "arch": "sm_90a"},
                          "objective": {"metric": "geomean_speedup", "baseline": "torch"},
                          "search": {"strategy": "grid"}},
               "state": "finished", "elapsed_s": 0.0, "notes": {"synthetic": True},
               "evaluations": [e.to_dict() for e in evs]}
    with gzip.open(out, "wt", encoding="utf-8") as fh:
        json.dump(payload, fh, separators=(",", ":"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).with_name("synthetic_slice.json.gz")))
    dump(Path(ap.parse_args().out))


if __name__ == "__main__":
    main()
