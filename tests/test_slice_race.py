"""The slice tooling on the SYNTHETIC slice: restricted space, per-class view, Kernel Tuner's cache
(read back by Kernel Tuner's own simulation mode), the race and warm-start summaries, the CLI, the
device script's restore. Small budgets and few seeds: the committed results come from the
commands (results/README.md), and tests/test_search_results.py checks what they wrote."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from evo.cli import main
from evo.race import best_so_far, evals_to, run_kernel_tuner, run_ours, summarize, Trace
from evo.slice import load_slice, restricted_space
from evo.strategies.grid import subspace
from fitness.records import Status

sys.path.insert(0, str(Path(__file__).parent / "data"))
import make_synthetic_slice  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def slice_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("slice") / "synthetic_slice.json.gz"
    make_synthetic_slice.dump(path)
    return path


@pytest.fixture(scope="module")
def sl(slice_file):
    return load_slice(str(slice_file))


def test_slice_and_its_restricted_space(sl, synthetic_space):
    assert len(sl.evaluations) == 5940 and set(sl.classes) == {"short", "mid", "long"}
    narrow = restricted_space(synthetic_space, subspace(synthetic_space, {"vector_bytes": 16, "cluster": 2},
                                                        {n: list(synthetic_space.gene(n).values())
                                                         for n in synthetic_space.names
                                                         if n not in ("vector_bytes", "cluster")}))
    import random

    rng = random.Random(0)
    drawn = [narrow.sample(rng) for _ in range(50)]
    assert all(g["vector_bytes"] == 16 and g["cluster"] == 2 for g in drawn)
    # same keys as the full space's genomes: a replay of the slice answers them
    assert all(synthetic_space.make(dict(g)).key == g.key for g in drawn)
    best = max(sl.evaluations, key=lambda e: e.fitness("geomean_speedup") or 0)
    assert sl.optimum() == best.fitness("geomean_speedup")
    long = sl.for_class("long")
    assert max(e.fitness("geomean_speedup") or 0 for e in long) == sl.optimum("long") > sl.optimum()
    assert all(len(e.cases) == 1 for e in long if e.status.ok)
    with pytest.raises(ValueError, match="no shape class 'huge'"):
        sl.for_class("huge")


def test_kernel_tuner_cache_format(sl, tmp_path):
    cache = sl.kt_cache()
    assert cache["tune_params_keys"] == sl.varied and len(cache["cache"]) == len(sl.evaluations)
    ev = next(e for e in sl.evaluations if e.status.ok)
    key = ",".join(str(ev.genome[n]) for n in cache["tune_params_keys"])
    entry = cache["cache"][key]
    assert entry["geomean_speedup"] == ev.fitness("geomean_speedup") and len(entry["times"]) == 3
    assert entry["time"] == pytest.approx((entry["times"][0] * entry["times"][1] * entry["times"][2]) ** (1 / 3))
    bad = next(e for e in sl.evaluations if e.status is Status.COMPILE_ERROR)
    assert cache["cache"][",".join(str(bad.genome[n]) for n in cache["tune_params_keys"])]["time"] == \
        "CompilationFailedConfig"
    pytest.importorskip("kernel_tuner")
    from kernel_tuner.util import read_cache

    path = tmp_path / "cache.json"
    path.write_text(json.dumps(cache))
    back = read_cache(str(path), open_cache=False)           # Kernel Tuner's own reader
    assert "__error__" in back["cache"][",".join(str(bad.genome[n]) for n in cache["tune_params_keys"])]
    trace = run_kernel_tuner(cache, str(path), "random_sample", 3, 40)
    assert len(trace.values) == 40 and trace.side == "kernel_tuner"
    assert max(v for v in trace.values if v is not None) <= sl.optimum()
    again = run_kernel_tuner(cache, str(path), "random_sample", 3, 40)
    assert again.values == trace.values                      # seeded: the same draws


def test_curve_and_evals_to_target():
    values = (None, 0.5, 0.4, 0.99, None, 1.0)
    assert best_so_far(values) == [None, 0.5, 0.5, 0.99, 0.99, 1.0]
    assert evals_to(values, 0.99) == 4 and evals_to(values, 1.01) is None
    s = summarize([Trace("a", "ours", 0, values), Trace("a", "ours", 1, (1.0,)), Trace("b", "kernel_tuner", 0, (0.2,))],
                  optimum=1.0, budget=6, points=6)
    assert s["a"]["evals_to_99"]["values"] == [4, 1] and s["a"]["evals_to_99"]["reached"] == 2
    assert s["b"]["evals_to_99"]["median"] is None and s["b"]["final_fraction"]["median"] == 0.2
    assert s["a"]["curve"]["evals"][-1] == 6 and s["a"]["curve"]["median"][-1] == 1.0


def test_our_run_on_the_slice_stays_in_it(sl):
    trace = run_ours(sl, "ga+screen", 0, 80)
    assert len(trace.values) == 80 and max(v for v in trace.values if v) <= sl.optimum()


def test_cli_export_race_and_warm_start(slice_file, tmp_path, capsys):
    out = tmp_path / "kt.json"
    assert main(["slice", "export-kt", str(slice_file), "--out", str(out), "--class", "long"]) == 0
    assert json.loads(out.read_text())["kernel_name"] == "synthetic_long"
    prefix = tmp_path / "race"
    assert main(["slice", "race", str(slice_file), "--out", str(prefix), "--seeds", "2", "--budget", "60",
                 "--kt-rest", "mls"]) == 0
    result = json.loads(prefix.with_suffix(".json").read_text())
    assert result["synthetic"] and result["space_size"] == 5940 and result["seeds"] == 2
    assert {"ga", "random", "ga+screen", "kt:genetic_algorithm", "kt:bayes_opt", "kt:simulated_annealing",
            "kt:random_sample", "kt:mls"} <= set(result["strategies"])
    assert "ga+lessons" not in result["strategies"]           # no lessons given: left out, and said so
    # seed 0 searched twice: ours and Kernel Tuner's random_sample give the same trace again
    assert all(result["strategies"][n]["reproducible"] for n in ("ga", "random", "ga+screen", "kt:random_sample"))
    assert all(isinstance(st["reproducible"], bool) for st in result["strategies"].values())
    assert "seed 0 again the same" in prefix.with_suffix(".md").read_text()
    assert "**Synthetic**" in prefix.with_suffix(".md").read_text() and prefix.with_suffix(".png").stat().st_size
    warm = tmp_path / "warm"
    assert main(["slice", "warm-start", str(slice_file), "--out", str(warm), "--holdout", "long", "--seeds", "2",
                 "--budget", "60", "--other-holdouts"]) == 0
    w = json.loads(warm.with_suffix(".json").read_text())
    assert w["holdout_class"] == "long" and w["lessons_from_classes"] == ["mid", "short"]
    # every class held out in turn, the headline first and equal to the top-level figures
    assert list(w["holdouts"]) == ["long", "mid", "short"] and w["holdouts"]["mid"]["lessons_from_classes"] == [
        "long", "short"]
    assert all(cls not in h["lessons_from_classes"] for cls, h in w["holdouts"].items())   # never its own class
    assert "Every class held out in turn" in warm.with_suffix(".md").read_text()
    assert set(w) >= {"cold_evals_to_99", "warm_evals_to_99", "ratio", "seeds"}
    assert any("used as a transfer" in line for line in w["lessons_log"])
    # two transfer lessons, two genomes each: too thin for the online choice, and the report says so
    assert w["holdouts"]["mid"]["lessons_choice"][0].startswith("online lesson choice: kept every lesson (too thin")
    assert "- mid: online lesson choice: kept every lesson" in warm.with_suffix(".md").read_text()
    assert main(["slice", "race", str(tmp_path / "nope.json"), "--out", str(prefix)]) == 2
    assert "error:" in capsys.readouterr().err


def test_cli_lessons_build_show_export(slice_file, tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'lessons.db'}"
    assert main(["lessons", "build", str(slice_file), "--store", url, "--surrogate", "ridge"]) == 0
    out = capsys.readouterr().out
    assert out.count("lesson ") == 3 and "appended 3 lessons from 1 runs" in out
    assert main(["lessons", "show", url, "--class", "long"]) == 0
    shown = capsys.readouterr().out
    assert "synthetic / space - / sm_90a / class long" in shown and "surrogate ridge (used)" in shown
    assert "signature: cluster = 4 and load_cache = 'ca': wrong" in shown and "from: synthetic-slice" in shown
    path = tmp_path / "lessons.json"
    assert main(["lessons", "export", "--store", url, "--out", str(path)]) == 0
    assert len(json.loads(path.read_text())["lessons"]) == 3
    assert main(["lessons", "show", str(path), "--family", "rmsnorm"]) == 1


def _record_slice():
    """experiments/device/record_slice.py as a module (it is a device script, not a package)."""
    spec = importlib.util.spec_from_file_location("record_slice", REPO / "experiments/device/record_slice.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _partly_recorded(tmp_path, synthetic_space, synthetic_table):
    """The dump of a grid run stopped after 30 of its genomes (batch 7)."""
    from evo.run import Run, new_run_info
    from evo.session import dump_run
    from evo.store import open_store
    from tests.test_grid import grid_cfg

    first = f"sqlite:///{tmp_path / 'a.db'}"
    with open_store(first) as store:
        store.create_run(new_run_info(grid_cfg(evaluations=30), "slice"))
        Run(grid_cfg(evaluations=30), synthetic_space, store, synthetic_table, "slice").optimize()
    dump = tmp_path / "slice.json.gz"
    dump_run(f"{first}#slice", dump)
    return dump


def test_device_script_restores_a_slice_and_goes_on(tmp_path, synthetic_space, synthetic_table):
    """record_slice.py's restore: the dump of a partly recorded grid becomes a store the next call
    continues, judging only what is left."""
    from evo.run import Run
    from evo.store import open_store
    from tests.test_grid import grid_cfg

    second = f"sqlite:///{tmp_path / 'b.db'}"
    run_id, _ = _record_slice().restore(_partly_recorded(tmp_path, synthetic_space, synthetic_table), second)
    with open_store(second) as store:
        assert run_id == "slice" and store.count("slice") == 30
        run = Run(grid_cfg(), synthetic_space, store, synthetic_table, "slice")
        run.optimize()
        assert run.new_evaluations == store.count("slice") - 30 > 0


def test_a_slice_resumed_with_a_larger_grid_batch_records_the_same_genomes_in_the_same_order(
        tmp_path, synthetic_space, synthetic_table):
    """record_slice.py --grid-batch (several GPUs: more genomes an ask) changes how many the grid
    asks at once, never which or in what order: a slice begun at batch 7 and finished at 40 holds
    the records of one run at 7, key for key, in order."""
    from evo.run import Run, new_run_info
    from evo.store import open_store
    from evo.strategies.grid import grid_points, subspace
    from tests.test_grid import FIXED, VARY, grid_cfg

    whole = f"sqlite:///{tmp_path / 'whole.db'}"
    with open_store(whole) as store:
        store.create_run(new_run_info(grid_cfg(), "slice"))
        Run(grid_cfg(), synthetic_space, store, synthetic_table, "slice").optimize()
        expected = [r.key for r in store.records("slice")]
    second = f"sqlite:///{tmp_path / 'b.db'}"
    _record_slice().restore(_partly_recorded(tmp_path, synthetic_space, synthetic_table), second)
    wider = grid_cfg().with_overrides({"search.grid.batch": 40})
    with open_store(second) as store:
        Run(wider, synthetic_space, store, synthetic_table, "slice").optimize()
        assert [r.key for r in store.records("slice")] == expected
    assert len(expected) == len(list(grid_points(synthetic_space, subspace(synthetic_space, FIXED, VARY))))  # all


def test_a_partial_slice_is_refused_by_the_race_and_the_warm_start(slice_file, synthetic_space, tmp_path, capsys):
    """Session 17's dry run on the H200 slice at 2408 of 3456: our strategies asked genomes not yet
    recorded, their replays ended at once and the race scored them "not reached" beside Kernel
    Tuner's (which only draws recorded points). A slice whose grid names more valid genomes than
    it holds is refused, in one line, before any strategy runs; and a trace cut short by the
    replay is an error, never a score."""
    import gzip

    data = json.loads(gzip.open(slice_file, "rt").read())
    data["config"]["search"]["grid"] = {"fixed": {}, "vary": {n: list(synthetic_space.gene(n).values())
                                                               for n in synthetic_space.names}}
    whole = tmp_path / "whole.json.gz"
    with gzip.open(whole, "wt") as fh:
        json.dump(data, fh)
    full = load_slice(str(whole))
    assert full.valid_genomes == full.recorded == 5940 and full.whole
    data["evaluations"].pop(17)
    partial = tmp_path / "partial.json.gz"
    with gzip.open(partial, "wt") as fh:
        json.dump(data, fh)
    sl = load_slice(str(partial))
    assert (sl.recorded, sl.valid_genomes, sl.whole) == (5939, 5940, False)
    with pytest.raises(ValueError, match="partial: 5939 of 5940 valid genomes recorded"):
        sl.require_whole()
    for argv in (["slice", "race", str(partial), "--out", str(tmp_path / "r"), "--seeds", "1", "--budget", "20"],
                 ["slice", "warm-start", str(partial), "--out", str(tmp_path / "w"), "--holdout", "long"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "is partial: 5939 of 5940" in err and "Traceback" not in err
    # a strategy that asks an unrecorded genome ends its replay: an error, not a short trace
    half = dataclasses.replace(sl, source=dataclasses.replace(sl.source, evaluations=sl.evaluations[::2]))
    with pytest.raises(ValueError, match="asked a genome outside"):
        run_ours(half, "random", 0, 60)


def test_operator_study_says_which_data_it_had(slice_file, tmp_path, synthetic_space, synthetic_table):
    """A whole grid recording is named a dense slice (with its valid-genome count); a partial grid,
    several recordings, or a recording that names no grid are not; the verdict sentence follows the
    paired seeds' sign test, not a text written in advance."""
    from evo.operator_study import dense_slice, study, write
    from evo.run import Run, new_run_info
    from evo.session import dump_run
    from evo.store import open_store
    from tests.test_grid import grid_cfg

    url = f"sqlite:///{tmp_path / 'whole.db'}"
    with open_store(url) as store:
        store.create_run(new_run_info(grid_cfg(), "slice"))
        Run(grid_cfg(), synthetic_space, store, synthetic_table, "slice").optimize()
    whole = tmp_path / "whole.json.gz"
    dump_run(f"{url}#slice", whole)
    dense = dense_slice([whole])
    assert dense is not None and dense["valid_genomes"] == dense["recorded"] > 0
    assert dense_slice([whole, whole]) is None                     # several recordings: a pool, not a slice
    assert dense_slice([_partly_recorded(tmp_path, synthetic_space, synthetic_table)]) is None
    assert dense_slice([slice_file]) is None                       # no grid recorded: nothing says it is whole
    result = study([whole], seeds=4, children=10)
    assert result["dense_slice"] == dense and "a whole dense slice" in result["what"]
    _, md = write(result, tmp_path / "ops")
    text = md.read_text()
    assert f"every one of the {dense['valid_genomes']} valid genomes" in text and "GA's path" not in text
    p_value = result['paired_improvement_rate']['sign_test_p']
    assert f"p = {p_value:.3g}" in text
    assert ("not told apart at the 5 % level" in text) == (p_value >= 0.05)


