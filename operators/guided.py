"""Guided proposals: rules over a parent's evidence that propose targeted gene changes.

The rules are data (operators/rules/<family>_v<N>.toml, or any file a config names), loaded into
frozen `Rule`s a notebook can list and test one by one:

    op = GuidedOperator.for_family(space, "rmsnorm")
    [r.name for r in op.fired(parent_evaluation)]     # which rules the evidence triggers
    proposal = op.propose(parent_evaluation, rng, taken=set_of_judged_keys)
    proposal.operator                                  # "guided:spills-lower-unroll"

`when` and `cases` are expressions in fitness.raw's whitelisted language (no Python from a rule
file runs); a rule that names an unknown feature or gene is refused when the file is loaded, so a
typo cannot silently never fire. A proposal applies all of its rule's changes to the parent and
repairs the result to the nearest valid genome when a constraint breaks (outcome "repaired"); a
child the run has judged already, or equal to its parent, is no proposal (the next fired rule is
tried, in an order drawn from the run's generator).
"""

from __future__ import annotations

import math
import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from fitness.raw import ExpressionError, evaluate
from fitness.records import Evaluation
from genomes import GeneSpace, Genome
from genomes.genes import Choice
from operators.candidate import Candidate
from operators.evidence import Evidence
from operators.proposal import Proposal, Proposer, Request

RULES_DIR = Path(__file__).resolve().parent / "rules"


class RuleError(ValueError):
    """A rules file that cannot be used; the message names the rule and the field."""


