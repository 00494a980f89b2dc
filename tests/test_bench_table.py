"""experiments/scripts/bench_rmsnorm.py: how a row of the final table is formed from the main pass
and QuACK's autotuned pass (every ratio from two times measured in one process)."""

from __future__ import annotations

import importlib.util

import pytest

from fitness.records import CaseResult
from tests.conftest import REPO

SCRIPT = REPO / "experiments" / "scripts" / "bench_rmsnorm.py"
spec = importlib.util.spec_from_file_location("bench_rmsnorm", SCRIPT)
bench_rmsnorm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_rmsnorm)


def _case(evolved, **baselines):
    return CaseResult(case="bf16/32768x4096", params={"M": 32768, "N": 4096, "dtype": "bf16"},
                      time_us=evolved, spread_us=0.5, tbps=3.9, baselines_us=baselines)


def test_without_a_tuned_pass_quack_is_its_plain_path():
    row = bench_rmsnorm.table_row("k", _case(100.0, torch=120.0, quack=95.0))
    assert row["speedup_vs_quack"] == pytest.approx(0.95)
    assert row["quack_us"] == pytest.approx(95.0) and row["quack_tuned_us"] is None
    assert row["speedup_vs_torch"] == pytest.approx(1.2) and row["speedup_vs_quack_tuned"] is None


def test_the_tuned_ratio_comes_from_its_own_pass_and_the_faster_quack_path_is_the_headline():
    # main pass: evolved 100, plain 98 (0.98); tuned pass: evolved 102, tuned 96.9 (0.95): tuned wins
    tuned = {"evolved_us": 102.0, "quack_us": 99.0, "quack_tuned_us": 96.9, "notes": ""}
    row = bench_rmsnorm.table_row("k", _case(100.0, torch=120.0, quack=98.0), tuned)
    assert row["speedup_vs_quack_tuned"] == pytest.approx(0.95)
    assert row["speedup_vs_quack"] == pytest.approx(0.95)
    assert row["quack_us"] == pytest.approx(95.0)         # on the main pass's scale
    assert row["quack_plain_us"] == 98.0 and row["quack_tuned_us"] == 96.9 and row["tuned_pass"] is tuned


def test_a_tuned_path_that_failed_leaves_the_plain_figure():
    tuned = {"evolved_us": 101.0, "quack_us": 99.0, "quack_tuned_us": None, "notes": "rmsnorm_fwd_tuned failed"}
    row = bench_rmsnorm.table_row("k", _case(100.0, quack=98.0), tuned)
    assert row["speedup_vs_quack"] == pytest.approx(0.98) and row["speedup_vs_quack_tuned"] is None


def _table_row(dtype, n, key, evolved, plain, tuned_pass=None):
    return {"dtype": dtype, "M": 32768, "N": n, "genome_key": key, "evolved_us": evolved, "evolved_tbps": 3.9,
            "quack_plain_us": plain, "quack_us": plain, "quack_tuned_us": None, "torch_us": 2 * evolved,
            "torch_compile_us": None, "liger_us": None, "speedup_vs_torch": 2.0, "speedup_vs_quack": plain / evolved,
            "speedup_vs_quack_tuned": None, "tuned_pass": tuned_pass}