def test_sign_test():
    from evo.operator_study import sign_test

    assert sign_test(0, 0) == 1.0 and sign_test(3, 3) == 1.0
    assert sign_test(15, 4) == pytest.approx(0.01921, abs=1e-5) == sign_test(4, 15)
    assert sign_test(10, 0) == pytest.approx(2 / 1024)


def test_spearman_matches_its_definition():
    from evo.race import spearman

    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486833, abs=1e-6)    # tie: mean ranks
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None


def test_transfer_information_reads_the_source_orders(sl):
    """On the synthetic slice: per source class, where the held-out class's first good genome comes
    in that class's order, checked against a direct sort; positions are 1-based, within the slice."""
    from evo.race import transfer_information

    info = transfer_information(sl, "long")
    assert set(info["sources"]) == set(sl.classes) - {"long"}
    fit = {c: [sl.fitness(e, c) for e in sl.evaluations] for c in sl.classes}
    best = max(f for f in fit["long"] if f is not None)
    for s, v in info["sources"].items():
        order = sorted(range(len(fit[s])), key=lambda i: (fit[s][i] is None, -(fit[s][i] or 0.0), i))
        first = next(p for p, i in enumerate(order, 1) if fit["long"][i] is not None and fit["long"][i] >= 0.99 * best)
        assert v["first_hit"] == first and -1 <= v["spearman"] <= 1
    assert 1 <= info["mean_rank_first_hit"] <= len(sl.evaluations) and 1 <= info["geomean_first_hit"] <= len(
        sl.evaluations)
    assert info["uniform_expected_first_hit"] == pytest.approx((info["verified"] + 1) / (info["genomes_within_target"] + 1))


