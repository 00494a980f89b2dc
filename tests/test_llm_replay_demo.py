"""The README's end-to-end LLM run on a recorded transcript (answers written for the tests), `evo
transcript`, and `evo operators-study`, through the CLI, with no server and no GPU."""

from __future__ import annotations

import json
import random
from pathlib import Path

from evo.cli import main
from evo.store import open_store
from fitness.records import Evaluation
from fitness.replay import ReplayEvaluator
from genomes import load_space

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "experiments/synthetic_llm_replay.toml"
TRANSCRIPT = ROOT / "tests/data/llm_transcript_synthetic.json"


def test_transcript_is_labelled_as_written_for_the_tests():
    data = json.loads(TRANSCRIPT.read_text())
    assert "WRITTEN FOR THE TESTS" in data["note"] and data["exchanges"]
    assert all("written for the tests" in e["endpoint"] for e in data["exchanges"])


def test_replayed_llm_run_end_to_end(tmp_path, capsys):
    assert main(["run", str(CONFIG), "--runs-dir", str(tmp_path), "--quiet", "--no-report"]) == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    store = open_store(f"sqlite:///{run_dir / 'store.sqlite'}")
    (info,) = store.list_runs()
    records = store.records(info.run_id)
    exchanges = store.events(info.run_id, "llm")
    assert len(records) == 64 and exchanges
    assert all(e.get("replayed") and e["status"] == "ok" for e in exchanges)
    assert any(r.operator == "llm:genes" for r in records) and any(r.operator.startswith("guided:") for r in records)
    outcomes = {p["outcome"] for p in store.events(info.run_id, "proposal")}
    assert {"valid", "invalid", "repaired"} <= outcomes
    store.close()
    # the run's exchanges written back out replay it again, answer for answer
    out = tmp_path / "again.json"
    assert main(["transcript", str(run_dir), "--out", str(out)]) == 0
    again = json.loads(out.read_text())["exchanges"]
    assert [e["answer"] for e in again] == [e["answer"] for e in exchanges]
    assert main(["report", str(run_dir), "--out", str(tmp_path / "rep")]) == 0
    assert "## Yield per operator" in (tmp_path / "rep" / "report.md").read_text()


def test_operators_study_through_the_cli(tmp_path):
    """On a recording made from the synthetic table (not real verdicts: a fixture for the command)."""
    space = load_space("synthetic")
    table = ReplayEvaluator.from_file(ROOT / "tests/data/synthetic_table.csv", space).evaluations()
    picked: list[Evaluation] = random.Random(0).sample(table, 300)
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps({"run_id": "fixture", "family": "synthetic",
                               "config": {"experiment": {"family": "synthetic"}, "objective": {"metric": "geomean_speedup"}},
                               "evaluations": [e.to_dict() for e in picked]}))
    assert main(["operators-study", str(rec), "--out", str(tmp_path / "ops"), "--seeds", "10", "--children", "20"]) == 0
    result = json.loads((tmp_path / "ops.json").read_text())
    for key in ("guided_improvement_rate", "mutation_improvement_rate", "seeds", "guided_new_bests_per_100",
                "mutation_new_bests_per_100", "by_max_distance", "per_seed"):
        assert key in result
    assert len(result["seeds"]) == 10 and result["recorded_genomes"] == 300
    md = (tmp_path / "ops.md").read_text()
    assert "Not a whole dense slice" in md and "GA's path" in md and (tmp_path / "ops.png").is_file()