def test_a_later_tuned_pass_joins_the_table_with_its_own_ratio():
    table = {"gpu": "H200", "command": "main", "versions": {}, "tuned_cases": ["bf16/32768x256"],
             "cases": [_table_row("bf16", 256, "a", 10.0, 9.8, {"evolved_us": 10.0, "quack_tuned_us": 9.5}),
                       _table_row("fp16", 256, "b", 10.0, 10.2), _table_row("fp32", 256, "c", 20.0, 20.0)]}
    later = {"command": "tuned fp16", "cases": [
        _table_row("fp16", 256, "b", 10.4, 10.3, {"evolved_us": 10.4, "quack_us": 10.3, "quack_tuned_us": 9.88}),
        _table_row("bf16", 256, "a", 10.0, 9.8, {"evolved_us": 10.0, "quack_tuned_us": 1.0})]}   # already has one
    out = bench_rmsnorm.merge_tuned(table, [later])
    bf16, fp16, fp32 = out["cases"]
    assert fp16["speedup_vs_quack_tuned"] == pytest.approx(0.95) and fp16["speedup_vs_quack"] == pytest.approx(0.95)
    assert fp16["quack_us"] == pytest.approx(9.5) and fp16["tuned_pass_command"] == "tuned fp16"
    assert bf16["tuned_pass"]["quack_tuned_us"] == 9.5                 # its own pass is kept
    assert fp32["speedup_vs_quack"] == pytest.approx(1.0) and not fp32.get("tuned_pass")
    assert out["cases_vs_quack_tuned"] == 1 and out["cases_vs_quack"] == 3
    assert out["tuned_cases"] == ["bf16/32768x256", "fp16/32768x256"] and out["tuned_commands"] == ["tuned fp16"]
    assert "QuACK autotuned pass: `tuned fp16`" in bench_rmsnorm.markdown(out)


def test_a_tuned_pass_of_another_dispatch_table_is_refused():
    table = {"cases": [_table_row("fp16", 256, "b", 10.0, 10.2)]}
    other = {"cases": [_table_row("fp16", 256, "zz", 10.0, 10.2, {"evolved_us": 10.0, "quack_tuned_us": 9.0})]}
    with pytest.raises(SystemExit, match="not the same dispatch table"):
        bench_rmsnorm.merge_tuned(table, [other])