def test_warm_start_with_lessons_of_another_slice(sl, slice_file):
    """--lessons-from: lessons of another whole slice (here the same recording loaded again, so the
    figures must equal the same-slice warm start's); another family or space version is refused."""
    import dataclasses

    from evo.race import warm_start

    same = warm_start(sl, "long", seeds=2, budget=40)
    other = load_slice(str(slice_file))
    crossed = warm_start(sl, "long", seeds=2, budget=40, lessons_from=other)
    assert crossed["per_seed"] == same["per_seed"] and crossed["lessons_from_slice"] == other.source.label
    assert crossed["transfer_information"] == same["transfer_information"]
    wrong = dataclasses.replace(other, source=dataclasses.replace(other.source, space_version="v0"))
    with pytest.raises(ValueError, match="cannot warm-start"):
        warm_start(sl, "long", seeds=1, budget=20, lessons_from=wrong)
    # another GPU's lessons would all be refused (RunLessons.select): the "warm" runs would be cold ones
    # reported as lessons of the other slice's classes, so the warm start refuses them up front
    elsewhere = dataclasses.replace(other, source=dataclasses.replace(other.source, arch="sm_80"))
    with pytest.raises(ValueError, match="cannot warm-start"):
        warm_start(sl, "long", seeds=1, budget=20, lessons_from=elsewhere)


