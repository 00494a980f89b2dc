"""experiments/scripts/compare_pkg_bench.py: the row-by-row check that the exported package's
benchmark reproduces the judge's table, and the committed comparison it wrote."""

from __future__ import annotations

import importlib.util
import json

from tests.conftest import REPO

SCRIPT = REPO / "experiments" / "scripts" / "compare_pkg_bench.py"
spec = importlib.util.spec_from_file_location("compare_pkg_bench", SCRIPT)
compare_pkg_bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_pkg_bench)


def _table(rows):
    return {"cases": [{"dtype": d, "M": m, "N": n, "genome_key": "k" * 20, "evolved_us": us, "evolved_spread_us": sp}
                      for d, m, n, us, sp in rows]}


def _pkg(rows):
    return {"cases": [{"dtype": d, "M": m, "N": n, "kernel_us": us, "kernel_iqr_us": iqr} for d, m, n, us, iqr in rows]}


def test_a_row_is_reproduced_within_tolerance_or_within_the_spreads():
    table = _table([("bf16", 1, 256, 10.0, 0.5), ("bf16", 1, 512, 100.0, 1.0), ("fp32", 1, 256, 100.0, 1.0)])
    pkg = _pkg([("bf16", 1, 256, 10.8, 0.4),       # 8 % off, but within 0.5 + 0.4 us
                ("bf16", 1, 512, 102.9, 1.0),      # 2.9 % off: within 3 %
                ("fp32", 1, 256, 105.0, 1.0)])     # 5 % and 5 us off: not reproduced
    lines, misses = compare_pkg_bench.compare(table, [pkg], None, 0.03)
    assert misses == ["fp32 1x256"]
    assert sum("| yes |" in line for line in lines) == 2 and sum("**no**" in line for line in lines) == 1


def test_a_row_missing_from_a_package_run_is_not_reproduced():
    table = _table([("bf16", 1, 256, 10.0, 0.5), ("bf16", 1, 512, 20.0, 0.5)])
    _, misses = compare_pkg_bench.compare(table, [_pkg([("bf16", 1, 256, 10.0, 0.5)])], None, 0.03)
    assert misses == ["bf16 1x512"]


def test_committed_comparison_is_what_the_script_writes_from_the_committed_runs(tmp_path):
    committed = (REPO / "results" / "package_vs_judge.md").read_text()
    argv = committed.split("Command: `python3 experiments/scripts/compare_pkg_bench.py ", 1)[1].split("`", 1)[0].split()
    out = tmp_path / "again.md"
    argv = [a if not a.startswith("results/") else str(REPO / a) for a in argv]
    argv[argv.index("--out") + 1] = str(out)
    compare_pkg_bench.main(argv)
    rows = lambda text: [l for l in text.splitlines() if l.startswith("| ")]  # noqa: E731
    assert rows(out.read_text()) == rows(committed)
    # session 8: every row (session 7: the package ran bf16 32768 x 512 5 % faster than the table)
    assert "33 of 33 rows reproduce." in committed
    assert len(json.loads((REPO / "results" / "rmsnorm_fwd_h200.json").read_text())["cases"]) == 33


def test_the_package_diagnosis_script_samples_clocks_without_failing_where_there_is_no_gpu():
    spec = importlib.util.spec_from_file_location("diagnose_pkg_case",
                                                  REPO / "experiments" / "scripts" / "diagnose_pkg_case.py")
    diag = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(diag)
    sampler = diag.ClockSampler(period_s=0.01)
    with sampler:                     # no nvidia-smi here: readings are skipped, nothing raises
        pass
    sampler.rows = [[1980.0, 3201.0, 650.0, 60.0], [1755.0, 3201.0, 700.0, 64.0], [1830.0, 3201.0, 690.0, 62.0]]
    s = sampler.summary()
    assert s["clocks.sm_median"] == 1830.0 and s["clocks.sm_min"] == 1755.0
    assert s["power.draw_median"] == 690.0 and s["readings"] == 3
