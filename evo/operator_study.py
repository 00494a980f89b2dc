"""`evo operators-study`: guided proposals against plain mutation on recorded verdicts.

    evo operators-study RECORDING [RECORDING ...] --out results/operators [--seeds 20] [--children 60]

What it measures: how often a child is better than its parent (improvement rate) and how many
new bests a search finds per 100 children, when the child is chosen by the guided rules
(operators/guided.py, reading the parent's recorded evidence: ptxas resources, per-case TB/s
against the measured copy ceiling, failures) or at random (plain mutation), median over seeds.

What it is not, on GA recordings: a replay can only answer genomes that were recorded, and a GA
run holds a few hundred genomes of a space of millions. So both operators are restricted the same
way: from a parent, each may only propose a recorded genome not yet judged in this seed that
differs from the parent in 1..`max_distance` genes (a mutation's reach). Plain mutation takes one
of them uniformly at random; guided takes one that moves the genes of a rule fired by the
parent's evidence in the rule's direction (rules tried in a drawn order), and falls back to a
uniform pick (counted) when no recorded neighbour does. Both start from the same random recorded
population per seed and pick parents by the same tournament, so the only difference is which
neighbour is chosen. On a whole dense slice (`evo slice`: every valid genome of a sub-space
recorded) the restriction is only the sub-space's: every neighbour either operator can ask for
inside it has a real verdict. The .md says which of the two the data is, and gives the paired
seeds' sign test rather than a verdict written in advance.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

from fitness.records import Evaluation, read_json
from genomes import GeneSpace, load_space
from operators.guided import RULES_DIR, GuidedOperator, Rule, improved

OPERATORS = ("guided", "mutation")


def load_recordings(paths: Sequence[str | Path]) -> tuple[list[Evaluation], dict[str, Any]]:
    """Evaluations of one family and space version from recordings (dumps); a genome recorded in
    several keeps its latest verdict (later files win)."""
    by_key: dict[str, Evaluation] = {}
    meta: dict[str, Any] = {"sources": [], "family": "", "space_version": "", "metric": "", "baseline": ""}
    for p in paths:
        data = read_json(p)
        cfg = data.get("config") or {}
        fam = data.get("family") or cfg.get("experiment", {}).get("family", "")
        ver = cfg.get("experiment", {}).get("space_version", "") or ""
        if meta["family"] and (fam, ver) != (meta["family"], meta["space_version"]):
            raise ValueError(f"{p}: family/space version {fam}/{ver or 'latest'} differs from the first "
                             f"recording's {meta['family']}/{meta['space_version'] or 'latest'}")
        meta.update(family=fam, space_version=ver, metric=cfg.get("objective", {}).get("metric", "geomean_speedup"),
                    baseline=cfg.get("objective", {}).get("baseline", "torch"))
        evs = [Evaluation.from_dict(e) for e in data["evaluations"]]
        meta["sources"].append({"path": str(p), "run_id": data.get("run_id", ""), "evaluations": len(evs),
                                "device": Counter(e.device for e in evs).most_common(1)[0][0] if evs else ""})
        for e in evs:
            by_key[e.key] = e
    return list(by_key.values()), meta


def dense_slice(paths: Sequence[str | Path]) -> dict[str, Any] | None:
    """What makes the data a dense slice (one recording, a grid over a sub-space, every valid genome
    of it recorded), or None: the .md's caveats differ between the two."""
    if len(paths) != 1:
        return None
    from evo.slice import load_slice

    try:
        sl = load_slice(str(paths[0]))
    except (OSError, ValueError, KeyError):
        return None
    if sl.valid_genomes is None or not sl.whole:
        return None
    return {"valid_genomes": sl.valid_genomes, "recorded": sl.recorded, "varied_genes": sl.varied}