def test_search_efficiency_refuses_lessons_and_lessons_from_together(monkeypatch, capsys):
    """--lessons-from replaced --lessons without a word: the two are exclusive, refused before any work."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "experiments/scripts/search_efficiency.py"
    spec = importlib.util.spec_from_file_location("search_efficiency_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(sys, "argv", [str(path), "--slice", "s.json.gz", "--lessons", "L.json",
                                      "--lessons-from", "earlier.json.gz"])
    with pytest.raises(SystemExit) as exc:
        script.main()
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_order_limits_follow_each_order_to_each_seeds_target(sl):
    """evo.race.order_limits on the synthetic slice: a lesson's recorded order reaches a seed's target
    where a direct walk down lesson_order does; "probe, then X" is the probe (interleaved) and then X's
    order without the probe's genomes; ratios are over the cold median given."""
    import math
    import statistics

    from evo.lesson_build import build_lessons
    from evo.lesson_choice import allot, lesson_order
    from evo.race import order_limits

    lessons = build_lessons([sl.source], exclude_classes=["long"], seed=0)
    fit = {e.key: sl.fitness(e, "long") for e in sl.evaluations}
    best = sl.optimum("long")
    targets = [best, 0.97 * best, None]                  # None: a cold run that verified nothing

    def walk(order):
        hits = []
        for t in targets:
            hit = None if t is None else next(
                (i for i, g in enumerate(order, 1) if (fit.get(g.key) or 0.0) >= 0.99 * t - 1e-12), None)
            hits.append(math.inf if hit is None else hit)
        return statistics.median(hits)

    lim = order_limits(sl, "long", lessons, targets, 40.0, probe=2)
    orders = [lesson_order(x, sl.space) for x in lessons]
    first = allot(orders, [1.0] * len(orders), 2 * len(orders))
    for x, order in zip(lessons, orders):
        got = lim["orders"][f"{x.shape_class} recorded"]
        assert got["evals_to_99"] == walk(order) and got["ratio"] == pytest.approx(walk(order) / 40.0)
        after = first + [g for g in order if g.key not in {f.key for f in first}]
        assert lim["orders"][f"probe, then {x.shape_class}"]["evals_to_99"] == walk(after)
    assert "interleaved" in lim["orders"] and any(" model" in k for k in lim["orders"])
    named = [k for k, v in lim["orders"].items() if v["evals_to_99"] is not None]
    assert lim["best"] == min(named, key=lambda k: lim["orders"][k]["evals_to_99"])     # ties: the first named
    assert {"mean rank", "geomean"} <= set(lim["orders"])


