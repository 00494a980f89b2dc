"""operators.guided: rules are data, checked when loaded, fire on evidence and name themselves."""

from __future__ import annotations

import json
import random

import pytest

from evo.config import ConfigError, from_dict
from fitness.records import CaseResult, Evaluation, Status
from genomes import load_space
from genomes.rmsnorm import DEFAULT
from operators.evidence import Evidence
from operators.guided import GuidedOperator, RuleError, load_rules

SPACE = load_space("rmsnorm")


def evaluation(genome, *, status=Status.OK, spills=0, registers=64, fractions=None, fitness=1.1):
    """An Evaluation written for these tests (no GPU measured it)."""
    fractions = fractions or {256: 0.9, 4096: 0.95, 131072: 0.95}
    cases = tuple(CaseResult(f"bf16/4096x{n}", Status.OK, {"M": 4096, "N": n, "dtype": "bf16"}, time_us=10.0,
                             tbps=f * 4.0, baselines_us={"torch": 12.0}) for n, f in fractions.items())
    res = {"rmsnorm_fwd_bf16_fp32": {"registers": registers, "spill_store_bytes": spills, "spill_load_bytes": spills,
                                     "shared_bytes": 0, "stack_frame_bytes": 0}}
    return Evaluation(key=genome.key, genome=genome.as_dict(), space="rmsnorm", status=status,
                      objectives={"geomean_speedup": fitness} if status.ok else {}, cases=cases if status.ok else (),
                      artifacts={"resources": json.dumps(res), "copy_ceiling_tbps": "4.0"})


@pytest.fixture(scope="module")
def op():
    return GuidedOperator.for_family(SPACE, "rmsnorm")


def test_rules_file_loads_and_every_rule_is_inspectable(op):
    assert len(op.rules) >= 10 and len({r.name for r in op.rules}) == len(op.rules)
    assert all(r.why and r.when and r.change for r in op.rules)


def test_spills_fire_the_spill_rules_and_the_proposal_names_its_rule(op):
    parent = SPACE.make(dict(DEFAULT.as_dict(), unroll=4, chunks=4))
    ev = evaluation(parent, spills=64)
    fired = {r.name for r in op.fired(ev)}
    assert {"spills-lower-unroll", "spills-fewer-chunks"} <= fired
    p = op.propose(ev, random.Random(1))
    assert p.outcome in ("valid", "repaired") and p.operator.startswith("guided:spills-")
    assert p.candidate.parents == (parent.key,) and p.rationale
    rule = p.operator.split(":", 1)[1]
    gene = {"spills-lower-unroll": "unroll", "spills-fewer-chunks": "chunks"}.get(rule)
    if gene:
        assert p.candidate.genome[gene] < parent[gene]


def test_short_rows_far_below_the_roofline_ask_for_more_rows_per_cta(op):
    parent = SPACE.make(dict(DEFAULT.as_dict()))
    ev = evaluation(parent, fractions={256: 0.4, 512: 0.5, 4096: 0.95})
    assert "short-rows-more-rows-per-cta" in {r.name for r in op.fired(ev)} or parent["cta_threads"] == 1024
    assert Evidence.of(ev).case_features("N <= 1024")["case_fraction"] == pytest.approx(0.45)


def test_healthy_parent_fires_nothing_and_already_judged_children_are_no_proposal(op):
    parent = SPACE.make(dict(DEFAULT.as_dict(), maxrreg=0))
    ev = evaluation(parent, registers=40)
    assert op.propose(ev, random.Random(0)).outcome == "no_rule"
    spilled = evaluation(parent, spills=8)
    first = op.propose(spilled, random.Random(0))
    taken = set()
    for _ in range(10):
        p = op.propose(spilled, random.Random(0), taken)
        if not p.accepted:
            assert p.outcome == "duplicate"
            break
        taken.add(p.candidate.key)
    assert first.accepted


def test_a_failure_avoids_the_genes_involved(op):
    parent = SPACE.make(dict(DEFAULT.as_dict(), staging="smem_sync"))
    ev = evaluation(parent, status=Status.WRONG_RESULT)
    assert "failure-plain-staging" in {r.name for r in op.fired(ev)}


@pytest.mark.parametrize("body, message", [
    ('[[rules]]\nname = "a"\nwhen = "spills > 0"\nchange = { unroll = "down" }', "unknown name 'spills'"),
    ('[[rules]]\nname = "a"\nwhen = "spill_bytes > 0"\nchange = { unrol = "down" }', "gene 'unrol'"),
    ('[[rules]]\nname = "a"\nwhen = "spill_bytes > 0"\nchange = { unroll = "sideways" }', "'up', 'down'"),
    ('[[rules]]\nname = "a"\nwhen = "spill_bytes > 0"\nchange = { unroll = { set = 99 } }', "not a legal value"),
    ('[[rules]]\nname = "a"\nwhen = "__import__(1)"\nchange = { unroll = "down" }', "not allowed"),
    ('[[rules]]\nname = "a"\nwen = "x"\nchange = { unroll = "down" }', "unknown keys"),
    ("", "no [[rules]]"),
])
def test_a_bad_rules_file_names_the_rule_and_field(tmp_path, body, message):
    path = tmp_path / "rules.toml"
    path.write_text(body)
    with pytest.raises(RuleError, match="rules") as exc:
        load_rules(path, SPACE)
    assert message in str(exc.value)


def test_operators_config_lines():
    base = {"experiment": {"name": "x", "family": "rmsnorm"}}
    with pytest.raises(ConfigError) as exc:
        from_dict(base | {"operators": {"guided": {"rate": 0.7}, "llm": {"rate": 0.5, "model": "m",
                                                                         "base_url": "localhost:8000"}}})
    text = str(exc.value)
    assert "operators: guided.rate + llm.rate = 1.2 is more than 1" in text
    with pytest.raises(ConfigError) as exc:
        from_dict(base | {"operators": {"llm": {"rate": 0.2, "model": "m", "base_url": "localhost:8000"}}})
    assert "operators.llm.base_url: 'localhost:8000' is not an http(s) URL" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        from_dict(base | {"operators": {"llm": {"rate": 0.2}}})
    assert "operators.llm: rate > 0 needs base_url and model" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        from_dict(base | {"operators": {"llm": {"rate": 0.1, "replay": "t.json", "budget_usd": -1, "modle": "x"}}})
    assert "operators.llm.budget_usd: must be >= 0.0" in str(exc.value)
    assert "operators.llm.modle: unknown key (did you mean 'model'?)" in str(exc.value)
