"""evo.analysis / evo.plots / evo.report: a run as DataFrames with the stored numbers, its figures
and its Markdown report, from an `evo dump` file, a run directory or a store URL."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from matplotlib.figure import Figure

from evo import plots
from evo.analysis import RunFrames, load_run
from evo.config import load_config
from evo.report import write_report
from evo.rundir import create_run_dir
from evo.session import execute
from evo.store import open_store
from fitness.records import Evaluation
from tests.conftest import REPO, make_config, subprocess_env

DUMP = REPO / "results" / "rmsnorm_fwd_h200_run.json"
RMSNORM_CONFIG = REPO / "experiments" / "rmsnorm_fwd_h200.toml"


def same(a, b) -> bool:
    """Equal, with None (not recorded) stored as NaN in the frames."""
    if b is None:
        return isinstance(a, float) and math.isnan(a)
    return a == b


@pytest.fixture(scope="module")
def dump_frames() -> RunFrames:
    return load_run(DUMP)


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    """A real run directory (SQLite store) of the synthetic replay experiment, GA then Optuna."""
    cfg = make_config(budget={"evaluations": 72}, search={"ga": {"population": 12, "offspring": 12},
                                                          "optuna": {"enabled": True, "trials": 12}})
    rd = create_run_dir(cfg, tmp_path_factory.mktemp("runs"))
    execute(rd, quiet=True)
    return rd


@pytest.fixture(scope="module")
def rmsnorm_run(tmp_path_factory):
    """A run directory of the RMSNorm config answered from the H200 recording: real cases."""
    cfg = load_config(RMSNORM_CONFIG).with_overrides({"evaluator.kind": "replay", "evaluator.replay": str(DUMP),
                                                      "output.progress": False})
    rd = create_run_dir(cfg, tmp_path_factory.mktemp("runs"))
    execute(rd, quiet=True)
    return rd


def stored(rd):
    with open_store(rd.store_url) as store:
        return store.records(rd.run_id), store.get_run(rd.run_id)


def check_against_records(frames: RunFrames, records, metric: str) -> None:
    ev = frames.evaluations
    assert len(ev) == len(records)
    for row, rec in zip(ev.itertuples(index=False), records):
        assert (row.seq, row.key, row.generation, row.stage, row.operator, row.parents, row.status) == \
            (rec.seq, rec.key, rec.generation, rec.stage, rec.operator, tuple(rec.parents), rec.status.value)
        assert same(row.fitness, rec.fitness(metric))
        assert row.started_at == rec.evaluation.started_at and row.finished_at == rec.evaluation.finished_at
    for name in {k for r in records for k in r.evaluation.objectives}:
        assert all(same(v, r.evaluation.objectives.get(name)) for v, r in zip(ev[f"obj.{name}"], records))
    for name in {k for r in records for k in r.evaluation.genome}:
        # a genome recorded before a gene existed (a carried seed) holds the gene's legacy value
        legacy = {"weight_batch": 1, "grid_fit": False}.get(name)
        assert list(ev[f"gene.{name}"]) == [r.evaluation.genome.get(name, legacy) for r in records]
    stored_cases = [(r.key, c) for r in records for c in r.evaluation.cases]
    assert len(frames.cases) == len(stored_cases)
    for row, (key, c) in zip(frames.cases.to_dict("records"), stored_cases):
        assert (row["key"], row["case"], row["status"]) == (key, c.case, c.status.value)
        assert same(row["time_us"], c.time_us) and same(row["tbps"], c.tbps) and same(row["spread_us"], c.spread_us)
        assert (row["M"], row["N"], row["dtype"]) == (c.params.get("M"), c.params.get("N"), c.params.get("dtype"))
        for b, base in c.baselines_us.items():
            assert row[f"base.{b}_us"] == base and row[f"speedup.{b}"] == c.speedup(b)


# -- loading ------------------------------------------------------------------------------------
def test_dump_frames_hold_the_stored_numbers(dump_frames):
    data = json.loads(DUMP.read_text())
    evs = [Evaluation.from_dict(e) for e in data["evaluations"]]
    ev = dump_frames.evaluations
    assert len(ev) == len(evs) == 128
    assert dump_frames.run["metric"] == data["config"]["objective"]["metric"] == "geomean_speedup"
    assert dump_frames.run["baseline"] == "torch" and dump_frames.run["run_id"] == data["run_id"]
    for row, e in zip(ev.itertuples(index=False), evs):
        assert row.key == e.key and same(row.fitness, e.fitness("geomean_speedup"))
        assert row.gpu_seconds == float(e.artifacts["gpu_seconds"])
    lineage = {x["key"]: x for x in data["lineage"]}
    assert list(ev["seq"]) == [lineage[k]["seq"] for k in ev["key"]]
    assert list(ev["operator"]) == [lineage[k]["operator"] for k in ev["key"]]
    from genomes.rmsnorm import SPACES
    SPACE = SPACES[data["config"]["experiment"].get("space_version") or "v1"]   # the run's space

    assert dump_frames.genes == list(SPACE.names)
    first = evs[0].cases[0]
    row = dump_frames.cases.iloc[0]
    assert row["time_us"] == first.time_us and row["base.torch_us"] == first.baselines_us["torch"]
    assert len(dump_frames.cases) == sum(len(e.cases) for e in evs)
    assert dump_frames.best()["key"] == max((e for e in evs if e.fitness("geomean_speedup") is not None),
                                            key=lambda e: e.fitness("geomean_speedup")).key


def test_synthetic_run_dir_frames_equal_the_store(synthetic_run):
    records, info = stored(synthetic_run)
    frames = load_run(synthetic_run.path)
    assert frames.run["run_id"] == synthetic_run.run_id and frames.run["seed"] == info.seed
    assert frames.run["stop_reason"] == info.notes.get("stop_reason")
    check_against_records(frames, records, synthetic_run.config.objective.metric)
    assert {"stage"} <= set(frames.evaluations.columns) and {"ga", "optuna"} <= set(frames.evaluations["stage"])
    assert frames.cases.empty and "time_us" in frames.cases.columns


def test_rmsnorm_run_dir_frames_equal_the_store(rmsnorm_run):
    records, _ = stored(rmsnorm_run)
    frames = load_run(rmsnorm_run.path)
    assert len(frames.evaluations) == len(records) == 128
    check_against_records(frames, records, "geomean_speedup")
    assert frames.evaluations["gpu_seconds"].notna().all()


def test_store_url_needs_a_run_id_when_it_holds_several(synthetic_run, tmp_path):
    records, _ = stored(synthetic_run)
    assert len(load_run(synthetic_run.store_url).evaluations) == len(records)   # one run: no id needed
    from evo.run import new_run_info

    with open_store(synthetic_run.store_url) as store:
        store.create_run(new_run_info(synthetic_run.config, "other"))
    with pytest.raises(ValueError, match="run_id"):
        load_run(synthetic_run.store_url)
    assert len(load_run(synthetic_run.store_url, run_id=synthetic_run.run_id).evaluations) == len(records)
    assert len(load_run(f"{synthetic_run.store_url}#other").evaluations) == 0
    with pytest.raises(ValueError):
        load_run(tmp_path / "missing")


def test_load_run_is_exported():
    import evo

    assert evo.load_run is load_run


# -- plots --------------------------------------------------------------------------------------
def _data_count(fig: Figure) -> int:
    return sum(len(ax.lines) + len(ax.patches) for ax in fig.axes)


@pytest.mark.parametrize("name", list(plots.ALL))
def test_each_plot_returns_a_figure_with_data(dump_frames, name):
    fig = plots.ALL[name](dump_frames)
    assert isinstance(fig, Figure) and fig.axes
    assert _data_count(fig) > 0


def test_plot_details(dump_frames):
    best_cases = dump_frames.best_cases()
    fig = plots.speedup_per_case(dump_frames)
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == list(best_cases["speedup.torch"])
    fig = plots.bandwidth(dump_frames)
    ceiling = float(dump_frames.best()["copy_ceiling_tbps"])
    assert any(list(line.get_ydata()) == [ceiling, ceiling] for line in fig.axes[0].lines)
    fig = plots.gene_effects(dump_frames)
    assert len(fig.axes) == len(dump_frames.genes)
    fig = plots.best_so_far(dump_frames)
    assert len(fig.axes) == 2 and all(ax.lines for ax in fig.axes)


def test_plots_draw_into_given_axes_and_leave_pyplot_alone(dump_frames, synthetic_run):
    before = set(sys.modules.get("matplotlib.pyplot").get_fignums()) if "matplotlib.pyplot" in sys.modules else set()
    fig = Figure()
    ax = fig.add_subplot()
    assert plots.fitness_curve(dump_frames, ax=ax) is fig
    frames = load_run(synthetic_run.path)          # no cases: the case plots say so, never raise
    for fn in plots.ALL.values():
        assert isinstance(fn(frames), Figure)
    after = set(sys.modules.get("matplotlib.pyplot").get_fignums()) if "matplotlib.pyplot" in sys.modules else set()
    assert after == before


# -- report -------------------------------------------------------------------------------------
def test_write_report(dump_frames, tmp_path):
    """The report's dispatch section is the committed table: the run's fastest per width, or, where
    the table names the playoff it was chosen with, that playoff's winners (results/playoff.json)."""
    from evo.playoff import read_winners

    dispatch = json.loads((REPO / "results" / "rmsnorm_dispatch.json").read_text())
    playoff = REPO / "results" / "playoff.json" if dispatch.get("playoff") else None
    path = write_report(dump_frames, tmp_path / "rep", winners=read_winners(playoff, dump_frames.keys) if playoff else None,
                        playoff=playoff)
    text = path.read_text()
    assert path.name == "report.md"
    best = dump_frames.best()["key"]
    assert best in text and dump_frames.run["run_id"] in text and "NVIDIA H200" in text
    assert "| bf16/32768x256 |" in text and "speedup vs torch" in text
    section = text.split("## Dispatch table", 1)[1].split("\n## ", 1)[0]
    table_keys = [line.split("`")[1] for line in section.splitlines() if line.startswith("| ") and "`" in line
                  and line.count("|") == 6]
    assert table_keys == [e["key"] for e in dispatch["entries"]]
    assert not playoff or "the playoff `playoff.json` contested" in section
    assert "## One-gene differences" in text and "| lean_groups | False | True | 3 | 0.9913 | 0 | 2 |" in text
    assert "### By resident warps" in text and "| lean_groups | False | True | same | 99 | 1.001 | 35 | 40 |" in text
    assert "### Its cases: resident CTAs and warps per SM" in text and "| fp32/8192x262144 | `388b6322` | 4507 | 3.812 | 3 | 24 | shared memory |" in text
    for name in plots.ALL:
        png = tmp_path / "rep" / f"{name}.png"
        assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG" and f"]({name}.png)" in text


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "evo.cli", *map(str, args)], capture_output=True, text=True,
                          env=subprocess_env(), cwd=REPO, timeout=120)