# -- a group of classes held out (e.g. one dtype: issue 19's "or one dtype" as one run) -------------

GROUPED = {"short": "x/short", "mid": "x/mid", "long": "y/long"}


@pytest.fixture(scope="module")
def grouped_file(tmp_path_factory):
    """The synthetic slice with its classes named as a family names them, a group's word first
    (x/short, x/mid, y/long: "x" stands where a dtype stands in RMSNorm's classes)."""
    path = tmp_path_factory.mktemp("grouped") / "grouped_slice.json.gz"
    make_synthetic_slice.dump(path, names=GROUPED)
    return path


@pytest.fixture(scope="module")
def grouped(grouped_file):
    return load_slice(str(grouped_file))


def test_a_group_of_classes_is_one_objective_the_geomean_of_its_classes(grouped, sl):
    import math

    assert set(grouped.classes) == set(GROUPED.values())
    assert grouped.classes_of("x") == grouped.classes_of("x/") == ("x/mid", "x/short")
    assert grouped.classes_of("y/long") == ("y/long",)
    for name in ("z", "x/s", ""):       # a group is a whole first word, not any start of a name
        with pytest.raises(ValueError, match="no shape class"):
            grouped.classes_of(name)
    # every class of the slice as one group is the race's whole-slice objective (one case a class; the
    # synthetic recording rounds its objective to 6 digits)
    whole = dataclasses.replace(grouped, classes={f"w/{c}": v for c, v in grouped.classes.items()})
    verified = 0
    for e, plain in zip(grouped.evaluations, sl.evaluations):
        assert e.key == plain.key
        parts = [grouped.fitness(e, c) for c in ("x/short", "x/mid")]
        assert parts == [sl.fitness(plain, "short"), sl.fitness(plain, "mid")]
        if None in parts:
            assert grouped.fitness(e, "x") is None
            continue
        verified += 1
        assert grouped.fitness(e, "x") == pytest.approx(math.sqrt(parts[0] * parts[1]), rel=1e-12)
        assert whole.fitness(e, "w") == pytest.approx(e.fitness(grouped.metric), rel=2e-6)
    assert verified > 1000
    table = grouped.for_class("x")
    assert max(ev.fitness(grouped.metric) or 0 for ev in table) == grouped.optimum("x")
    assert grouped.optimum("x") < grouped.optimum("x/mid")       # no genome is the best of both
    assert all(sorted(c.case for c in ev.cases) == sorted(grouped.classes["x/mid"] + grouped.classes["x/short"])
               for ev in table if ev.status.ok)