def sign_test(higher: int, lower: int) -> float:
    """Two-sided exact sign test of paired seeds (ties dropped): the chance of a split at least this
    uneven if neither operator were better."""
    n, k = higher + lower, min(higher, lower)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def _moves(rule: Rule, space: GeneSpace, parent: Mapping[str, Any], child: Mapping[str, Any]) -> bool:
    """Whether `child` moves every gene of the rule the rule's way (a gene it cannot move is skipped)."""
    moved = False
    for gene, action in rule.change.items():
        legal = list(space.gene(gene).values())
        a, b = parent.get(gene), child.get(gene)
        if isinstance(action, Mapping):
            if a == action["set"]:
                continue
            if b != action["set"]:
                return False
        else:
            if a not in legal or b not in legal:
                return False
            i, j = legal.index(a), legal.index(b)
            if (action == "up" and i == len(legal) - 1) or (action == "down" and i == 0):
                continue
            if not ((action == "up" and j > i) or (action == "down" and j < i)):
                return False
        moved = True
    return moved


class _Index:
    """Distances, fired rules and rule directions over the pool, computed once."""

    def __init__(self, pool: Mapping[str, Evaluation], space: GeneSpace, guided: GuidedOperator):
        self.space, self.keys = space, sorted(pool)
        self.genomes = {k: space.complete(dict(pool[k].genome)) for k in self.keys}
        names = list(space.names)
        rows = {k: tuple(self.genomes[k][n] for n in names) for k in self.keys}
        self.dist = {a: {b: sum(x != y for x, y in zip(rows[a], rows[b])) for b in self.keys} for a in self.keys}
        self.fired = {k: guided.fired(pool[k]) for k in self.keys}
        self._moves: dict[tuple[str, str, str], bool] = {}

    def near(self, parent: str, judged: Mapping[str, Any], max_distance: int) -> list[str]:
        d = self.dist[parent]
        return [k for k in self.keys if k not in judged and 1 <= d[k] <= max_distance]

    def follows(self, rule: Rule, parent: str, child: str) -> bool:
        key = (rule.name, parent, child)
        if key not in self._moves:
            self._moves[key] = _moves(rule, self.space, self.genomes[parent], self.genomes[child])
        return self._moves[key]


def run_seed(seed: int, pool: Mapping[str, Evaluation], index: _Index, operator: str, *, metric: str,
             children: int, population: int, max_distance: int, tournament: int) -> dict[str, Any]:
    rng = random.Random(seed)
    start = rng.sample(index.keys, min(population, len(index.keys)))
    rng = random.Random(f"{seed}/{operator}")        # the operators' own draws; same start for both
    judged = {k: pool[k].fitness(metric) for k in start}
    best = max((f for f in judged.values() if f is not None), default=-math.inf)
    out: dict[str, Any] = {"seed": seed, "operator": operator, "children": 0, "improved": 0, "new_bests": 0,
                           "misses": 0, "directed": 0, "directed_improved": 0, "fallback": 0, "rules": Counter()}
    attempts = 0
    while out["children"] < children and attempts < 20 * children:
        attempts += 1
        entrants = rng.sample(sorted(judged), min(tournament, len(judged)))
        parent = max(entrants, key=lambda k: (judged[k] is not None, judged[k] or 0.0, k))
        near = index.near(parent, judged, max_distance)
        if not near:
            out["misses"] += 1              # the same for both operators: no recorded neighbour left
            continue
        rule = None
        if operator == "guided":
            fired = list(index.fired[parent])
            rng.shuffle(fired)
            for r in fired:
                directed = [k for k in near if index.follows(r, parent, k)]
                if directed:
                    rule, near = r, directed
                    break
        child = rng.choice(near)
        f = pool[child].fitness(metric)
        better = improved(f, judged[parent])
        judged[child] = f
        out["children"] += 1
        out["improved"] += better
        if rule is not None:
            out["directed"] += 1
            out["directed_improved"] += better
            out["rules"][rule.name] += 1
        elif operator == "guided":
            out["fallback"] += 1            # no fired rule has a recorded neighbour: a uniform pick
        if f is not None and f > best:
            out["new_bests"] += 1
            best = f
    n = max(1, out["children"])
    out.update(improvement_rate=out["improved"] / n, new_bests_per_100=100.0 * out["new_bests"] / n,
               directed_improvement_rate=(out["directed_improved"] / out["directed"]) if out["directed"] else None,
               best=best if math.isfinite(best) else None, rules=dict(out["rules"]))
    return out


