"""The Run: budgets, exactly-once records, stages, and the Optuna study in the run's database."""

from __future__ import annotations

import optuna
import pytest

from evo.run import Run, new_run_info
from evo.store import open_store, sqlite_url
from fitness.records import Status
from tests.conftest import make_config


def run_with(space, table, url="memory://", run_id="r", **sections):
    cfg = make_config(**sections)
    store = open_store(url)
    store.create_run(new_run_info(cfg, run_id))
    run = Run(cfg, space, store, table, run_id,
              optuna_storage=None if url.startswith("memory") else url)
    summary = run.optimize()
    return run, summary, store


def test_budget_and_exactly_once(synthetic_space, synthetic_table):
    run, summary, store = run_with(synthetic_space, synthetic_table, budget={"evaluations": 150})
    records = store.records("r")
    assert len(records) == 150 == summary.evaluations
    assert len({r.key for r in records}) == 150
    assert [r.seq for r in records] == list(range(150))
    assert "budget" in summary.stop_reason
    assert store.get_run("r").state == "finished"


def test_failures_are_recorded_not_raised(synthetic_space, synthetic_table):
    _, summary, store = run_with(synthetic_space, synthetic_table, budget={"evaluations": 300})
    statuses = {r.status for r in store.records("r")}
    assert Status.OK in statuses and statuses - {Status.OK}, statuses
    assert summary.best.status is Status.OK


def test_records_carry_lineage(synthetic_space, synthetic_table):
    _, _, store = run_with(synthetic_space, synthetic_table, budget={"evaluations": 80},
                           search={"ga": {"population": 16, "offspring": 16}})
    records = store.records("r")
    first = records[:16]
    assert all(r.generation == 0 and r.operator == "init" and not r.parents for r in first)
    later = records[16:]
    assert all(r.generation >= 1 and r.parents for r in later)
    known = {r.key for r in records}
    assert all(p in known for r in later for p in r.parents)
    assert {r.operator.split(":")[0].split("+")[0] for r in later} <= {"mutation", "crossover"}


def test_islands_and_group_crossover(synthetic_space, synthetic_table):
    _, summary, store = run_with(synthetic_space, synthetic_table, budget={"evaluations": 200},
                                 search={"ga": {"population": 8, "offspring": 8, "islands": 3,
                                                "migration_interval": 2, "crossover": "group"}})
    assert summary.evaluations == 200
    assert any("crossover:group" in r.operator for r in store.records("r"))


def test_random_strategy(synthetic_space, synthetic_table):
    _, summary, store = run_with(synthetic_space, synthetic_table, budget={"evaluations": 64},
                                 search={"strategy": "random"})
    assert summary.evaluations == 64
    assert {r.operator for r in store.records("r")} == {"random"}


def test_optuna_stage_tunes_numeric_genes_in_the_run_database(tmp_path, synthetic_space, synthetic_table):
    url = sqlite_url(tmp_path / "store.sqlite")
    _, summary, store = run_with(synthetic_space, synthetic_table, url=url, run_id="opt",
                                 budget={"evaluations": 160},
                                 search={"optuna": {"enabled": True, "trials": 40, "top_k": 2, "sampler": "tpe"}})
    records = store.records("opt")
    optuna_records = [r for r in records if r.stage == "optuna"]
    assert len(records) == 160 and 0 < len(optuna_records) <= 40
    # structural genes stay frozen to one of the top structures; numeric ones move
    from evo.strategies.optuna_stage import structural_genes

    structural = structural_genes(synthetic_space)
    assert structural == ["load_cache", "streaming_store"]
    frozen = {tuple(r.evaluation.genome[n] for n in structural) for r in optuna_records}
    assert 1 <= len(frozen) <= 2
    # the studies are in the same database, readable by Optuna itself (and so optuna-dashboard)
    names = {s.study_name for s in optuna.get_all_study_summaries(storage=url)}
    assert names == {"opt:optuna:0", "opt:optuna:1"}
    study = optuna.load_study(study_name="opt:optuna:0", storage=url)
    assert len(study.trials) >= 10
    assert all(t.state.is_finished() for t in study.trials)


def test_cmaes_sampler_runs(synthetic_space, synthetic_table):
    _, summary, _ = run_with(synthetic_space, synthetic_table, budget={"evaluations": 100},
                             search={"optuna": {"enabled": True, "trials": 30, "sampler": "cmaes", "top_k": 1}})
    assert summary.evaluations <= 100


def test_wall_time_budget(synthetic_space, synthetic_table):
    from fitness.replay import ReplayEvaluator

    slow = ReplayEvaluator(synthetic_table._table.values(), latency_s=0.01)
    cfg = make_config(budget={"evaluations": 5000, "wall_time_s": 0.5})
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "w"))
    summary = Run(cfg, synthetic_space, store, slow, "w").optimize()
    assert "wall-time" in summary.stop_reason
    assert 10 <= summary.evaluations < 100