def test_cli_report_on_the_dump(tmp_path):
    p = run_cli("report", DUMP, "--out", tmp_path / "r")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "r" / "report.md").is_file() and (tmp_path / "r" / "fitness_curve.png").is_file()


def test_cli_report_on_a_run_dir(rmsnorm_run, tmp_path):
    p = run_cli("report", rmsnorm_run.path, "--out", tmp_path / "r")
    assert p.returncode == 0, p.stderr
    text = (tmp_path / "r" / "report.md").read_text()
    assert rmsnorm_run.run_id in text and "stop reason" in text


def test_cli_report_bad_input_is_one_line(tmp_path):
    p = run_cli("report", tmp_path / "nothing", "--out", tmp_path / "r")
    assert p.returncode == 2 and p.stderr.startswith("error:") and "Traceback" not in p.stderr


# -- one-gene differences ------------------------------------------------------------------------
def test_one_gene_pairs_are_exactly_the_genomes_one_gene_apart(dump_frames):
    from evo.analysis import one_gene_pairs

    pairs = one_gene_pairs(dump_frames)
    ev = dump_frames.evaluations.set_index("key")
    genes = dump_frames.genes
    ok = [k for k, s, sus in zip(dump_frames.evaluations["key"], dump_frames.evaluations["status"],
                                 dump_frames.evaluations["suspect"]) if s == "OK" and not sus]
    brute = set()
    for i, a in enumerate(ok):
        for b in ok[i + 1:]:
            diff = [g for g in genes if ev.loc[a, f"gene.{g}"] != ev.loc[b, f"gene.{g}"]]
            if len(diff) == 1:
                brute.add(frozenset((a, b)))
    assert {frozenset((a, b)) for a, b in zip(pairs["key_a"], pairs["key_b"])} == brute and len(brute) == 36
    # the ratio is b's speedup over a's, per case, averaged geometrically
    row = pairs[(pairs["key_a"] == "54748e1b4717ec5881d8") & (pairs["key_b"] == "9ec2aa22eae58856bd79")].iloc[0]
    cases = dump_frames.cases.set_index(["key", "case"])["speedup.torch"]
    r = cases.loc["9ec2aa22eae58856bd79", "fp16/16384x131072"] / cases.loc["54748e1b4717ec5881d8", "fp16/16384x131072"]
    assert (row["gene"], row["value_a"], row["value_b"], row["cases"]) == ("lean_groups", False, True, 33)
    assert row["best_case"] == "fp16/16384x131072" and row["max_ratio"] == pytest.approx(r)
    assert row["min_ratio"] <= row["ratio"] <= row["max_ratio"]


def test_one_gene_summary_keeps_zero_apart_from_false():
    import pandas as pd

    from evo.analysis import PAIR_COLUMNS, one_gene_summary

    rows = [("maxrreg", 0, 128, "a", "b", 3, 1.02, 1.0, 1.1, "c"), ("grid_fit", False, True, "c", "d", 3, 0.9, 0.8, 1.0, "c"),
            ("maxrreg", 0, 128, "e", "f", 3, 1.00, 0.9, 1.1, "c")]
    s = one_gene_summary(pd.DataFrame(rows, columns=PAIR_COLUMNS))
    assert [(r.gene, r.value_a, r.pairs, r.better, r.worse) for r in s.itertuples()] == \
        [("grid_fit", False, 1, 0, 1), ("maxrreg", 0, 2, 1, 0)]
    assert type(s.iloc[1]["value_a"]) is not bool
