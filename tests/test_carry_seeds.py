"""search.carry_seeds: a seed whose earlier verdict is what the GPU judge would measure now is
answered from it (marked, no GPU time) instead of judged again; anything else is judged."""

from __future__ import annotations


import pytest

from evo.config import ConfigError
from evo.lessons import carried_evaluations, seed_genomes
from evo.run import Run, new_run_info
from evo.store import open_store
from fitness.evaluator import Evaluator
from fitness.records import Evaluation, Status, read_json
from tests.conftest import REPO, make_config


class CountingJudge(Evaluator):
    """The synthetic recording as a 'GPU': counts what it is asked to judge; accepts earlier
    evidence recorded on its own device unless told otherwise."""

    def __init__(self, table, accept=True):
        self.table, self.accept, self.judged = table, accept, []

    def evaluate(self, genomes):
        self.judged += [g.key for g in genomes]
        return self.table.evaluate(genomes)

    def accepts_evidence(self, evaluation):
        if not self.accept:
            return "device differs: recorded 'synthetic', here 'another GPU'"
        return "" if evaluation.status is Status.OK and evaluation.device == "synthetic" else "not verified here"


def _config(table, **search):
    return make_config(search={"seed_from": str(table.source), "seed_limit": 6, "carry_seeds": True,
                               "ga": {"population": 10, "offspring": 10}, **search},
                       budget={"evaluations": 30})


def _run(space, table, judge, cfg, carried):
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "c"))
    run = Run(cfg, space, store, judge, "c", seeds=seed_genomes(cfg, space), carried=carried)
    run.optimize()
    return run, store.records("c")


def test_accepted_seeds_are_carried_not_judged(synthetic_space, synthetic_table):
    cfg = _config(synthetic_table)
    seeds = seed_genomes(cfg, synthetic_space)
    carried = {e.key: e for e in synthetic_table.evaluations()}      # what carried_evaluations gives a GPU run
    judge = CountingJudge(synthetic_table)
    run, records = _run(synthetic_space, synthetic_table, judge, cfg, carried)
    assert len(records) == 30 and not set(judge.judged) & {g.key for g in seeds}
    first = records[:6]
    assert [r.key for r in first] == [g.key for g in seeds] and {r.operator for r in first} == {"seed"}
    for r in first:
        original = carried[r.key]
        assert r.evaluation.objectives == original.objectives and r.evaluation.cases == original.cases
        assert r.evaluation.artifacts["carried_from"] == cfg.search.seed_from
        assert float(r.evaluation.artifacts["gpu_seconds"]) == 0.0 and "carried from" in r.evaluation.message
    assert run.carry_log == [(g.key, "") for g in seeds]
    # the other 24 were judged, as usual
    assert len(judge.judged) == 24 and all("carried_from" not in r.evaluation.artifacts for r in records[6:])
    from evo.session import search_aids

    assert search_aids(records, "geomean_speedup") == [
        "carried seeds: 6 (answered from their earlier verdicts, no GPU time)"]


def test_refused_evidence_is_judged_again_and_the_reason_kept(synthetic_space, synthetic_table):
    cfg = _config(synthetic_table)
    seeds = seed_genomes(cfg, synthetic_space)
    judge = CountingJudge(synthetic_table, accept=False)
    run, records = _run(synthetic_space, synthetic_table, judge, cfg,
                        {e.key: e for e in synthetic_table.evaluations()})
    assert judge.judged[:6] == [g.key for g in seeds] and len(judge.judged) == 30
    assert all("carried_from" not in r.evaluation.artifacts for r in records)
    assert [why for _, why in run.carry_log] == ["device differs: recorded 'synthetic', here 'another GPU'"] * 6


def test_carry_seeds_offers_the_seed_records_verdicts_and_the_option_needs_seed_from(synthetic_space, synthetic_table):
    offered = carried_evaluations(_config(synthetic_table), synthetic_space)       # a replay evaluator gets them too
    assert set(offered) == {e.key for e in synthetic_table.evaluations()}
    assert carried_evaluations(make_config(), synthetic_space) == {}
    assert carried_evaluations(make_config(search={"seed_from": str(synthetic_table.source)}), synthetic_space) == {}
    with pytest.raises(ConfigError, match="search.carry_seeds: there is nothing to carry without search.seed_from"):
        make_config(search={"carry_seeds": True})


# -- the GPU judge's side: would it measure the same now? (no GPU needed: a stand-in pool) -------------------
class StandInPool:
    size = 1

    def __init__(self, device):
        self.device = device

    def start(self):
        pass

    def worker_info(self):
        return [{"device": self.device}]

    def close(self):
        pass