def test_the_committed_table_is_the_merge_of_the_recorded_passes(tmp_path):
    """results/rmsnorm_fwd_h200.json is what its Notes' merge command makes of session 9's raw
    passes (no GPU): the figures in the docs come from the device files, not from editing."""
    import json
    import subprocess
    import sys

    res = subprocess.run([sys.executable, str(SCRIPT), "merge", "--table", str(REPO / "results/archive/session9/main_pass.json"),
                          "--tuned", str(REPO / "results/archive/session9/tuned_fp16_fp32.json"),
                          "--out", str(tmp_path / "t")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    made = json.loads((tmp_path / "t.json").read_text())
    committed = json.loads((REPO / "results" / "rmsnorm_fwd_h200.json").read_text())
    assert made == committed
    assert round(committed["geomean_speedup_vs_quack"], 3) == 1.008 and len(committed["cases"]) == 33
    table_md = (REPO / "results" / "rmsnorm_fwd_h200.md").read_text()
    assert table_md.startswith((tmp_path / "t.md").read_text().rstrip("\n"))   # + the handwritten Notes


def test_the_copy_roofline_is_a_column_only_where_it_was_timed():
    """`copy` (x copied into y, kernels/rmsnorm/operation.py CopyRoofline) is reported as the share
    of the case's memory roofline the evolved kernel reaches; tables without it keep their form."""
    row = bench_rmsnorm.table_row("k", _case(100.0, torch=120.0, quack=98.0, copy=90.0))
    assert row["copy_us"] == 90.0 and row["speedup_vs_copy"] == pytest.approx(0.9)
    plain = bench_rmsnorm.table_row("k2", _case(100.0, torch=120.0, quack=98.0))
    assert "copy_us" not in plain and plain["speedup_vs_copy"] is None
    with_copy = bench_rmsnorm.summarize({"gpu": "H200", "command": "c", "versions": {}, "cases": [dict(row)]})
    assert with_copy["geomean_speedup_vs_copy"] == pytest.approx(0.9) and with_copy["cases_vs_copy"] == 1
    text = bench_rmsnorm.markdown(with_copy)
    assert "| copy us | of copy |" in text and "| 90.0 | 0.900 |" in text and "| copy | 0.900 |" in text
    without = bench_rmsnorm.summarize({"gpu": "H200", "command": "c", "versions": {}, "cases": [dict(plain)]})
    assert "geomean_speedup_vs_copy" not in without and "copy" not in bench_rmsnorm.markdown(without)


def test_the_copy_roofline_is_never_a_speedup_baseline():
    from fitness.family import load_family
    from fitness.gpu_evaluator import GPUEvaluator
    from genomes.rmsnorm import SPACE

    family = load_family("rmsnorm")
    copy = next(b for b in family.baselines() if b.name == "copy")
    assert copy.objective is False and all(b.objective for b in family.baselines() if b.name != "copy")
    for kw in ({"baseline": "copy"}, {"metric": "geomean_speedup@copy"}):
        with pytest.raises(ValueError, match="'copy' of family 'rmsnorm' is a reference"):
            GPUEvaluator("rmsnorm", SPACE, **kw)


def test_the_table_says_which_tuned_figures_came_from_quacks_autotune_cache(tmp_path, monkeypatch):
    """QuACK keeps each shape's autotuning in QUACK_CACHE_DIR/<hash>/rmsnorm_fwd_tuned.autotune.json
    and does not autotune a shape it finds there; the device scripts carry that cache between
    sessions, so the table counts the entries before and after the pass and says so."""
    assert bench_rmsnorm.quack_autotune_entries(str(tmp_path / "none")) == 0
    for h in ("AAAA", "BBBB"):
        (tmp_path / h).mkdir()
        (tmp_path / h / "rmsnorm_fwd_tuned.autotune.json").write_text("{}")
    (tmp_path / "AAAA" / "kernel.o").write_text("")
    monkeypatch.setenv("QUACK_CACHE_DIR", str(tmp_path))
    assert bench_rmsnorm.quack_autotune_entries() == 2
    table = {"gpu": "H200", "command": "main", "versions": {}, "cases": [_table_row("fp16", 256, "b", 10.0, 10.2)],
             "quack_autotune_cache": {"dir": str(tmp_path), "entries_at_start": 0, "entries_now": 8}}
    later = {"command": "tuned fp16", "quack_autotune_cache": {"dir": "/tmp/q", "entries_at_start": 16, "entries_now": 16},
             "cases": [_table_row("fp16", 256, "b", 10.4, 10.3, {"evolved_us": 10.4, "quack_tuned_us": 9.88})]}
    text = bench_rmsnorm.markdown(bench_rmsnorm.merge_tuned(table, [later]))
    assert "QuACK's autotune cache (this pass): 0 shapes on disk at the start, 8 at the end" in text
    assert "QuACK's autotune cache (the merged tuned pass): 16 shapes on disk at the start, 16 at the end" in text
    assert "autotune cache" not in bench_rmsnorm.markdown(bench_rmsnorm.summarize(
        {"gpu": "H200", "command": "c", "versions": {}, "cases": [_table_row("fp16", 256, "b", 10.0, 10.2)]}))


def test_the_notes_copy_bound_is_computed_from_the_table():
    """The table's notes bound the speedup over QuACK by the copy roofline timed beside it: a kernel
    as fast as `y.copy_(x)` on every case would be geomean(QuACK us / copy us) x QuACK. The figure
    quoted there (and in the README) is that geomean of the committed table."""
    import json
    import math

    table = json.loads((REPO / "results" / "rmsnorm_fwd_h200.json").read_text())
    ratios = [c["quack_us"] / c["copy_us"] for c in table["cases"]]
    bound = math.exp(sum(map(math.log, ratios)) / len(ratios))
    notes = (REPO / "results" / "rmsnorm_fwd_h200.md").read_text().split("## Notes", 1)[1]
    assert f"**{bound:.3f}x" in notes and f"{table['geomean_speedup_vs_copy']:.3f} of it" in notes
    assert f"only {bound:.2f}x QuACK" in (REPO / "README.md").read_text()
