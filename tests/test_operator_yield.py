"""evo.operator_yield on hand-made records and events (written for this test)."""

from __future__ import annotations

from evo.operator_yield import label, operator_yield
from evo.store import Record
from fitness.records import Evaluation, Status


def rec(seq, key, op, fitness=None, parents=(), status=Status.OK, gpu=2.0, artifacts=None):
    ev = Evaluation(key=key, genome={}, space="s", status=status,
                    objectives={"m": fitness} if fitness is not None else {},
                    artifacts={"gpu_seconds": str(gpu), **(artifacts or {})})
    return Record("r", ev, operator=op, parents=parents, seq=seq)


def test_counts_per_operator():
    records = [rec(0, "p", "init", 1.0), rec(1, "a", "mutation@model", 1.2, ("p",)),
               rec(2, "b", "guided:spills", 0.9, ("p",)), rec(3, "c", "llm:genes", 1.5, ("a",)),
               rec(4, "d", "llm:source", None, ("a",), status=Status.COMPILE_ERROR),
               rec(5, "e", "guided:spills", None, ("p",), status=Status.INVALID)]
    events = [{"kind": "proposal", "operator": "guided:spills", "outcome": "valid", "key": "b", "exchange": None},
              {"kind": "proposal", "operator": "guided", "outcome": "no_rule", "key": None, "exchange": None},
              {"kind": "proposal", "operator": "guided:spills", "outcome": "repaired", "key": "e", "exchange": None},
              {"kind": "proposal", "operator": "llm:genes", "outcome": "valid", "key": "c", "exchange": 0},
              {"kind": "proposal", "operator": "llm:source", "outcome": "valid", "key": "d", "exchange": 1},
              {"kind": "proposal", "operator": "llm", "outcome": "error", "key": None, "exchange": 2},
              {"kind": "llm", "index": 0, "prompt_tokens": 100, "completion_tokens": 10, "cost_usd": 0.01},
              {"kind": "llm", "index": 1, "prompt_tokens": 100, "completion_tokens": 50, "cost_usd": 0.02},
              {"kind": "llm", "index": 2, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}]
    rows = {r.operator: r for r in operator_yield(records, events, "m")}
    g, llm, mut = rows["guided"], rows["llm"], rows["mutation"]
    assert (g.proposals, g.valid, g.repaired, g.judged, g.compiled, g.verified, g.improved, g.new_best) == (3, 2, 1, 2, 1, 1, 0, 0)
    assert (llm.proposals, llm.valid, llm.compiled, llm.verified, llm.improved, llm.new_best) == (3, 2, 1, 1, 1, 1)
    assert (llm.tokens, round(llm.cost_usd, 3)) == (260, 0.03)
    assert (mut.proposals, mut.improved, mut.new_best, mut.gpu_seconds) == (1, 1, 1, 2.0)
    detail = {r.operator for r in operator_yield(records, events, "m", detail=True)}
    assert {"guided:spills", "guided (no candidate)", "llm:genes", "llm:source", "llm (no candidate)"} <= detail
    assert label("crossover:group+mutation@explore") == "crossover:group+mutation"
