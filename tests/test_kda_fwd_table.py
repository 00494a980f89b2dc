"""experiments/device/kda_fwd_table.py end to end on the CPU: the judge's real GPU side
(DeviceRunner) over a numpy backend whose "kernels" are Python, fake peers, tiny scenarios. So
that a device call is not spent on plumbing: genomes judged and audited per scenario, the best
one picked only among those within tolerance, a peer outside the tolerance timed, reported and
marked, the files rewritten after every scenario, the budget honoured."""

from __future__ import annotations

import importlib.util
import json
import time

import numpy as np

from fitness import dtypes
from fitness.family import Baseline, BaselineRun, load_family

from tests.conftest import REPO
from tests.host_backend import HostBackend

FAMILY = load_family("kda")


def _script():
    spec = importlib.util.spec_from_file_location("kda_fwd_table_script", REPO / "experiments" / "device" / "kda_fwd_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _case_of(args):
    """The case a launch is for, read back from the kernel convention's arguments."""
    q, _, _, _, _, A_log, _, cu, h0, _, fin, _, H, _, scale, lb, flags = args
    cu = [int(c) for c in cu]
    state = "fp32" if fin is None and h0 is None else ("bf16" if (fin if fin is not None else h0).dtype == np.uint16 else "fp32")
    return FAMILY.make_case([b - a for a, b in zip(cu, cu[1:])], int(H), state=state, initial=h0 is not None,
                            final=fin is not None, gate_in_kernel=A_log is not None, beta_sigmoid=bool(flags & 1),
                            qk_l2norm=bool(flags & 2), lower_bound=float(lb), scale=float(scale),
                            layout="kv" if flags & 4 else "vk")


def kernel(factor):
    """A fake kernel: the float64 reference (times `factor`) rounded to the outputs' types."""
    names = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "cu_seqlens", "initial_state")

    def run(args):
        case = _case_of(args)
        ins = {n: a for n, a in zip(names, args[:9]) if a is not None}
        ref = FAMILY.reference(case, ins)
        args[9][...] = dtypes.quantize(ref["o"] * factor, "bf16")
        if args[10] is not None:
            args[10][...] = dtypes.quantize(ref["final_state"], case.params["state"])
    return run


class FakeGPU(HostBackend):
    """The backend surface DeviceRunner and the script use, on numpy."""

    def __init__(self, kernels):
        self.kernels = kernels
        self.launches = 0

    def describe(self):
        return "fake GPU (numpy)"

    def load(self, cubin):
        run = self.kernels[cubin.decode()]
        return {"kda_fwd_fp32": run, "kda_fwd_bf16": run}

    def launch(self, kernel, launch, args):
        self.launches += 1
        kernel(args)


def _peer(factor, delay_s):
    def prepare(case, dev):
        ref = FAMILY.reference(case, dev)

        def run():
            time.sleep(delay_s)
            return ref

        def outputs(r):
            out = {"o": dtypes.quantize(r["o"] * factor, "bf16")}
            if "final_state" in r:
                out["final_state"] = dtypes.quantize(r["final_state"], case.params["state"])
            return out
        return BaselineRun(run, outputs)
    return prepare


class TinyFamily:
    """The kda family on three tiny scenarios, FlashKDA a little outside o's tolerance (x1.008),
    fla exact and slow."""

    def __getattr__(self, name):
        return getattr(FAMILY, name)

    def benchmark_cases(self, matrix="default"):
        return [FAMILY.make_case((40,), 2, name="fixed"), FAMILY.make_case((9, 14, 3), 2, name="mixed"),
                FAMILY.make_case((8, 8), 2, name="uniform")]

    def check_cases(self):
        return [FAMILY.make_case((5, 0, 17), 3, name="odd"), FAMILY.make_case((9,), 1, name="kv", layout="kv")]

    def baselines(self):
        return [Baseline("flashkda", lambda: True, _peer(1.008, 0.0005)), Baseline("fla", lambda: True, _peer(1.0, 0.03))]