def _latest_rules(family: str) -> str:
    """The rules file GuidedOperator.for_family takes for a family (the latest version), relative to
    the repository, as the study's page names it."""
    found = sorted(RULES_DIR.glob(f"{family}_v*.toml"), key=lambda p: int(p.stem.rsplit("_v", 1)[1]))
    return str(found[-1].relative_to(RULES_DIR.parent.parent)) if found else ""


def study(paths: Sequence[str | Path], *, seeds: int = 20, children: int = 60, population: int = 8,
          max_distance: int = 3, tournament: int = 3, rules: str = "") -> dict[str, Any]:
    evaluations, meta = load_recordings(paths)
    space = load_space(meta["family"], meta["space_version"])
    pool = {}
    for e in evaluations:
        try:
            space.make(space.complete(dict(e.genome)))
        except Exception:  # noqa: BLE001 - a genome outside this space version cannot be proposed
            continue
        pool[e.key] = e
    guided = GuidedOperator.for_family(space, meta["family"], rules, metric=meta["metric"], baseline=meta["baseline"])
    rules_file = rules or _latest_rules(meta["family"])
    index = _Index(pool, space, guided)
    per_seed = [run_seed(s, pool, index, op, metric=meta["metric"], children=children, population=population,
                         max_distance=max_distance, tournament=tournament)
                for s in range(seeds) for op in OPERATORS]

    def med(op: str, field: str) -> float:
        return statistics.median(r[field] for r in per_seed if r["operator"] == op)

    fired = Counter()
    for r in per_seed:
        fired.update(r["rules"])
    pairs = [(g["improvement_rate"], m["improvement_rate"]) for g, m in zip(per_seed[0::2], per_seed[1::2])]
    paired = {"guided_higher": sum(g > m for g, m in pairs), "mutation_higher": sum(m > g for g, m in pairs),
              "equal": sum(g == m for g, m in pairs)}
    paired["sign_test_p"] = sign_test(paired["guided_higher"], paired["mutation_higher"])
    dense = dense_slice(paths)
    return {
        "what": ("guided rules vs plain mutation, both restricted to recorded genomes within max_distance genes of "
                 "the parent (recorded real verdicts; " + ("a whole dense slice)" if dense else "GA recordings, not a "
                                                            "dense slice)")),
        **{k: meta[k] for k in ("family", "space_version", "metric", "baseline", "sources")},
        "recorded_genomes": len(pool), "seeds": list(range(seeds)), "children_per_seed": children,
        "population": population, "max_distance": max_distance, "tournament": tournament,
        "guided_improvement_rate": med("guided", "improvement_rate"),
        "mutation_improvement_rate": med("mutation", "improvement_rate"),
        "guided_new_bests_per_100": med("guided", "new_bests_per_100"),
        "mutation_new_bests_per_100": med("mutation", "new_bests_per_100"),
        "guided_children_median": med("guided", "children"), "mutation_children_median": med("mutation", "children"),
        "guided_directed_median": med("guided", "directed"), "guided_fallback_median": med("guided", "fallback"),
        "guided_directed_improvement_rate": statistics.median(
            [r["directed_improvement_rate"] for r in per_seed
             if r["operator"] == "guided" and r["directed_improvement_rate"] is not None] or [math.nan]),
        "rules_fired": dict(fired.most_common()), "rules_file": str(rules_file),
        "paired_improvement_rate": paired,
        "per_seed": per_seed,
        "dense_slice": dense,
    }


