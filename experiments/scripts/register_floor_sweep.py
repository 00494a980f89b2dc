"""What the backward space's v7 register floor lets through that v6's estimate rejected, compiled
(no GPU): a seeded sample of genomes valid in v7 and invalid in v6, each compiled for bf16 with the
judge's compiler, and per genome the most registers and spill bytes of its main entries (the ones
the judge's static check reads: a spill fails the candidate at compile time).

    python experiments/scripts/register_floor_sweep.py --n 32 --seed 0 --out /tmp/floor_sweep.json

Why: v7 (genomes/rmsnorm_bwd.py) rejects only what certainly cannot fit, so the sweep says what that
costs: the share of newly admitted genomes that compile without spills (search reach gained) and the
share that spill (a few CPU seconds each, caught by the judge, learnt by the lessons).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fitness.compile import Compiler  # noqa: E402
from fitness.family import load_family  # noqa: E402
from genomes.rmsnorm_bwd import SPACES  # noqa: E402

MAIN_PREFIX = "rmsnorm_bwd_"


def newly_admitted(n: int, seed: int) -> list:
    """n distinct genomes valid in v7 and not in v6, drawn uniformly over gene values."""
    v6, v7 = SPACES["v6"], SPACES["v7"]
    rng = random.Random(seed)
    out: dict[str, object] = {}
    for _ in range(2_000_000):
        values = {gene.name: gene.sample(rng) for gene in v7.genes}
        if v7.is_valid(values) and not v6.is_valid(values):
            g = v7.make(values)
            out.setdefault(g.key, g)
            if len(out) == n:
                break
    return list(out.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", default=str(ROOT / ".cache" / "evo-compile"))
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    family = type(load_family("rmsnorm_bwd"))(dtypes=("bf16",))
    genomes = newly_admitted(args.n, args.seed)
    compiler = Compiler(Path(args.cache_dir))
    results = compiler.compile_many([(family.render(g), family.compile_flags(g)) for g in genomes])
    rows = []
    for g, r in zip(genomes, results):
        mains = {k: v for k, v in (r.kernels or {}).items() if k.startswith(MAIN_PREFIX) and "reduce" not in k}
        rows.append({"key": g.key, "genome": dict(g), "compiled": bool(r.ok),
                     "registers": max((v.registers for v in mains.values()), default=None),
                     "spill_bytes": max((v.spill_bytes for v in mains.values()), default=None)})
    ok = [row for row in rows if row["compiled"]]
    clean = [row for row in ok if row["spill_bytes"] == 0]
    by = collections.Counter((row["genome"]["dw_acc"], row["genome"]["staging"], row["spill_bytes"] == 0) for row in ok)
    summary = {"sampled": len(rows), "compiled": len(ok), "spill_free": len(clean), "spilled": len(ok) - len(clean),
               "by_dw_acc_staging_clean": {f"{a}/{b}/{'clean' if c else 'spilled'}": n for (a, b, c), n in sorted(by.items())}}
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"command": " ".join(sys.argv), "summary": summary, "genomes": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