def test_stalls_stop_a_run_in_an_exhausted_space(synthetic_table):
    from genomes import Choice, GeneSpace
    from fitness.records import Evaluation

    tiny = GeneSpace("tiny", (Choice("a", options=(1, 2, 3)),))
    table = [Evaluation(key=g.key, genome=g.as_dict(), space="tiny", status=Status.OK,
                        objectives={"geomean_speedup": float(g["a"])}) for g in tiny.enumerate()]
    from fitness.replay import ReplayEvaluator

    cfg = make_config(experiment={"family": "synthetic"}, budget={"evaluations": 100, "stall_rounds": 5},
                      search={"ga": {"population": 2, "offspring": 2, "tournament_size": 2}})
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "s"))
    summary = Run(cfg, tiny, store, ReplayEvaluator(table), "s").optimize()
    assert summary.evaluations == 3
    assert "nothing new" in summary.stop_reason


def test_interrupt_marks_run_and_keeps_records(synthetic_space, synthetic_table):
    cfg = make_config(budget={"evaluations": 100})
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "i"))

    def stop_after_20(run, new_records):
        if run.evaluations >= 20:
            raise KeyboardInterrupt

    run = Run(cfg, synthetic_space, store, synthetic_table, "i", on_progress=stop_after_20)
    with pytest.raises(KeyboardInterrupt):
        run.optimize()
    assert store.get_run("i").state == "interrupted"
    assert store.count("i") == 20


def test_a_machine_that_loses_its_baseline_fails_the_run_with_the_reason_and_keeps_records(
        synthetic_space, synthetic_table):
    """The judge raises BaselineUnavailableError for a batch it cannot time against the primary
    baseline: the records before it stay, the run says why it stopped, and resume can go on."""
    from fitness.workers import BaselineUnavailableError

    cfg = make_config(budget={"evaluations": 100})
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "b"))

    class LosesItsBaseline:
        def __init__(self, inner):
            self.inner, self.batches = inner, 0

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def evaluate(self, genomes):
            self.batches += 1
            if self.batches > 2:
                raise BaselineUnavailableError("the primary baseline 'torch' cannot run on this machine: "
                                               "baseline torch: not importable here")
            return self.inner.evaluate(genomes)

    judge = LosesItsBaseline(synthetic_table)
    run = Run(cfg, synthetic_space, store, judge, "b")
    with pytest.raises(BaselineUnavailableError):
        run.optimize()
    info = store.get_run("b")
    assert info.state == "failed" and 0 < store.count("b") < 100
    assert info.notes["stop_reason"].startswith("BaselineUnavailableError: the primary baseline 'torch'")


def test_seed_from_earlier_evidence_starts_the_ga_from_its_best(synthetic_space, synthetic_table):
    from evo.lessons import seed_genomes

    cfg = make_config(search={"seed_from": str(synthetic_table.source), "ga": {"population": 8, "offspring": 8}},
                      budget={"evaluations": 40})
    seeds = seed_genomes(cfg, synthetic_space)
    ranked = sorted((e for e in synthetic_table.evaluations() if e.fitness("geomean_speedup") is not None),
                    key=lambda e: -e.fitness("geomean_speedup"))
    assert [g.key for g in seeds] == [e.key for e in ranked[:8]]
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "seeded"))
    Run(cfg, synthetic_space, store, synthetic_table, "seeded", seeds=seeds).optimize()
    first = store.records("seeded")[:8]
    assert [r.key for r in first] == [g.key for g in seeds] and {r.operator for r in first} == {"seed"}


def test_seed_from_a_missing_file_is_a_config_error(tmp_path):
    from evo.config import ConfigError
    from evo.evaluators import check_environment

    cfg = make_config(search={"seed_from": str(tmp_path / "none.json")})
    with pytest.raises(ConfigError, match="search.seed_from"):
        check_environment(cfg)


def test_seed_champions_put_each_case_s_fastest_genome_first(tmp_path):
    """A recorded run where the best geomean is not the fastest on every case: the specialists
    (one per case, the dispatch table's genomes) seed the GA before the rest."""
    import json

    from evo.lessons import seed_genomes
    from fitness.records import CaseResult, Evaluation, Status
    from genomes import GeneSpace
    from genomes.genes import IntRange

    space = GeneSpace("seedtest", genes=(IntRange("a", low=0, high=9),))
    evs = []
    for a, (t1, t2) in enumerate([(10.0, 10.0), (5.0, 30.0), (30.0, 4.0), (11.0, 11.0)]):
        g = space.make({"a": a})
        cases = (CaseResult("c1", Status.OK, time_us=t1, baselines_us={"torch": 20.0}),
                 CaseResult("c2", Status.OK, time_us=t2, baselines_us={"torch": 20.0}))
        gm = ((20.0 / t1) * (20.0 / t2)) ** 0.5
        evs.append(Evaluation(key=g.key, genome=dict(g), space="seedtest", status=Status.OK, cases=cases,
                              objectives={"geomean_speedup": gm}))
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"evaluations": [e.to_dict() for e in evs]}))
    cfg = make_config(search={"seed_from": str(table), "ga": {"population": 3, "offspring": 3}})
    got = [g["a"] for g in seed_genomes(cfg, space)]
    assert got == [1, 2, 0]                        # c1's and c2's fastest, then the best geomean
    cfg = make_config(search={"seed_from": str(table), "seed_champions": False, "ga": {"population": 3, "offspring": 3}})
    assert [g["a"] for g in seed_genomes(cfg, space)] == [0, 2, 3]   # metric order only


