"""experiments/device/kda_prep_probe.py here with a stand-in backend whose clock advances by a
known time per kernel, so the device call's per-launch attribution (kda_prep apart from kda_rec)
and its model column are checked before a device call is spent on them."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from fitness.family import KERNELS_DIR, import_sibling, load_family

from tests.conftest import REPO

FAMILY = load_family("kda")
model = import_sibling(str(KERNELS_DIR / "kda" / "family.py"), "kernel_model")
COST_MS = {"kda_prep": 2.0, "kda_rec_fp32": 3.0, "kda_rec_bf16": 5.0, "kda_flags_zero": 0.5}


def _script():
    spec = importlib.util.spec_from_file_location("kda_prep_probe", REPO / "experiments" / "device" / "kda_prep_probe.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class ClockBackend:
    """Events read a clock that each launch moves on by its kernel's COST_MS."""

    xp = np

    def __init__(self):
        self.now, self.flushes, self.launched = 0.0, 0, []

    def describe(self):
        return "clock"

    def load(self, cubin):
        return cubin

    def get_kernel(self, module, name):
        return name

    def prepare_kernel(self, kernel, launch):
        pass

    def launch(self, kernel, launch, args):
        assert len(args) == len(launch.args) and not launch.overlap      # each launch apart: ordinary ones
        self.launched.append(kernel)
        self.now += COST_MS[kernel]

    def record(self):
        return self.now

    def elapsed_ms(self, a, b):
        return b - a

    def flush_l2(self):
        self.flushes += 1

    def spin(self, ns):
        self.now += 100.0                     # outside every launch's events

    def synchronize(self, timeout_s):
        pass

    def device_rng(self, seed):
        return np.random.default_rng(seed)

    def free_all(self):
        pass


class TinyFamily:
    def __getattr__(self, name):
        return getattr(FAMILY, name)

    def benchmark_cases(self, matrix="default"):
        return [FAMILY.make_case((40,), 2, name="tiny-fixed"), FAMILY.make_case((9, 14, 3), 2, state="bf16", name="tiny-mixed")]


def test_probe_times_each_launch_apart_and_writes_the_models_split_beside(tmp_path):
    mod = _script()
    backend = ClockBackend()
    out = tmp_path / "probe.json"
    names = ["split-bf16-v2", "split-bf16-v2-compact"]
    assert mod.main(["--out", str(out), "--genomes", ",".join(names), "--reps", "3", "--warmup", "1"],
                    backend=backend, family=TinyFamily(), compile_fn=lambda f, g: b"cubin") == 0
    report = json.loads(out.read_text())
    assert [r["case"] for r in report["scenarios"]] == ["tiny-fixed/H2", "tiny-mixed/H2/state-bf16"]
    assert backend.flushes == 2 * 2 * (3 + 1) and report["fit"] == model.SPLIT_FIT
    for row, rec in zip(report["scenarios"], ("kda_rec_fp32", "kda_rec_bf16")):
        for name in names:
            r = row["genomes"][name]
            assert r["launch_ms"] == {"kda_prep": 2.0, rec: COST_MS[rec]}
            assert (r["prep_ms"], r["rec_ms"], r["total_ms"]) == (2.0, COST_MS[rec], 2.0 + COST_MS[rec])
            prep = "compact" if name.endswith("compact") else "v3"
            scale = model.PREP_SCALE_PREDICTED[prep]
            want = model.split_fit_ms(row["lens"], row["H"], 2, prep_scale=scale[1])
            assert (r["model"]["prep_ms"], r["model"]["rec_ms"]) == pytest.approx(want) and r["model"]["prep_scale"] == list(scale)
    assert backend.launched[:2] == ["kda_prep", "kda_rec_fp32"]          # the judge's order: prep, then rec


def test_probe_refuses_a_fused_genome():
    with pytest.raises(SystemExit):
        _script().main(["--genomes", "default"], backend=ClockBackend(), family=TinyFamily(), compile_fn=lambda f, g: b"")


def test_probe_times_a_tail_genomes_launches_apart_as_ordinary_ones(tmp_path):
    """v10's prep_overlap = tail (and v7's pdl) launch kda_rec with Launch.overlap; timed apart, each
    launch is an ordinary one (ClockBackend.launch refuses an overlapped one): the twin's two launches."""
    mod = _script()
    backend = ClockBackend()
    out = tmp_path / "probe.json"
    names = ["split-bf16-tight-r2-tail", "split-bf16-tight-r2", "split-bf16-v2-compact-pdl3"]
    assert mod.main(["--out", str(out), "--genomes", ",".join(names), "--reps", "2", "--warmup", "1"],
                    backend=backend, family=TinyFamily(), compile_fn=lambda f, g: b"cubin") == 0
    row = json.loads(out.read_text())["scenarios"][0]
    assert row["genomes"]["split-bf16-tight-r2-tail"]["launch_ms"] == row["genomes"]["split-bf16-tight-r2"]["launch_ms"] \
        == {"kda_prep": 2.0, "kda_rec_fp32": 3.0}