def test_a_held_out_group_s_lessons_are_never_used(grouped, grouped_file, tmp_path):
    """Holding out "x" leaves every x/ class out of the lessons, of this slice or of another that holds
    them (--lessons-from: the dtype held out), and the runs are scored on the group's objective."""
    from evo.race import warm_start

    w = warm_start(grouped, "x", seeds=2, budget=40)
    assert w["holdout_classes"] == ["x/mid", "x/short"] and w["lessons_from_classes"] == ["y/long"]
    told = [line for line in w["lessons_log"] if line.startswith("lesson ")]
    assert told and all("/y/long (" in line and "transfer" in line for line in told)
    assert set(w["transfer_information"]["sources"]) == {"y/long"}
    assert w["class_optimum"] == grouped.optimum("x")
    group_values = {grouped.fitness(e, "x") for e in grouped.evaluations}
    assert all(f in group_values for f in w["per_seed"]["cold_final"])
    per = w["per_seed"]            # the optimum itself is at or past the target (99 % of a cold run's best)
    for side in ("cold", "warm"):
        assert all(o is None or (t is not None and o >= t)
                   for t, o in zip(per[f"{side}_evals_to_99"], per[f"{side}_evals_to_optimum"]))
    assert all(f is None or 0 < f <= 1 for f in per["warm_fraction_of_optimum_at_target"])
    other = load_slice(str(grouped_file))
    crossed = warm_start(grouped, "x", seeds=2, budget=40, lessons_from=other)
    assert crossed["lessons_from_classes"] == ["y/long"] and crossed["per_seed"] == w["per_seed"]

    out = tmp_path / "group"
    assert main(["slice", "warm-start", str(grouped_file), "--out", str(out), "--holdout", "x", "--seeds", "1",
                 "--budget", "20", "--prediction", "0.5 (0.3-0.7): a guess for the test"]) == 0
    j = json.loads(out.with_suffix(".json").read_text())
    md = out.with_suffix(".md").read_text()
    assert j["prediction"].startswith("0.5") and j["holdout_classes"] == ["x/mid", "x/short"]
    assert "Predicted before the run: 0.5 (0.3-0.7)" in md and "the classes of **x** (x/mid, x/short)" in md