def _compile(family, genome):
    label = {g.key: n for n, g in _script().NAMED.items()}.get(genome.key, "custom")
    return {"ok": True, "cubin": label.encode(), "registers": {"kda_fwd_fp32": 188}}


def test_table_checks_judges_audits_picks_the_best_and_marks_a_peer_outside_tolerance(tmp_path):
    mod = _script()
    gpu = FakeGPU({"default": kernel(1.0), "all-split": kernel(1.0), "longest-first": kernel(1.0), "all-bf16": kernel(1.01)})
    prefix = tmp_path / "kda_fwd"
    rc = mod.main(["--out", str(prefix), "--reps", "3", "--warmup", "1", "--seed", "3"], backend=gpu,
                  family=TinyFamily(), compile_fn=_compile)
    assert rc == 0
    report = json.loads(prefix.with_suffix(".json").read_text())
    assert [r["case"] for r in report["scenarios"]] == ["fixed/H2", "mixed/H2", "uniform/H2"]
    assert set(report["genomes"]) == {"default", "all-split", "longest-first", "all-bf16"}
    assert "cubin" not in report["genomes"]["default"]
    check = report["genomes"]["all-bf16"]["check"]
    assert check["status"] == "WRONG_RESULT" and "relative L2 error" in check["message"]
    assert report["genomes"]["default"]["check"]["status"] == "OK" and report["genomes"]["default"]["check"]["cases"] == 2
    for row in report["scenarios"]:
        assert (row["T"], row["H"], row["recurrences"]) == (sum(row["lens"]), 2, 2 * len(row["lens"]))
        assert "all-bf16" not in row["genomes"]                      # failed CHECK: never judged on a scenario
        assert row["best"] in ("default", "all-split", "longest-first")
        best = row["genomes"][row["best"]]
        assert best["status"] == "OK" and best["within_tolerance"] and best["o_rel_rms"] < 3e-3
        assert row["time_ms"] == best["time_ms"] and row["o_rel_rms"] == best["o_rel_rms"]
        assert row["state_rel_rms"] is not None and row["state_rel_rms"] < 1e-6
        assert set(best["by_distribution"]) == {"flashkda", "long_memory"}
        fk = row["peers"]["flashkda"]
        assert fk["status"] == "OK" and fk["time_ms"] > 0 and not fk["within_tolerance"]
        assert 0.007 < fk["o_rel_rms"] < 0.009                       # reported with its error ...
        assert row["speedup_vs_flashkda"] == fk["time_ms"] / row["time_ms"]     # ... and the speedup kept
        assert row["flashkda_within_tolerance"] is False
        assert row["peers"]["fla"]["within_tolerance"] and row["speedup_vs_fla"] > row["speedup_vs_flashkda"]
    s = report["summary"]
    assert s["scenarios"] == s["with_a_passing_genome"] == 3
    assert s["min_speedup_vs_flashkda"] == min(r["speedup_vs_flashkda"] for r in report["scenarios"])
    assert s["target_met"] == (s["min_speedup_vs_flashkda"] >= 1.3)
    table = prefix.with_suffix(".md").read_text()
    assert "| fixed/H2 | 2 |" in table and "†" in table and "## Every genome on every scenario" in table
    assert "| all-bf16 |" in table and "WRONG_RESULT" in table


def test_budget_stops_starting_scenarios_and_still_writes_the_files(tmp_path):
    mod = _script()
    gpu = FakeGPU({"default": kernel(1.0)})
    prefix = tmp_path / "kda_fwd"
    assert mod.main(["--out", str(prefix), "--genomes", "default", "--reps", "2", "--warmup", "0", "--no-check",
                     "--budget-s", "0"], backend=gpu, family=TinyFamily(), compile_fn=_compile) == 0
    report = json.loads(prefix.with_suffix(".json").read_text())
    assert all(r["status"].startswith("not run") for r in report["scenarios"]) and gpu.launches == 0
    assert report["summary"]["with_a_passing_genome"] == 0 and not report["summary"]["target_met"]
    assert "not run" in prefix.with_suffix(".md").read_text()
