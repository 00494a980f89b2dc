"""The dispatch key contract (fitness.family.DispatchKey): how a family's table of winners is keyed,
computed from recorded case parameters, written and read back as JSON fields."""

from __future__ import annotations

import pytest

from fitness.family import NO_DISPATCH_KEY, Case, DispatchKey, KernelFamily, KeyField, KeyPoint, load_family

KEY = DispatchKey(exact=(KeyField("dtype"), KeyField("layout", "memory layout")), ordered=KeyField("T"),
                  shape=("B", "T"))


def test_point_reads_the_fields_and_round_trips_through_json():
    params = {"B": 2, "T": "8192", "dtype": "bf16", "layout": "mixed", "other": 1.5}
    p = KEY.point(Case("c", params))
    assert p == KeyPoint(("bf16", "mixed"), 8192) and KEY.point(params) == p
    assert KEY.to_json(p) == {"dtype": "bf16", "layout": "mixed", "T": 8192}
    assert KEY.point(KEY.to_json(p)) == p
    assert KEY.describe(p) == "bf16 mixed T=8192" and KEY.slug(p) == "bf16/mixed/8192"
    assert KEY.columns == ("B", "T", "dtype", "layout") and KEY.range_names == ("t_min", "t_max")
    assert KEY.shape_of(params) == "2 x 8192" and KEY.shape_title == "B x T"
    assert [f.title for f in KEY.fields] == ["dtype", "memory layout", "T"]


def test_points_order_by_group_then_position():
    pts = [KeyPoint(("fp16",), 1), KeyPoint(("bf16",), 4096), KeyPoint(("bf16",), 256)]
    assert sorted(pts) == [KeyPoint(("bf16",), 256), KeyPoint(("bf16",), 4096), KeyPoint(("fp16",), 1)]


def test_a_missing_field_is_one_line_naming_it():
    with pytest.raises(ValueError, match=r"lack the dispatch key field\(s\) \['layout'\]"):
        KEY.point({"B": 1, "T": 4, "dtype": "bf16"})


@pytest.mark.parametrize("bad", [dict(exact=(KeyField("a"),), ordered=KeyField("a")),
                                 dict(exact=(KeyField(""),)), dict(shape=("",))])
def test_bad_keys_are_refused(bad):
    with pytest.raises(ValueError, match="DispatchKey"):
        DispatchKey(**bad)


def test_no_key_is_one_group_without_ranges():
    p = NO_DISPATCH_KEY.point({"anything": 1})
    assert p == KeyPoint((), 0) and NO_DISPATCH_KEY.range_names is None
    assert NO_DISPATCH_KEY.to_json(p) == {} and NO_DISPATCH_KEY.describe(p) == "all cases"
    assert KernelFamily.dispatch_key(None) is NO_DISPATCH_KEY       # the contract's default


def test_rmsnorm_keys_every_case_by_dtype_and_row_width():
    fam = load_family("rmsnorm")
    key = fam.dispatch_key()
    assert key.to_json(KeyPoint(("bf16",), 4096)) == {"dtype": "bf16", "N": 4096}
    assert key.range_names == ("n_min", "n_max") and key.columns == ("M", "N", "dtype")
    for c in fam.benchmark_cases("all") + fam.check_cases():
        p = key.point(c)
        assert p == KeyPoint((c.params["dtype"],), c.params["N"])
    assert fam.export_groups() == [("bf16",), ("fp16",), ("fp32",)]
    assert fam.export_settings() == {"weight_dtype": "fp32"}


def test_a_candidate_is_checked_on_the_groups_its_benchmark_credits():
    """fitness.family.credited_check_cases: a bf16-only matrix (the dense slice of issue 19) checks
    every bf16 check case and no other dtype's; a matrix of every dtype checks every case; a key
    without exact fields, or a check case without them, keeps everything."""
    from fitness.family import Case, credited_check_cases

    fam = load_family("rmsnorm")
    key, checks = fam.dispatch_key(), fam.check_cases()
    bf16 = credited_check_cases(key, fam.benchmark_cases("slice:bf16"), checks)
    assert bf16 and {c.params["dtype"] for c in bf16} == {"bf16"}
    assert len(bf16) == sum(c.params["dtype"] == "bf16" for c in checks)
    assert credited_check_cases(key, fam.benchmark_cases("quack:bf16,fp16,fp32"), checks) == tuple(checks)
    assert credited_check_cases(NO_DISPATCH_KEY, fam.benchmark_cases("slice:bf16"), checks) == tuple(checks)
    odd = Case("no-dtype", {"M": 1, "N": 8})
    assert odd in credited_check_cases(key, fam.benchmark_cases("slice:bf16"), [*checks, odd])


def test_the_judge_checks_only_the_credited_groups():
    from fitness.gpu_evaluator import GPUEvaluator
    from genomes import load_space

    from types import SimpleNamespace

    ev = GPUEvaluator("rmsnorm", load_space("rmsnorm", "v6"), matrix="slice:bf16", pool=SimpleNamespace(size=1))
    assert {c.params["dtype"] for c in ev.settings.check_cases} == {"bf16"}
