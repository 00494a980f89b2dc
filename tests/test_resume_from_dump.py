"""`evo resume DUMP`: a run dumped on a machine that keeps nothing between sessions (the H200 lease)
is restored into a run directory here and goes on as if never interrupted: the same records in
the same order as an uninterrupted run, none judged twice, relative paths of its config resolved
against --config-dir, and a second resume of the same dump reusing the restored directory."""

from __future__ import annotations

import json
import random

from evo.cli import main
from evo.config import from_dict
from evo.run import Run, new_run_info
from evo.rundir import open_run_dir
from evo.session import dump_run
from evo.store import open_store
from tests.conftest import TABLE

def config(evaluations: int, seeds: str = ""):
    data = {"experiment": {"name": "moved", "family": "synthetic", "seed": 5},
            "search": {"ga": {"population": 8, "offspring": 8}, "optuna": {"enabled": False},
                       **({"seed_genomes": seeds} if seeds else {})},
            "budget": {"evaluations": evaluations},
            "evaluator": {"kind": "replay", "replay": str(TABLE)},
            "output": {"progress": False, "report": False}}
    return data


def _run(data: dict, store_url: str, run_id: str, stop_after: int | None, source: str, space, table):
    """The run `data` describes, recorded under run_id; stopped after `stop_after` evaluations
    (the store keeps the full budget: an interrupted run) when given."""
    from evo.lessons import seed_genomes

    cfg = from_dict(data, source=source)
    with open_store(store_url) as store:
        store.create_run(new_run_info(cfg, run_id))
        if stop_after is not None:
            cfg = cfg.with_overrides({"budget.evaluations": stop_after})
        Run(cfg, space, store, table, run_id, seeds=seed_genomes(cfg, space)).optimize()
        return [r.key for r in store.records(run_id)]


def test_a_dumped_run_resumes_elsewhere_to_the_uninterrupted_records(tmp_path, synthetic_space, synthetic_table):
    host_a = tmp_path / "a"
    (host_a / "exp").mkdir(parents=True)
    rng = random.Random(4)
    seeds = [synthetic_space.sample(rng).as_dict() for _ in range(2)]
    (host_a / "exp" / "seeds.json").write_text(json.dumps({"genomes": seeds}))
    source = str(host_a / "exp" / "cfg.toml")
    data = config(40, seeds="seeds.json")                       # relative to the config's folder
    straight = _run(data, f"sqlite:///{tmp_path / 'straight.db'}", "straight", None, source, synthetic_space,
                    synthetic_table)
    part = _run(data, f"sqlite:///{tmp_path / 'a.db'}", "moved-1", 16, source, synthetic_space, synthetic_table)
    assert len(part) == 16 and len(straight) == 40 and part == straight[:16]
    dump = tmp_path / "moved.json.gz"
    dump_run(f"sqlite:///{tmp_path / 'a.db'}#moved-1", dump)

    runs = tmp_path / "b" / "runs"
    missing = main(["resume", str(dump), "--runs-dir", str(runs), "--config-dir", str(tmp_path / "b")])
    assert missing == 2 and not (runs / "moved-1").exists()       # seeds.json is not in b/: one line, nothing made
    assert main(["resume", str(dump), "--runs-dir", str(runs), "--config-dir", str(host_a / "exp"), "--quiet"]) == 0
    rd = open_run_dir(runs / "moved-1")
    with open_store(rd.store_url) as store:
        resumed = [r.key for r in store.records("moved-1")]
        assert store.get_run("moved-1").state == "finished"
    assert resumed == straight                                   # the same search, nothing judged twice
    assert json.loads((runs / "moved-1" / "run.json").read_text())["restored_from"] == str(dump.resolve())
    assert main(["resume", str(dump), "--runs-dir", str(runs), "--config-dir", str(host_a / "exp"), "--quiet"]) == 0
    with open_store(rd.store_url) as store:
        assert [r.key for r in store.records("moved-1")] == straight   # the restored directory reused


def test_a_file_that_is_not_a_dump_is_one_line(tmp_path, capsys):
    bad = tmp_path / "notes.json"
    bad.write_text("{}")
    assert main(["resume", str(bad), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "notes.json" in err[0]