def sensitivity(paths: Sequence[str | Path], distances: Sequence[int] = (2, 3, 4), **kw: Any) -> list[dict[str, Any]]:
    """The headline medians again for other reaches (max_distance)."""
    out = []
    for d in distances:
        r = study(paths, max_distance=d, **kw)
        out.append({k: r[k] for k in ("max_distance", "guided_improvement_rate", "mutation_improvement_rate",
                                      "guided_new_bests_per_100", "mutation_new_bests_per_100",
                                      "guided_directed_median", "guided_directed_improvement_rate")})
    return out


def write(result: Mapping[str, Any], out: str | Path) -> tuple[Path, Path]:
    """OUT.json, OUT.md and OUT.png (per-seed rates of both operators)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    js, md, png = out.with_suffix(".json"), out.with_suffix(".md"), out.with_suffix(".png")
    js.write_text(json.dumps(result, indent=1, default=str) + "\n")
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, field, title in ((axes[0], "improvement_rate", "children better than their parent"),
                             (axes[1], "new_bests_per_100", "new bests per 100 children")):
        data = [[r[field] for r in result["per_seed"] if r["operator"] == op] for op in OPERATORS]
        ax.boxplot(data)
        ax.set_xticks([1, 2], list(OPERATORS))
        for i, vals in enumerate(data, start=1):
            ax.scatter([i + 0.08 * ((j % 5) - 2) for j in range(len(vals))], vals, s=10, alpha=0.6)
        ax.set_title(title, fontsize=10)
    fig.suptitle(f"{len(result['seeds'])} seeds, {result['children_per_seed']} children each, "
                 f"{result['recorded_genomes']} recorded genomes", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    r = result
    pr, dense = r["paired_improvement_rate"], r.get("dense_slice")
    directed_share = r["guided_directed_median"] / max(1, r["guided_children_median"])
    p_value = pr.get("sign_test_p", 1.0)
    if p_value < 0.05:
        verdict = ("On this data guided is better than plain mutation" if pr["guided_higher"] > pr["mutation_higher"]
                   else "On this data plain mutation is better than guided") + " at the 5 % level."
    else:
        verdict = "On this data the two are not told apart at the 5 % level."
    if directed_share < 0.5:
        verdict += (" Most of guided's children are fallbacks (below): the recordings rarely hold the genome a rule "
                    "asks for.")
    srcs = "; ".join(f"`{s['path']}` ({s['evaluations']} evaluations, run {s['run_id']}, {s['device']})"
                     for s in r["sources"])
    lines = [
        "# Guided proposals vs plain mutation (recorded H200 verdicts)", "",
        f"Made by `evo operators-study {' '.join(s['path'] for s in r['sources'])} --out {out}` "
        f"(evo/operator_study.py).", "",
        "| | guided | plain mutation |", "|---|---:|---:|",
        f"| children better than their parent (median over {len(r['seeds'])} seeds) | "
        f"{r['guided_improvement_rate']:.3f} | {r['mutation_improvement_rate']:.3f} |",
        f"| new bests per 100 children (median) | {r['guided_new_bests_per_100']:.2f} | "
        f"{r['mutation_new_bests_per_100']:.2f} |",
        f"| children per seed (median) | {r['guided_children_median']:g} | {r['mutation_children_median']:g} |", "",
        "![per seed](" + png.name + ")", "",
        f"Seed by seed (same start, same parent draws), guided's improvement rate was higher in "
        f"{pr['guided_higher']}, lower in {pr['mutation_higher']} and equal in {pr['equal']} of {len(r['seeds'])} "
        f"seeds (two-sided sign test over the untied seeds: p = {pr.get('sign_test_p', 1.0):.3g}). {verdict}", "",
        "## What this is, exactly", "",
        f"- Data: real H200 verdicts, {srcs}; {r['recorded_genomes']} distinct genomes of "
        f"space {r['family']} {r['space_version'] or '(latest)'} (a genome recorded twice keeps its later verdict). "
        f"Fitness: `{r['metric']}` against {r['baseline']}." + (
            f" A whole dense slice: every one of the {dense['valid_genomes']} valid genomes of a sub-space varying "
            f"{', '.join(dense['varied_genes'])} is recorded." if dense else " Not a whole dense slice (GA runs, a pool of several recordings, or a partial grid): only the "
            "genomes recorded there can be asked for."),
        f"- The replay answers only recorded genomes, so both operators are restricted alike: from a parent each may "
        f"propose only a recorded genome, not yet judged in the seed, that differs from the parent in 1 to "
        f"{r['max_distance']} genes. Plain mutation picks one uniformly; guided picks one that moves the genes of a "
        f"rule fired by the parent's recorded evidence ({r.get('rules_file') or 'the family rules'}: ptxas spills and registers, "
        "per-case TB/s over the measured copy ceiling, failures) in the rule's direction; when no recorded "
        "neighbour follows any fired rule it falls back to a uniform pick, as mutation does (counted below).",
        f"- Each seed starts both operators from the same {r['population']} random recorded genomes and picks "
        f"parents by a tournament of {r['tournament']}; {r['children_per_seed']} children per operator per seed. "
        "An improved child is verified and faster than its parent (or its parent failed); a new best is faster "
        "than everything judged before it in the seed.",
        ("- What it cannot say: the slice is one sub-space (the genes above, the others fixed), so a rule whose "
         "direction leaves it (a gene the slice fixes) cannot show its worth here; rates are for this sub-space's "
         "neighbourhoods." if dense else
         "- What it cannot say: the recorded genomes are not every genome the operators can ask for (a GA's path "
         "is biased towards good regions, a few hundred of a space of millions), so rates here are about choosing "
         "among those neighbours, not about the whole space; a rule whose direction leads to unrecorded genomes "
         "cannot show its worth. A whole densely recorded slice (`evo slice`) removes this restriction: rerun the "
         "command on one."), "",
        "Rules that chose a child (all seeds): " + ", ".join(f"{k} {v}" for k, v in r["rules_fired"].items()) + ".",
        "",
        f"Guided children that followed a fired rule: median {r['guided_directed_median']:g} of "
        f"{r['guided_children_median']:g} per seed (the others: no fired rule had a recorded neighbour, so guided "
        f"fell back to a uniform pick, as mutation does); their improvement rate: median "
        f"{r['guided_directed_improvement_rate']:.3f}.",
    ]
    if r.get("by_max_distance"):
        lines += ["", "Other reaches (same seeds):", "",
                  "| max_distance | guided improvement | mutation improvement | guided new bests /100 | "
                  "mutation new bests /100 | guided children following a rule (median) | their improvement |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for x in r["by_max_distance"]:
            dr = x["guided_directed_improvement_rate"]
            lines.append(f"| {x['max_distance']} | {x['guided_improvement_rate']:.3f} | "
                         f"{x['mutation_improvement_rate']:.3f} | {x['guided_new_bests_per_100']:.2f} | "
                         f"{x['mutation_new_bests_per_100']:.2f} | {x['guided_directed_median']:g} | "
                         + (f"{dr:.3f}" if dr == dr else "-") + " |")
    md.write_text("\n".join(lines) + "\n")
    return js, md


def main(paths: Sequence[str], out: str, seeds: int = 20, children: int = 60, max_distance: int = 3,
         rules: str = "") -> int:
    import sys

    try:
        result = study(paths, seeds=seeds, children=children, max_distance=max_distance, rules=rules)
        result["by_max_distance"] = sensitivity(paths, seeds=seeds, children=children, rules=rules)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    js, md = write(result, out)
    print(f"guided improvement rate {result['guided_improvement_rate']:.3f} vs mutation "
          f"{result['mutation_improvement_rate']:.3f}; new bests per 100: {result['guided_new_bests_per_100']:.2f} vs "
          f"{result['mutation_new_bests_per_100']:.2f} ({len(result['seeds'])} seeds): {js}, {md}")
    return 0


__all__ = ["OPERATORS", "load_recordings", "main", "run_seed", "sensitivity", "study", "write"]
