"""The Proposer contract (operators.proposal.Proposer), run over every proposer: one Proposal per
request, in order, never raising, never repeating a taken key, accepted ones valid in the space
and naming their parent. The LLM answers come from a transcript written for the tests."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from fitness.replay import ReplayEvaluator
from genomes import load_space
from operators.guided import GuidedOperator
from operators.llm import LLMOperator, LLMSettings, RecordedChat
from operators.proposal import OUTCOMES, Proposer, Request

ROOT = Path(__file__).resolve().parents[1]
SPACE = load_space("synthetic")
TABLE = ReplayEvaluator.from_file(ROOT / "tests/data/synthetic_table.csv", SPACE).evaluations()


def answers(n):
    """Gene edits written for this test (no model), some of them bad on purpose."""
    out = []
    for i in range(n):
        a = [json.dumps({"kind": "genes", "changes": {"unroll": 1 + i % 4}}), "not json", "{\"kind\": \"genes\""][i % 3]
        out.append({"prompt_sha": "-", "status": "ok", "answer": a, "prompt_tokens": 10, "completion_tokens": 5})
    return out


PROPOSERS = {
    "guided": lambda: GuidedOperator.for_family(SPACE, "synthetic"),
    "llm": lambda: LLMOperator(LLMSettings(model="test"), SPACE, "synthetic", chat=RecordedChat(answers(12))),
}


@pytest.mark.parametrize("name", sorted(PROPOSERS))
def test_proposer_contract(name):
    proposer = PROPOSERS[name]()
    assert isinstance(proposer, Proposer)
    parents = random.Random(1).sample(TABLE, 12)
    requests = [Request(e, SPACE.make(dict(e.genome))) for e in parents]
    taken = {parents[0].key}
    out = proposer.propose_many(requests, random.Random(0), taken)
    assert len(out) == len(requests)
    keys = []
    for req, p in zip(requests, out):
        assert p.outcome in OUTCOMES and p.parent == req.parent.key
        assert p.operator.split(":")[0] == proposer.name
        if p.candidate is not None:
            assert p.candidate.parents == (req.parent.key,) and SPACE.is_valid(p.candidate.genome.as_dict())
            assert p.candidate.key not in taken and p.candidate.key not in keys
            keys.append(p.candidate.key)
        else:
            assert p.reason
    assert proposer.propose_many([], random.Random(0)) == []