def test_suspects_of_the_evidence_are_judged_again_right_after_the_champions(tmp_path):
    """Session 28: the judge's ceiling came out 3 % below what the device streams, and the run's best child
    (verified on every case, 1.10x INT21 where the rest lost) was recorded suspect, without fitness. A run
    seeded from that record judges its suspects again (at most search.seed_suspects, best first by the metric
    they would have had), right after the champions; a genome that is not OK, or of another space, never."""
    import json

    from evo.lessons import seed_genomes
    from fitness.records import CaseResult, Evaluation, Status
    from genomes import GeneSpace
    from genomes.genes import IntRange

    space = GeneSpace("seedtest", genes=(IntRange("a", low=0, high=9),))
    rows = [(10.0, 10.0, False, "OK"), (5.0, 30.0, False, "OK"), (3.0, 3.0, True, "OK"), (2.0, 2.0, True, "OK"),
            (11.0, 11.0, False, "OK"), (1.0, 1.0, True, "WRONG_RESULT")]
    evs = []
    for a, (t1, t2, suspect, status) in enumerate(rows):
        g = space.make({"a": a})
        cases = (CaseResult("c1", Status.OK, time_us=t1, baselines_us={"torch": 20.0}),
                 CaseResult("c2", Status.OK, time_us=t2, baselines_us={"torch": 20.0}))
        evs.append(Evaluation(key=g.key, genome=dict(g), space="seedtest", status=Status(status), cases=cases,
                              objectives={"geomean_speedup": ((20.0 / t1) * (20.0 / t2)) ** 0.5}, suspect=suspect))
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"evaluations": [e.to_dict() for e in evs]}))

    def seeds(**search):
        search = {"seed_suspects": 4, **search}
        cfg = make_config(search={"seed_from": str(table), "ga": {"population": 6, "offspring": 3}, **search})
        return [g["a"] for g in seed_genomes(cfg, space)]

    assert seeds()[:5] == [1, 0, 3, 2, 4]            # c1's fastest verified, c2's; the suspects, best first; the rest
    assert seeds(seed_suspects=1)[:4] == [1, 0, 3, 4]
    assert seeds(seed_suspects=0)[:3] == [1, 0, 4]        # the default: records made before the field replay as made
    assert seeds(seed_champions=False)[:5] == [0, 3, 2, 4, 1]      # after the best verified genome
    assert seeds(seed_limit=2) == [1, 0]                           # the champions first, whatever the limit
    assert 5 not in seeds()


def test_seeds_are_judged_in_full_and_the_rest_as_usual(synthetic_space, synthetic_table):
    """Seeds go through Evaluator.evaluate_in_full (no early-stop rule), everything else through
    evaluate(); with search.seeds_in_full = false the seeds are judged like any candidate."""
    from evo.lessons import seed_genomes
    from fitness.evaluator import Evaluator

    class Spy(Evaluator):
        def __init__(self, inner):
            self.inner, self.full, self.usual = inner, [], []
            self.batch_size = 3                  # chunks mix seeds and sampled genomes

        def evaluate(self, genomes):
            self.usual.extend(g.key for g in genomes)
            return self.inner.evaluate(genomes)

        def evaluate_in_full(self, genomes):
            self.full.extend(g.key for g in genomes)
            return self.inner.evaluate(genomes)

    for in_full in (True, False):
        cfg = make_config(search={"seed_from": str(synthetic_table.source), "seed_limit": 4, "seeds_in_full": in_full,
                                  "ga": {"population": 8, "offspring": 8}}, budget={"evaluations": 24})
        seeds = seed_genomes(cfg, synthetic_space)
        spy = Spy(synthetic_table)
        store = open_store("memory://")
        store.create_run(new_run_info(cfg, "spy"))
        Run(cfg, synthetic_space, store, spy, "spy", seeds=seeds).optimize()
        records = store.records("spy")
        assert [r.key for r in records[:4]] == [g.key for g in seeds]          # order kept across the split
        assert spy.full == ([g.key for g in seeds] if in_full else [])
        assert set(spy.usual) == {r.key for r in records} - set(spy.full)
