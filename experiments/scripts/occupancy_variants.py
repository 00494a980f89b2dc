"""Seed variants that cost no resident warps: for each genome of a dispatch table, the register-
hungry genes (weight_batch, weight_pipeline) changed one at a time, each compiled here (nvcc,
no GPU) at the genome's own register budget and at the budgets that just keep the warps of the
cases the genome serves; a variant is kept only if ptxas reports no spills and, on every case the
table gives its parent, an SM holds at least as many of its warps as of the parent's
(fitness.occupancy, with the registers ptxas reported for the kernel that case launches).

Why (session 6, `evo report` "By resident warps"): weight_batch 2 -> 4 made 14 of 14 cases faster
where it left the warps unchanged (median 1.044x) and 76 of 80 slower where it evicted CTAs
(0.851x); the seed variants of session 6 were chosen without knowing which.

    python3 experiments/scripts/occupancy_variants.py --run results/rmsnorm_fwd_h200_run.json \
        --dispatch results/rmsnorm_dispatch.json --out experiments/seeds/rmsnorm_session7_variants.json

The output is a `search.seed_genomes` file (a JSON object with "genomes"), with the evidence for
each genome (parent, gene changed, registers, warps per case) beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fitness.records import read_json  # noqa: E402 - after the repo is on the path

#: what each parent is tried with: one gene changed to each value
CHANGES = {"weight_batch": (2, 4, 8), "weight_pipeline": (True,)}


def parse_changes(text: str) -> dict[str, tuple]:
    """'weight_batch=2,weight_batch=4,weight_pipeline=true' -> {gene: values}; genes outside CHANGES
    are refused (only the register-hungry genes are this script's question)."""
    out: dict[str, tuple] = {}
    for item in (t for t in text.split(",") if t):
        gene, sep, raw = item.partition("=")
        if not sep or gene not in CHANGES:
            raise SystemExit(f"--changes: {item!r} is not GENE=VALUE with GENE one of {sorted(CHANGES)}")
        value = raw.lower() == "true" if gene == "weight_pipeline" else int(raw)
        if value not in CHANGES[gene]:
            raise SystemExit(f"--changes: {gene} takes {CHANGES[gene]}, not {raw!r}")
        out[gene] = out.get(gene, ()) + (value,)
    return out


def served_cases(entry: dict, cases: list) -> list:
    """The benchmark cases a dispatch entry serves (its dtype, N in [n_min, n_max])."""
    hi = entry["n_max"] if entry["n_max"] is not None else float("inf")
    return [c for c in cases if c.params["dtype"] == entry["dtype"] and entry["n_min"] <= int(c.params["N"]) <= hi]


def budgets(genome: dict) -> list[dict]:
    """The genome's own register budget first, then each min_blocks of 1-4 (uncapped), then the
    maxrreg caps: the ways a variant may keep its warps."""
    own = {"min_blocks": genome["min_blocks"], "maxrreg": genome["maxrreg"]}
    out = [own] + [{"min_blocks": b, "maxrreg": 0} for b in (1, 2, 3, 4)]
    out += [{"min_blocks": 1, "maxrreg": r} for r in (48, 56, 64, 80, 96, 128)]
    return [b for i, b in enumerate(out) if b not in out[:i]]


def warps(family, genome, cases, resources) -> dict[str, int]:
    from fitness.occupancy import case_occupancy

    occ = {c.id: case_occupancy(family, genome, c, resources) for c in cases}
    return {cid: o.warps if o is not None else 0 for cid, o in occ.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="the run (evo dump JSON) the dispatch table was chosen from")
    ap.add_argument("--dispatch", required=True)
    ap.add_argument("--matrix", default="quack:bf16,fp16,fp32")
    ap.add_argument("--space", default="v4")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache-dir", default=".cache/evo-compile")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--changes", default="", help="only these one-gene changes, e.g. weight_batch=2,weight_pipeline=true "
                                                  "(default: weight_batch 2/4/8 and weight_pipeline on)")
    args = ap.parse_args(argv)
    changes = parse_changes(args.changes) if args.changes else CHANGES

    from fitness.compile import Compiler
    from fitness.family import load_family
    from genomes.rmsnorm import SPACES

    space = SPACES[args.space]
    family = load_family("rmsnorm")
    cases = family.benchmark_cases(args.matrix)
    run = read_json(args.run)
    by_key = {e["key"]: e for e in run["evaluations"]}
    table = read_json(args.dispatch)["entries"]
    compiler = Compiler(Path(args.cache_dir))

    parents: dict[str, list] = {}
    for entry in table:
        parents.setdefault(entry["key"], []).extend(served_cases(entry, cases))

    def compiled(genome):
        res = compiler.compile(family.render(genome), family.compile_flags(genome))
        if not res.ok:
            return None
        spills = any(r.spill_bytes or r.stack_frame_bytes for r in res.resources.values())
        return None if spills else {k: r.to_dict() for k, r in res.resources.items()}

    groups = []          # (parent key, parent, served cases, their warps, parent's resources, gene, value)
    for key, served in parents.items():
        parent = space.make(by_key[key]["genome"])
        raw = by_key[key]["artifacts"].get("resources")
        presources = json.loads(raw) if isinstance(raw, str) else raw
        base = warps(family, parent, served, presources)
        for gene, values in changes.items():
            for value in values:
                if parent[gene] == value or (gene == "weight_batch" and value < parent[gene]):
                    continue
                groups.append((key, parent, served, base, presources, gene, value))

    def first_keeping(group):
        """The first register budget at which the variant compiles without spills and keeps the
        warps; (variant, resources, budget, compiles tried) or (None, None, None, tried)."""
        key, parent, served, base, presources, gene, value = group
        tried = 0
        for budget in budgets(dict(parent)):
            changed = {**dict(parent), gene: value, **budget}
            if not space.is_valid(changed):
                continue
            variant = space.make(changed)
            tried += 1
            resources = compiled(variant)
            if resources is not None:
                got = warps(family, variant, served, resources)
                if all(got[c] >= base[c] for c in base):
                    return variant, resources, budget, tried, got
        return None, None, None, tried, None

    print(f"{len(groups)} (dispatch genome, gene, value) to try", file=sys.stderr)
    with ThreadPoolExecutor(args.jobs) as pool:
        outcomes = list(pool.map(first_keeping, groups))
    chosen = []
    for (key, parent, served, base, presources, gene, value), (variant, resources, budget, n, got) in zip(groups, outcomes):
        if variant is None:
            continue
        chosen.append({
            "genome": dict(variant), "key": variant.key, "parent": key, "gene": gene, "value": value,
            "budget": budget, "compiles": n, "registers": max(r["registers"] for r in resources.values()),
            "parent_registers": max(r["registers"] for r in presources.values()),
            "warps": {c: [base[c], got[c]] for c in base}})
    genomes = list({v["key"]: v for v in chosen}.values())
    out = {"command": "python3 experiments/scripts/" + Path(__file__).name + " " + " ".join(argv or sys.argv[1:]),
           "why": "one-gene variants (weight_batch, weight_pipeline) of the dispatch genomes that keep, on every "
                  "case the table gives the parent, at least the parent's resident warps per SM (ptxas registers, "
                  "compiled without spills)",
           "tried": len(groups), "compiles": sum(o[3] for o in outcomes), "genomes": genomes}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    print(f"{len(genomes)} variants keep their parents' warps -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