@pytest.fixture(scope="module")
def recorded():
    # session 4's run (frozen): it has verified, hopeless-truncated and unsupported evidence
    data = read_json(REPO / "results" / "archive" / "session4" / "rmsnorm_fwd_h200_run.json.gz")
    return [Evaluation.from_dict(e) for e in data["evaluations"]]


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    from fitness.compile import Compiler

    return Compiler(tmp_path_factory.mktemp("cc"))     # only its compile key is used: nothing is built


def _judge(device, compiler, matrix="quack:bf16,fp16,fp32"):
    from fitness.gpu_evaluator import GPUEvaluator
    from genomes.rmsnorm import SPACE_V2

    return GPUEvaluator("rmsnorm", SPACE_V2, matrix=matrix, pool=StandInPool(device), compiler=compiler)


def test_the_gpu_judge_accepts_a_verified_full_evaluation_of_the_same_kernel_on_its_own_device(recorded, compiler):
    full = next(e for e in recorded if e.status is Status.OK and len(e.cases) == 33)
    if f"nvcc {compiler.toolkit}" != full.toolkit:
        pytest.skip(f"the run was recorded with {full.toolkit}, this machine has nvcc {compiler.toolkit}")
    with _judge(full.device, compiler) as judge:
        # recorded under protocol 1 (before session 10's judge): judged again, never carried
        assert judge.accepts_evidence(full).startswith("judged under protocol 1")
        full = _as_if_judged_now(judge, full)
        assert judge.accepts_evidence(full) == ""
    with _judge(full.device, compiler, matrix="quack:bf16") as judge:      # a subset of what was measured
        assert judge.accepts_evidence(full) == ""


def _as_if_judged_now(judge, ev):
    """The same evidence as if today's judge had made it: its protocol, today's compile key."""
    from dataclasses import replace

    from fitness.jobs import JUDGE_PROTOCOL
    g = judge.space.make(ev.genome)
    key = judge.compiler().key(judge.family.render(g), tuple(judge.family.compile_flags(g)))
    return replace(ev, artifacts={**ev.artifacts, "source_hash": key, "judge_protocol": str(JUDGE_PROTOCOL)})


def test_the_gpu_judge_refuses_what_it_would_not_measure_the_same(recorded, compiler):
    full = next(e for e in recorded if e.status is Status.OK and len(e.cases) == 33)
    truncated = next(e for e in recorded if "truncated, hopeless" in e.message)
    if f"nvcc {compiler.toolkit}" != full.toolkit:
        pytest.skip(f"the run was recorded with {full.toolkit}, this machine has nvcc {compiler.toolkit}")
    with _judge(full.device, compiler) as judge:
        full = _as_if_judged_now(judge, full)
        truncated = _as_if_judged_now(judge, truncated)
    with _judge(full.device.replace("580.159.04", "590.1"), compiler) as judge:
        assert judge.accepts_evidence(full).startswith("device differs")
    with _judge(full.device, compiler) as judge:
        assert judge.accepts_evidence(truncated).startswith("case ") and "was not measured" in judge.accepts_evidence(truncated)
        from dataclasses import replace

        assert judge.accepts_evidence(replace(full, toolkit="nvcc 12.8")).startswith("toolkit differs")
        assert judge.accepts_evidence(replace(full, suspect=True)).startswith("not a verified evaluation")
        assert judge.accepts_evidence(replace(full, status=Status.WRONG_RESULT)).startswith("not a verified")
        edited = replace(full, artifacts={**full.artifacts, "source_hash": "0" * 64})    # another template
        assert judge.accepts_evidence(edited).startswith("kernel source differs")
        other = next(e for e in recorded if e.status is Status.OK and len(e.cases) == 33 and e.key != full.key)
        swapped = replace(full, genome=other.genome)
        assert judge.accepts_evidence(replace(full, artifacts={**full.artifacts, "judge_protocol": "1"})).startswith(
            "judged under protocol 1")      # evidence of one genome presented as another's
        assert judge.accepts_evidence(swapped).startswith("kernel source differs")
    with _judge(full.device, compiler, matrix="quack+models:bf16") as judge:
        assert "was not measured" in judge.accepts_evidence(full)


def test_a_carried_verdict_is_recorded_in_the_runs_spelling_of_the_genome(recorded):
    """Session 4's genomes (space v2) carried into a v3 run: the record holds weight_batch = 1 (its
    legacy value), the same key, and says where the verdict came from."""
    from evo.run import _carried
    from genomes.rmsnorm import SPACE_V3

    ev = next(e for e in recorded if e.status is Status.OK)
    assert "weight_batch" not in ev.genome
    g = SPACE_V3.make(ev.genome)
    out = _carried(ev, "../results/archive/session4/rmsnorm_fwd_h200_run.json.gz", g)
    assert out.genome["weight_batch"] == 1 and SPACE_V3.make(out.genome).key == ev.key == g.key
    assert out.artifacts["carried_from"].endswith("session4/rmsnorm_fwd_h200_run.json.gz")
    assert out.artifacts["gpu_seconds"] == 0.0 and out.cases == ev.cases