@dataclass(frozen=True)
class Rule:
    name: str
    why: str
    when: str
    change: Mapping[str, Any]          # gene -> "up" | "down" | {"set": value}
    cases: str = ""

    def fires(self, features: Mapping[str, Any], evidence: Evidence) -> bool:
        values = dict(features)
        if self.cases:
            values.update(evidence.case_features(self.cases))
        try:
            return bool(evaluate(self.when, values))
        except ExpressionError:
            return False

    def apply(self, space: GeneSpace, genome: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(genome)
        for gene_name, action in self.change.items():
            gene = space.gene(gene_name)
            if isinstance(action, Mapping):
                out[gene_name] = action["set"]
                continue
            legal = list(gene.values())
            cur = out[gene_name]
            if cur not in legal:
                continue
            i = legal.index(cur) + (1 if action == "up" else -1)
            if 0 <= i < len(legal):
                out[gene_name] = legal[i]
        return out


def load_rules(path: str | Path, space: GeneSpace) -> tuple[Rule, ...]:
    """Rules from a TOML file, checked against the gene space (RuleError names what is wrong)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RuleError(f"{path}: cannot read the rules ({exc})") from None
    rules = []
    names = set()
    known = set(_feature_names(space))
    for i, r in enumerate(data.get("rules", [])):
        where = f"{path.name}: rules[{i}]"
        unknown = set(r) - {"name", "why", "when", "change", "cases"}
        if unknown:
            raise RuleError(f"{where}: unknown keys {sorted(unknown)}")
        for need in ("name", "when", "change"):
            if need not in r:
                raise RuleError(f"{where}: missing {need!r}")
        name = str(r["name"])
        if name in names:
            raise RuleError(f"{where}: the name {name!r} is used twice")
        names.add(name)
        change = dict(r["change"])
        for g, action in change.items():
            if g not in space.names:
                raise RuleError(f"{where} ({name}): change names gene {g!r}, not in space {space.name!r}")
            if not (action in ("up", "down") or (isinstance(action, Mapping) and set(action) == {"set"})):
                raise RuleError(f"{where} ({name}): change.{g} must be 'up', 'down' or {{ set = value }}, got {action!r}")
            if isinstance(action, Mapping) and not space.gene(g).contains(action["set"]):
                raise RuleError(f"{where} ({name}): change.{g}.set = {action['set']!r} is not a legal value")
        # every name the condition uses must exist (a typo would otherwise never fire)
        probe = {k: 0 for k in known} | {"case_count": 0, "case_fraction": 0.0, "case_speedup": 0.0}
        try:
            evaluate(str(r["when"]), probe)
        except ExpressionError as exc:
            raise RuleError(f"{where} ({name}): when: {exc}") from None
        rules.append(Rule(name=name, why=str(r.get("why", "")), when=str(r["when"]), change=change,
                          cases=str(r.get("cases", ""))))
    if not rules:
        raise RuleError(f"{path}: no [[rules]]")
    return tuple(rules)


def _feature_names(space: GeneSpace) -> list[str]:
    blank = Evidence(key="", status="OK", message="", genome={}, fitness=None, suspect=False)
    names = list(blank.features())
    for g in space.genes:
        if isinstance(g, Choice) and any(isinstance(o, str) for o in g.options):
            names += [f"is_{g.name}_{o}" for o in g.options]
        else:
            names.append(g.name)
    return names


@dataclass
class GuidedOperator(Proposer):
    space: GeneSpace
    rules: tuple[Rule, ...]
    metric: str = "geomean_speedup"
    baseline: str = "torch"
    name: str = "guided"
    _zeros: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._zeros = {n: 0 for n in _feature_names(self.space) if n.startswith("is_")}

    @classmethod
    def for_family(cls, space: GeneSpace, family: str, path: str | Path = "", **kw: Any) -> "GuidedOperator":
        """The rules of `path`, or the latest operators/rules/<family>_v<N>.toml."""
        if not path:
            found = sorted(RULES_DIR.glob(f"{family}_v*.toml"), key=lambda p: int(p.stem.rsplit("_v", 1)[1]))
            if not found:
                raise RuleError(f"no guided rules for family {family!r} in {RULES_DIR} (write {family}_v1.toml)")
            path = found[-1]
        return cls(space, load_rules(path, space), **kw)

    def features(self, ev: Evaluation) -> tuple[dict[str, Any], Evidence]:
        evidence = Evidence.of(ev, self.metric, self.baseline)
        return self._zeros | evidence.features(), evidence

    def fired(self, ev: Evaluation) -> list[Rule]:
        feats, evidence = self.features(ev)
        return [r for r in self.rules if r.fires(feats, evidence)]

    def propose(self, parent: Evaluation, rng: random.Random, taken: Collection[str] = ()) -> Proposal:
        """One proposal from the rules the parent's evidence fires (tried in a drawn order until
        one gives a new genome); outcome "no_rule" when none does."""
        fired = self.fired(parent)
        if not fired:
            return Proposal(self.name, parent.key, "no_rule", "no rule fired on the parent's evidence")
        order = list(fired)
        rng.shuffle(order)
        base = self.space.complete(dict(parent.genome))
        tried = []
        for rule in order:
            wanted = rule.apply(self.space, base)
            changes = {k: v for k, v in wanted.items() if base.get(k) != v}
            if not changes:
                tried.append(f"{rule.name}: no legal step")
                continue
            problems = self.space.violations(wanted)
            child = self.space.repair(wanted, rng) if problems else self.space.make(wanted)
            if child.key == parent.key or child.key in taken:
                tried.append(f"{rule.name}: {'the parent again' if child.key == parent.key else 'already judged'}")
                continue
            op = f"{self.name}:{rule.name}"
            cand = Candidate(child, (parent.key,), op)
            if problems:
                return Proposal(op, parent.key, "repaired", "; ".join(problems)[:500], cand, rule.why, changes)
            return Proposal(op, parent.key, "valid", "", cand, rule.why, changes)
        return Proposal(self.name, parent.key, "duplicate", "; ".join(tried)[:500])


    def propose_many(self, requests: Sequence[Request], rng: random.Random, taken: Collection[str] = (),
                     context: str = "") -> list[Proposal]:
        taken = set(taken)
        out = []
        for req in requests:
            p = self.propose(req.parent, rng, taken)
            if p.candidate is not None:
                taken.add(p.candidate.key)
            out.append(p)
        return out


def genome_of(space: GeneSpace, ev: Evaluation) -> Genome | None:
    try:
        return space.make(dict(ev.genome))
    except Exception:  # noqa: BLE001 - a raw source or another space's genome has no genes here
        return None


def improved(child: float | None, parent: float | None) -> bool:
    """A child better than its parent: it competes and the parent does not, or it is faster."""
    if child is None or not math.isfinite(child):
        return False
    return parent is None or child > parent


__all__ = ["GuidedOperator", "Rule", "RuleError", "RULES_DIR", "genome_of", "improved", "load_rules"]
