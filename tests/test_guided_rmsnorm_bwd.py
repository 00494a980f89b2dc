"""operators/rules/rmsnorm_bwd_v1.toml on the backward's own H200 evidence (session 14's record,
results/archive/session14/rmsnorm_bwd_h200_run.json.gz): the rules load against gene space v5, fire where the
measurements say they should, and the L2 rule proposes the twin the probe measured faster."""

from __future__ import annotations

import gzip
import json
import random

import pytest

from fitness.records import Evaluation, Status
from genomes import load_space
from operators.guided import GuidedOperator
from tests.conftest import REPO

SPACE = load_space("rmsnorm_bwd", "v5")
RECORD = REPO / "results" / "archive" / "session14" / "rmsnorm_bwd_h200_run.json.gz"


@pytest.fixture(scope="module")
def op():
    return GuidedOperator.for_family(SPACE, "rmsnorm_bwd", baseline="int21")


@pytest.fixture(scope="module")
def evaluations():
    record = json.loads(gzip.decompress(RECORD.read_bytes()))
    return {e["key"][:8]: Evaluation.from_dict(e) for e in record["evaluations"]}


def test_rules_load_and_name_their_evidence(op):
    assert len(op.rules) >= 10 and len({r.name for r in op.rules}) == len(op.rules)
    assert all(r.why and r.when and r.change for r in op.rules)
    assert any("session 14" in r.why for r in op.rules) and any("session 13" in r.why for r in op.rules)


def test_the_l2_rule_fires_on_two_stages_ahead_and_proposes_the_measured_faster_twin(op, evaluations):
    """4f78502c (l2, cluster 8, 2 row groups ahead: 33 MB of L2 held) ran the long rows at 0.60 of
    the roofline, c82157f8 (the same with one ahead) at 0.78: the rule fires on the first, not on
    the second, and its child is exactly the second."""
    fired = {k: {r.name for r in op.fired(e)} for k, e in evaluations.items()}
    for slow in ("4f78502c", "c972f52d", "90654bba"):
        assert "l2-staging-fewer-stages" in fired[slow], slow
    assert "l2-staging-fewer-stages" not in fired["c82157f8"]
    rule = next(r for r in op.rules if r.name == "l2-staging-fewer-stages")
    child = SPACE.make(rule.apply(SPACE, evaluations["4f78502c"].genome))
    assert child.key == evaluations["c82157f8"].key


def test_the_exchange_and_failure_rules_fire_on_their_evidence(op, evaluations):
    fired = {k: {r.name for r in op.fired(e)} for k, e in evaluations.items()}
    barrier = [k for k, e in evaluations.items() if e.status is Status.OK and e.genome["cluster"] > 1
               and e.genome["cluster_exchange"] == "barrier"]
    assert barrier and all("clustered-rows-async-exchange" not in fired[k] for k, e in evaluations.items()
                           if e.genome["cluster_exchange"] == "async")
    assert any("clustered-rows-async-exchange" in fired[k] for k in barrier)
    errors = [k for k, e in evaluations.items() if e.status is Status.RUNTIME_ERROR]
    assert len(errors) == 3 and all("failure-leave-l2-staging" in fired[k] for k in errors)
    assert "longest-rows-through-l2" in fired["d30696bb"]


def test_a_proposal_names_its_rule_and_is_a_valid_new_genome(op, evaluations):
    rng = random.Random(3)
    p = op.propose(evaluations["4f78502c"], rng, taken={evaluations["4f78502c"].key})
    assert p.operator.startswith("guided:") and p.candidate is not None
    assert SPACE.is_valid(p.candidate.genome)
