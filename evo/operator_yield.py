"""What each operator bought: proposals, valid ones, compiled, verified, better than their parent,
new bests, GPU seconds, tokens and money (the `evo report` table "Yield per operator").

    rows = operator_yield(records, events, metric)      # records in append order; store events

An operator is a record's label without the screening suffix ("mutation@model" -> "mutation"); the
guided rules count together as "guided" and the LLM's answers as "llm" (`detail=True`: one row per
rule and per answer kind). A proposer's proposals are its store events (every proposal, including
those never judged: invalid, duplicate, skipped, endpoint errors); a strategy's are its children.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from fitness.records import Status

PROPOSERS = ("guided", "llm", "graft")


@dataclass
class OperatorYield:
    operator: str
    proposals: int = 0
    valid: int = 0             # passed validation (a proposer's valid + repaired; a strategy's children)
    repaired: int = 0
    judged: int = 0            # recorded evaluations (a valid proposal is not judged when the budget ends first)
    compiled: int = 0
    verified: int = 0          # OK, not suspect, with a fitness
    improved: int = 0          # better than its best parent
    new_best: int = 0          # better than everything recorded before it
    gpu_seconds: float = 0.0
    tokens: int = 0
    cost_usd: float = 0.0

    def as_row(self) -> list[Any]:
        return [self.operator, self.proposals, self.valid, self.repaired, self.judged, self.compiled, self.verified,
                self.improved, self.new_best, round(self.gpu_seconds, 1), self.tokens, round(self.cost_usd, 4)]


HEADER = ["operator", "proposals", "valid", "repaired", "judged", "compiled", "verified", "improved on parent", "new best",
          "GPU s", "tokens", "cost USD"]


def label(operator: str, detail: bool = False) -> str:
    base = operator.split("@", 1)[0]
    head = base.split(":", 1)[0]
    if head in PROPOSERS and not detail:
        return head
    if head in PROPOSERS and base == head:
        return f"{head} (no candidate)"          # no rule fired, an endpoint error, an unreadable answer
    return base


def operator_yield(records: Sequence[Any], events: Iterable[Mapping[str, Any]], metric: str,
                   detail: bool = False) -> list[OperatorYield]:
    events = list(events)
    rows: dict[str, OperatorYield] = {}

    def row(name: str) -> OperatorYield:
        return rows.setdefault(name, OperatorYield(name))

    proposals = [e for e in events if e.get("kind") == "proposal"]
    exchanges = {int(e["index"]): e for e in events if e.get("kind") == "llm"}
    for p in proposals:
        r = row(label(p.get("operator", "?"), detail))
        r.proposals += 1
        if p.get("outcome") in ("valid", "repaired"):
            r.valid += 1
            r.repaired += p.get("outcome") == "repaired"
        ex = exchanges.get(p["exchange"]) if p.get("exchange") is not None else None
        if ex is not None:
            r.tokens += int(ex.get("prompt_tokens") or 0) + int(ex.get("completion_tokens") or 0)
            r.cost_usd += float(ex.get("cost_usd") or 0.0)
    fitness: dict[str, float | None] = {}
    best = -math.inf
    for rec in sorted(records, key=lambda r: r.seq):
        ev = rec.evaluation
        f = ev.fitness(metric)
        fitness[rec.key] = f
        name = label(rec.operator, detail)
        r = row(name)
        if name.split(":", 1)[0] not in PROPOSERS:
            r.proposals += 1
            r.valid += 1
        r.judged += 1
        if compiled(ev):
            r.compiled += 1
        if f is not None:
            r.verified += 1
            parents = [fitness.get(k) for k in rec.parents]
            scored = [x for x in parents if x is not None]
            if rec.parents and f > (max(scored) if scored else -math.inf):
                r.improved += 1
            if f > best:
                if best > -math.inf:
                    r.new_best += 1
                best = f
        r.gpu_seconds += _gpu_seconds(ev)
    return sorted(rows.values(), key=lambda r: (r.operator.split(":")[0] in PROPOSERS, r.operator))


def compiled(ev: Any) -> bool:
    """The compiler accepted it: every status but COMPILE_ERROR, and an INVALID that was refused
    after compiling (its ptxas resources are recorded), not one refused before (a bad #include)."""
    if ev.status is Status.COMPILE_ERROR:
        return False
    if ev.status is Status.INVALID:
        return bool(ev.artifacts.get("resources") or ev.artifacts.get("compile_log"))
    return True


def _gpu_seconds(ev: Any) -> float:
    try:
        v = float(ev.artifacts.get("gpu_seconds", 0.0))
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0


def markdown(rows: Sequence[OperatorYield]) -> list[str]:
    lines = ["| " + " | ".join(HEADER) + " |", "|---|" + "---:|" * (len(HEADER) - 1)]
    for r in rows:
        lines.append("| " + " | ".join(str(v) for v in r.as_row()) + " |")
    return lines


def exchange_lines(events: Iterable[Mapping[str, Any]], limit: int = 20) -> list[str]:
    """What the model was told and said, one line per exchange (the prompts themselves are in the
    store, event kind "llm")."""
    out = []
    for e in [e for e in events if e.get("kind") == "llm"][:limit]:
        answer = str(e.get("answer") or "").replace("\n", " ")
        out.append(f"- #{e['index']} {e.get('status')} {e.get('model', '')} @ {e.get('endpoint', '')}: "
                   f"{e.get('prompt_tokens', 0)}+{e.get('completion_tokens', 0)} tokens, {e.get('latency_s', 0):.2f} s"
                   + (f", region {e['region']}" if e.get("region") else "")
                   + f"; answer {json.dumps(answer[:160])}" + (f" ({e['error'][:120]})" if e.get("error") else ""))
    return out


__all__ = ["HEADER", "OperatorYield", "compiled", "exchange_lines", "label", "markdown", "operator_yield"]