def test_a_replay_carries_what_the_recorded_run_carried_and_asks_in_its_order(synthetic_space, synthetic_table,
                                                                            tmp_path):
    """A recorded run that carried some seeds (not the first ones) and judged the others is replayed ask for ask:
    the replay evaluator accepts exactly the recorded run's carried verdicts, so the carried seeds are recorded
    first, as on the GPU, and the judged ones after them."""
    import dataclasses  # noqa: PLC0415
    import json  # noqa: PLC0415

    from fitness.replay import ReplayEvaluator  # noqa: PLC0415

    cfg = _config(synthetic_table)
    seeds = seed_genomes(cfg, synthetic_space)
    refused = {seeds[1].key, seeds[3].key}

    class Picky(CountingJudge):
        def accepts_evidence(self, evaluation):
            return "judged again here" if evaluation.key in refused else ""

    offered = {e.key: e for e in synthetic_table.evaluations()}
    _, records = _run(synthetic_space, synthetic_table, Picky(synthetic_table), cfg, offered)
    order = [r.key for r in records]
    assert order[:4] == [g.key for g in seeds if g.key not in refused][:4] and set(order[4:6]) == refused
    path = tmp_path / "recorded.json"
    path.write_text(json.dumps({"evaluations": [dataclasses.replace(r.evaluation).to_dict() for r in records]}))
    replay = ReplayEvaluator.from_file(path, space=synthetic_space)
    assert [replay.accepts_evidence(offered[g.key]) == "" for g in seeds] == [g.key not in refused for g in seeds]
    store = open_store("memory://")
    replay_cfg = cfg.with_overrides({"evaluator.kind": "replay", "evaluator.replay": str(path)})
    store.create_run(new_run_info(replay_cfg, "r"))
    Run(replay_cfg, synthetic_space, store, replay, "r", seeds=seed_genomes(replay_cfg, synthetic_space),
        carried=carried_evaluations(replay_cfg, synthetic_space)).optimize()
    assert [r.key for r in store.records("r")] == order


def test_a_case_its_primary_baseline_cannot_run_does_not_keep_a_verdict_from_being_carried(compiler):
    """INT21 fails on fp32 8192x262144 ("invalid argument"): session 35's H100 run judged ff201ea8 and the two
    refill = pass2 genomes again (~90 s of GPU time) although their session 34 verdicts were of the same kernel on
    the same device. A gap that a new judgment would meet again stands; running out of memory, or a machine
    without the baseline, does not."""
    from dataclasses import replace

    from fitness.baseline_runs import lasting_gap
    from fitness.gpu_evaluator import GPUEvaluator
    from genomes.registry import load_space

    data = read_json(REPO / "results" / "archive" / "session34" / "rmsnorm_bwd_h100_run.json.gz")
    ev = next(Evaluation.from_dict(e) for e in data["evaluations"] if e["key"].startswith("ff201ea8"))
    if f"nvcc {compiler.toolkit}" != ev.toolkit:
        pytest.skip(f"the run was recorded with {ev.toolkit}, this machine has nvcc {compiler.toolkit}")
    gap = next(c for c in ev.cases if c.case == "fp32/8192x262144")
    assert gap.time_us and "int21" not in gap.baselines_us
    assert lasting_gap(gap.message, "int21").startswith("unusable: RuntimeError")

    def with_note(note):
        cases = [replace(c, message=f"baseline int21: {note}; launch shield: as recorded") if c is gap else c
                 for c in ev.cases]
        return replace(ev, cases=cases)

    with GPUEvaluator("rmsnorm_bwd", load_space("rmsnorm_bwd", "v15"), matrix="quack:bf16,fp16,fp32", baseline="int21",
                      pool=StandInPool(ev.device), compiler=compiler) as judge:
        assert judge.accepts_evidence(ev) == ""
        assert judge.accepts_evidence(with_note("does not support this case")) == ""
        for note in ("unusable: out of device memory (an allocation of 8.0 GiB failed: OutOfMemoryError: ...), "
                     "also after freeing every allocator's cache and trying again",
                     "not importable here (needs .peers/RMSNorm-H100)", "unusable: ModuleNotFoundError: rmsnorm"):
            assert "has no verified time beside int21" in judge.accepts_evidence(with_note(note)), note
        assert "has no verified time beside int21" in judge.accepts_evidence(
            replace(ev, cases=[replace(c, message="") if c is gap else c for c in ev.cases]))
        assert judge.accepts_evidence(replace(ev, cases=[replace(c, time_us=None) if c is gap else c
                                                         for c in ev.cases])).endswith("has no verified time")
