"""fitness.device.DeviceRunner driven on the CPU: a numpy backend whose "kernels" are Python.

Everything but the CUDA calls is the real runner: guard zones, poisoning, the two-call check on
the same buffers, the timing loop with baselines and L2 flushes, the re-check of timed outputs,
error classification. Each fake kernel below plays one way of cheating or failing.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from fitness import device as dev
from fitness import dtypes, verify
from fitness import timing as tmod
from fitness.family import KERNELS_DIR, Baseline, Launch, import_sibling
from fitness.jobs import BENCH, CHECK, Job, TimingConfig
from fitness.records import Status

op = import_sibling(str(KERNELS_DIR / "rmsnorm" / "family.py"), "operation")


# -- a fake GPU ------------------------------------------------------------------------------------
class FakeCudaError(RuntimeError):
    def __init__(self, status: int):
        self.status = status
        super().__init__(f"fake CUDA error {status}")


class FakeEvent:
    def __init__(self, t: float):
        self.t = t


class FakeBackend:
    xp = np
    has_device_rng = True
    max_threads = 1024
    max_smem_optin = 227 * 1024

    def __init__(self, kernels, l2_bytes: int = 1 << 20):
        self.kernels = kernels
        self.l2_bytes = l2_bytes
        self.total_mem = 1 << 32
        self.hung = False
        self.pending: int | None = None
        self.dead = False
        self.flushes = 0
        self.launches = 0
        self.freed = 0

    def describe(self):
        return "fake GPU (numpy)"

    def load(self, cubin):
        name = cubin.decode()
        if name == "corrupt":
            raise FakeCudaError(200)
        return {"rmsnorm_fwd": self.kernels[name]}

    def get_kernel(self, module, name):
        if name not in module:
            raise FakeCudaError(500)
        return module[name]

    def prepare_kernel(self, kernel, launch):
        pass

    def launch(self, kernel, launch, args):
        self.launches += 1
        kernel(self, launch, args)

    def record(self):
        return FakeEvent(time.perf_counter())

    def elapsed_ms(self, a, b):
        return (b.t - a.t) * 1e3

    def wait(self, event, timeout_s):
        if self.pending is not None:
            status, self.pending = self.pending, None
            if status in dev.STICKY_CUDA_ERRORS:
                self.dead = True
            raise FakeCudaError(status)
        if self.hung:
            raise dev.KernelTimeout(f"not finished after {timeout_s:g} s")

    def synchronize(self, timeout_s):
        self.wait(self.record(), timeout_s)

    def flush_l2(self):
        self.flushes += 1

    def upload(self, dst, src):
        np.copyto(dst, src)

    def device_rng(self, seed):
        return np.random.default_rng(seed)

    def free_all(self):
        self.freed += 1

    def copy_ceiling_tbps(self):
        return 4.0

    def cuda_status(self, exc):
        return exc.status if isinstance(exc, FakeCudaError) else None

    def context_alive(self):
        return not self.dead


# -- fake kernels (same convention as the real ones) ---------------------------------------------------
def _dtype_of(x) -> str:
    return {np.dtype(np.uint16): "bf16", np.dtype(np.float16): "fp16", np.dtype(np.float32): "fp32"}[x.dtype]


def _compute(x, w, n_cols=None):
    dt = _dtype_of(x)
    xf = dtypes.to_float64(x, dt).astype(np.float32)
    wf = w.astype(np.float32) if w.dtype != np.uint16 else dtypes.to_float64(w, "bf16").astype(np.float32)
    r = 1.0 / np.sqrt((xf * xf).mean(axis=1) + np.float32(1e-6))
    y = xf * r[:, None] * wf[None, :]
    return dtypes.quantize(y.astype(np.float32), dt), r.astype(np.float32)


def k_good(be, launch, args):
    x, w, y, rstd = args[:4]
    out, r = _compute(x, w)
    y[...] = out
    if rstd is not None:
        rstd[...] = r


def k_partial(be, launch, args):
    x, w, y, rstd = args[:4]
    out, r = _compute(x, w)
    y[:, :-1] = out[:, :-1]


def k_constant(be, launch, args):
    y = args[2]
    y[...] = dtypes.quantize(np.ones(y.shape, dtype=np.float32), _dtype_of(y))


def k_no_work(be, launch, args):
    pass


def k_modify_input(be, launch, args):
    k_good(be, launch, args)
    x = args[0]
    x.reshape(-1).view(dtypes.bits_dtype(_dtype_of(x)))[0] ^= 1


def k_oob(be, launch, args):
    k_good(be, launch, args)
    y = args[2]
    flat = y.reshape(-1)
    ext = np.lib.stride_tricks.as_strided(flat, shape=(flat.size + 4,), strides=flat.strides)
    ext[-4:] = ext[0]


_CACHE: dict[int, np.ndarray] = {}


def k_cache_by_pointer(be, launch, args):
    x, y = args[0], args[2]
    key = x.__array_interface__["data"][0]
    if key in _CACHE and _CACHE[key].shape == y.shape:
        y[...] = _CACHE[key]
        return
    k_good(be, launch, args)
    _CACHE[key] = y.copy()


def k_hang(be, launch, args):
    be.hung = True


def k_fault(be, launch, args):
    be.pending = 700


def k_launch_error(be, launch, args):
    raise FakeCudaError(1)          # invalid value at launch: not sticky


class CountingKernel:
    """Honest for the first `honest` calls, then `after` (cheats only once timing has begun)."""

    def __init__(self, honest: int, after):
        self.honest, self.after, self.calls = honest, after, 0

    def __call__(self, be, launch, args):
        self.calls += 1
        (k_good if self.calls <= self.honest else self.after)(be, launch, args)


# -- a family with a numpy baseline -------------------------------------------------------------------
class Family(op.RMSNormOperation):
    name = "fake_rmsnorm"
    space_name = "fake_rmsnorm"

    def render(self, genome):
        return ""

    def launch(self, genome, case):
        return None

    def baselines(self):
        def prepare(case, device_inputs):
            if case.params["N"] == 520:
                return None                        # "unsupported" for one width
            x, w = device_inputs["x"], device_inputs["w"]
            return op.BaselineRun(lambda: _compute(x, w)[0], lambda res: {"y": res})

        def prepare_wrong(case, device_inputs):
            x, w = device_inputs["x"], device_inputs["w"]
            return op.BaselineRun(lambda: _compute(x, w * 2)[0], lambda res: {"y": res})

        def prepare_broken(case, device_inputs):
            def run():
                raise RuntimeError("shared memory exhausted")
            return run

        def prepare_flaky(case, device_inputs):
            calls = []

            def run():
                calls.append(1)
                if len(calls) > 2:
                    raise RuntimeError("flaky baseline")
                return _compute(device_inputs["x"], device_inputs["w"])[0]
            return run

        def prepare_slow(case, device_inputs):
            x, w = device_inputs["x"], device_inputs["w"]

            def run():                             # a Python wrapper with 300 us of host work
                t = time.perf_counter()
                while time.perf_counter() - t < 300e-6:
                    pass
                return _compute(x, w)[0]
            return op.BaselineRun(run, lambda res: {"y": res})

        return [Baseline("numpy", lambda: True, prepare), Baseline("wrong", lambda: True, prepare_wrong),
                Baseline("slow", lambda: True, prepare_slow),
                Baseline("flaky", lambda: True, prepare_flaky),
                Baseline("broken", lambda: True, prepare_broken), Baseline("absent", lambda: False, prepare)]


FAMILY = Family(dtypes=("bf16", "fp32"), with_rstd=True)


def launch_for(case) -> Launch:
    return Launch(kernel="rmsnorm_fwd", grid=(case.params["M"], 1, 1), block=(256, 1, 1),
                  args=FAMILY.kernel_args(case))


def runner(kernels, **kw) -> dev.DeviceRunner:
    backend = FakeBackend(kernels, l2_bytes=kw.pop("l2_bytes", 1 << 20))
    r = dev.DeviceRunner(0, backend=backend, **kw)
    r._families[("fake_rmsnorm", "fake_root")] = FAMILY
    return r


def job(kernel: str, stage: str = CHECK, cases=None, **timing) -> Job:
    cases = cases if cases is not None else [FAMILY.make_case(7, 520, "bf16"), FAMILY.make_case(1, 256, "fp32")]
    t = TimingConfig(reps=timing.pop("reps", 6), warmup=timing.pop("warmup", 2),
                     baselines=timing.pop("baselines", ("numpy",)), **timing)
    return Job(job_id=f"{kernel}-{stage}", key=kernel, stage=stage, family="fake_rmsnorm", family_root="fake_root",
               cubin=kernel.encode(), cases=tuple(cases), launches={c.id: launch_for(c) for c in cases},
               seed=11, timing=t)


KERNELS = {"good": k_good, "partial": k_partial, "constant": k_constant, "no_work": k_no_work,
           "modify_input": k_modify_input, "oob": k_oob, "cache_by_pointer": k_cache_by_pointer, "hang": k_hang,
           "fault": k_fault, "launch_error": k_launch_error}


# -- pure helpers ---------------------------------------------------------------------------------------
def test_rotation_sets():
    l2 = 60 << 20
    assert dev.rotation_sets(l2 * 2, l2) == 1
    assert dev.rotation_sets(l2 // 2, l2) == 6
    assert dev.rotation_sets(1 << 20, l2) == 8
    assert dev.rotation_sets(1 << 20, l2, enabled=False) == 1


def test_median_iqr_and_worst_status():
    assert dev.median_iqr([1, 2, 3, 4, 100]) == (3.0, 2.0)
    assert dev.worst_status([Status.OK, Status.INVALID, Status.WRONG_RESULT]) is Status.WRONG_RESULT
    assert dev.worst_status([Status.OK, Status.TIMEOUT, Status.RUNTIME_ERROR]) is Status.TIMEOUT
    assert dev.worst_status([]) is Status.OK


def test_launch_problems():
    ok = Launch("k", (8, 1, 1), (256, 1, 1), ())
    assert dev.launch_problem(ok) is None
    assert "threads" in dev.launch_problem(Launch("k", (8, 1, 1), (1024, 2, 1), ()))
    assert "divisible" in dev.launch_problem(Launch("k", (6, 1, 1), (128, 1, 1), (), cluster=(4, 1, 1)))
    assert "shared memory" in dev.launch_problem(Launch("k", (8, 1, 1), (128, 1, 1), (), shared_bytes=300 * 1024))
    assert "positive" in dev.launch_problem(Launch("k", (0, 1, 1), (128, 1, 1), ()))


def test_resolve_args():
    bufs = {"x": np.zeros(2), "y": np.zeros(2)}
    got = dev.resolve_args(Launch("k", (1, 1, 1), (1, 1, 1), ("x", None, np.int32(3), "y")), bufs)
    assert got[0] is bufs["x"] and got[1] is None and got[2] == 3 and got[3] is bufs["y"]
    with pytest.raises(dev.LaunchInvalid, match="names buffer 'z'"):
        dev.resolve_args(Launch("k", (1, 1, 1), (1, 1, 1), ("z",)), bufs)
    with pytest.raises(dev.LaunchInvalid, match="numpy scalar"):
        dev.resolve_args(Launch("k", (1, 1, 1), (1, 1, 1), (3,)), bufs)


def test_guarded_buffer_layout():
    from fitness.family import BufferSpec
    g = dev.GuardedBuffer(np, BufferSpec((3, 4), "float32"), guard_bytes=256)
    assert g.guard == 64 and g.data.shape == (3, 4) and g.data.dtype == np.float32
    g.poison()
    assert dtypes.is_poison(g.full.view(np.float32), "fp32").all() and g.check_guards("y")
    g.data[...] = 1.0
    assert g.check_guards("y") and not dtypes.is_poison(g.data, "fp32").any()
    g.full[g.guard - 1] = 0
    v = g.check_guards("y")
    assert not v and "before the start of y" in v.message
    g.poison_data()
    assert not g.check_guards("y")                 # guard evidence survives poison_data


# -- CHECK stage ------------------------------------------------------------------------------------------
def test_good_kernel_passes_check():
    r = runner(KERNELS)
    res = r.run(job("good"))
    assert res.status is Status.OK, res.message
    assert [c.case for c in res.cases] == ["bf16/7x520/rstd", "fp32/1x256/rstd"]
    assert all(c.status is Status.OK and c.max_abs_err is not None and c.time_us is None for c in res.cases)
    assert res.device == "fake GPU (numpy)" and res.copy_ceiling_tbps == 4.0 and not res.context_lost
    assert r.backend.launches == 8                 # 2 cases x 2 distributions x 2 calls
    assert r.backend.freed >= 2                    # after the copy measurement and after the job


@pytest.mark.parametrize("kernel, words", [
    ("partial", ["not written", "y[0, 519]"]),
    ("no_work", ["not written"]),
    ("constant", ["but the reference is"]),
    ("modify_input", ["input x[0, 0] was modified"]),
    ("oob", ["out-of-bounds write", "past the end of y"]),
    ("cache_by_pointer", ["call 2", "same buffers"]),
])
def test_cheats_are_wrong_results(kernel, words):
    _CACHE.clear()
    res = runner(KERNELS).run(job(kernel))
    assert res.status is Status.WRONG_RESULT, res.message
    assert len(res.cases) == 1 and "stopped after the first failing case" in res.message
    for w in words:
        assert w in res.cases[0].message, res.cases[0].message
    assert not res.context_lost


def test_hang_is_timeout_and_loses_the_context():
    res = runner(KERNELS).run(job("hang", max_case_seconds=0.5))
    assert res.status is Status.TIMEOUT and res.context_lost
    assert "max_case_seconds=0.5" in res.cases[0].message


def test_fault_is_runtime_error_and_loses_the_context():
    r = runner(KERNELS)
    freed = r.backend.freed
    res = r.run(job("fault"))
    assert res.status is Status.RUNTIME_ERROR and res.context_lost and "700" in res.cases[0].message
    assert r.backend.freed == freed                 # nothing touched on a dead context


def test_plain_launch_error_keeps_the_context():
    res = runner(KERNELS).run(job("launch_error"))
    assert res.status is Status.RUNTIME_ERROR and not res.context_lost


def test_corrupt_cubin_and_missing_kernel():
    res = runner(KERNELS).run(job("corrupt"))
    assert res.status is Status.RUNTIME_ERROR and "did not load" in res.message
    j = job("good")
    j = Job(**{**j.__dict__, "launches": {cid: Launch("other", l.grid, l.block, l.args) for cid, l in j.launches.items()}})
    res = runner(KERNELS).run(j)
    assert res.status is Status.INVALID and "'other' is not in the cubin" in res.cases[0].message


def test_unsupported_case_and_bad_launch_are_invalid():
    j = job("good")
    cases = j.cases
    launches = {cases[0].id: None, cases[1].id: Launch("rmsnorm_fwd", (1, 1, 1), (2048, 1, 1), FAMILY.kernel_args(cases[1]))}
    res = runner(KERNELS).run(Job(**{**j.__dict__, "launches": launches}))
    assert res.status is Status.INVALID
    assert "launch() returned None" in res.cases[0].message and "threads" in res.cases[1].message


def test_family_bug_is_an_internal_error():
    def k_bad_args(be, launch, args):
        raise TypeError("bug in the fake")
    res = runner({"bad": k_bad_args}).run(job("bad"))
    assert res.status is Status.RUNTIME_ERROR and res.extra.get("internal_error")
    assert "judge error" in res.cases[0].message


# -- BENCH stage -----------------------------------------------------------------------------------------
def test_bench_times_candidate_and_baselines():
    r = runner(KERNELS, l2_bytes=1 << 22)
    res = r.run(job("good", BENCH, baselines=("numpy", "wrong", "broken", "absent", "nope")))
    assert res.status is Status.OK, res.message
    c520, c256 = res.cases
    for c in res.cases:
        assert c.time_us > 0 and c.samples == 6 and c.spread_us is not None and c.tbps > 0
        assert c.tbps == pytest.approx(FAMILY.bytes_moved(FAMILY.make_case(c.params["M"], c.params["N"], c.params["dtype"]))
                                       / (c.time_us * 1e-6) / 1e12)
        assert "wrong" in c.baselines_us
        assert "broken" not in c.baselines_us and "absent" not in c.baselines_us
        assert "baseline wrong: disagrees with the reference" in c.message
        assert "shared memory exhausted" in c.message and "not importable" in c.message
        assert "not offered" in c.message
    assert "numpy" not in c520.baselines_us and "does not support" in c520.message
    assert "numpy" in c256.baselines_us
    # flushes: one per timed launch (candidate + 1 or 2 baselines) per round, plus none elsewhere
    rounds = 2 + 6
    assert r.backend.flushes == rounds * 2 + rounds * 3
    # several input sets when they fit in L2
    assert len(next(iter(r._timing.values())).sets) > 1


@pytest.mark.parametrize("status", [1, 700])
def test_a_baseline_refused_by_cuda_while_timed_is_blamed_on_the_candidate_only_when_the_context_is_gone(
        monkeypatch, status):
    """A baseline's own refused CUDA call while timed (status 1, the context alive) is that
    baseline's note, as when it is prepared; a sticky error (an illegal address: maybe the
    candidate's fault surfacing in the baseline's call) is raised, and the worker replaced."""
    def prepare_refused(case, device_inputs):
        calls = []

        def run():
            calls.append(1)
            if len(calls) > 2:                     # past its trial runs on both input sets
                if status in dev.STICKY_CUDA_ERRORS:
                    r.backend.dead = True
                raise FakeCudaError(status)
            return _compute(device_inputs["x"], device_inputs["w"])[0]
        return run

    orig = Family.baselines
    monkeypatch.setattr(Family, "baselines", lambda self: orig(self) + [Baseline("refused", lambda: True,
                                                                                 prepare_refused)])
    r = runner(KERNELS, l2_bytes=1)
    res = r.run(job("good", BENCH, baselines=("refused", "numpy")))
    if status == 1:
        assert res.status is Status.OK and not res.context_lost, res.message
        c = res.cases[1]
        assert "refused" not in c.baselines_us and "numpy" in c.baselines_us
        assert "baseline refused: failed while timed: FakeCudaError" in c.message, c.message
    else:
        assert res.status is Status.RUNTIME_ERROR and res.context_lost, res.message


def test_a_baseline_failing_while_timed_is_dropped_not_blamed_on_the_candidate():
    res = runner(KERNELS, l2_bytes=1).run(job("good", BENCH, baselines=("flaky", "numpy")))
    assert res.status is Status.OK, res.message
    c = res.cases[1]
    assert "flaky" not in c.baselines_us and "numpy" in c.baselines_us
    assert "baseline flaky: failed while timed" in c.message


def test_bench_timing_data_is_cached_across_jobs():
    r = runner(KERNELS)
    r.run(job("good", BENCH))
    first = {k: id(v) for k, v in r._timing.items()}
    r.run(job("good", BENCH))
    assert {k: id(v) for k, v in r._timing.items()} == first


def test_bench_catches_a_kernel_that_stops_working_while_timed():
    # honest through verification (2 calls per BENCH case) and warm-up, lazy afterwards
    r = runner({"lazy": CountingKernel(4, k_no_work)}, l2_bytes=1 << 22)
    res = r.run(job("lazy", BENCH, cases=[FAMILY.make_case(7, 520, "bf16")]))
    assert res.status is Status.WRONG_RESULT
    assert "[timed launches: launch " in res.cases[0].message and "not written" in res.cases[0].message


def test_bench_catches_input_modified_while_timed():
    r = runner({"sneaky": CountingKernel(4, k_modify_input)})
    res = r.run(job("sneaky", BENCH, cases=[FAMILY.make_case(7, 520, "bf16")]))
    assert res.status is Status.WRONG_RESULT and "[timed launches" in res.cases[0].message
    # the buffers stay cached: every job refills them with fresh inputs


def test_bench_slow_launch_is_timeout():
    def k_slow(be, launch, args):
        k_good(be, launch, args)
        time.sleep(0.02)
    res = runner({"slow": k_slow}).run(job("slow", BENCH, max_case_seconds=0.01, reps=2, warmup=0,
                                                baselines=()))
    assert res.status is Status.TIMEOUT and "max_case_seconds" in res.cases[0].message


def test_large_cases_use_the_device_path():
    r = runner(KERNELS, host_limit_elems=100)      # every case is "large": inputs made with xp=backend
    res = r.run(job("good"))
    assert res.status is Status.OK, res.message
    res = r.run(job("partial"))
    assert res.status is Status.WRONG_RESULT



# -- the faster judge: fewer BENCH rounds, reused buffers, cached verdicts, pooled baselines ---------------
def test_bench_verifies_in_two_rounds_and_check_in_four():
    r = runner(KERNELS)
    case = FAMILY.make_case(7, 520, "bf16")
    assert r.run(job("good", CHECK, cases=[case])).status is Status.OK
    assert r.backend.launches == 4
    r.backend.launches = 0
    res = r.run(job("good", BENCH, cases=[case], baselines=()))
    assert res.status is Status.OK, res.message
    assert r.backend.launches == 2 + 2 + 6        # 2 verification rounds, warm-up 2, reps 6


def test_bench_rounds_still_catch_a_pointer_cache():
    _CACHE.clear()
    res = runner(KERNELS).run(job("cache_by_pointer", BENCH, cases=[FAMILY.make_case(7, 520, "bf16")]))
    assert res.status is Status.WRONG_RESULT
    assert "wide inputs, call 2" in res.cases[0].message and "same buffers" in res.cases[0].message


def test_verification_buffers_are_reused_for_the_same_shapes():
    r = runner(KERNELS)
    ins, outs = FAMILY.io(FAMILY.make_case(7, 520, "bf16"))
    a = r._verify_buffers(ins, outs)
    b = r._verify_buffers(ins, outs)
    assert a[0]["x"] is b[0]["x"] and a[1]["y"] is b[1]["y"]
    c = r._verify_buffers(*FAMILY.io(FAMILY.make_case(1, 256, "fp32")))
    assert c[0]["x"] is not a[0]["x"]
    assert r.run(job("good")).status is Status.OK     # shapes alternate between cases


def test_baselines_are_checked_against_the_reference_in_every_job(monkeypatch):
    """Checked on the job's own inputs (never a verdict remembered from another job's)."""
    from fitness import baseline_runs
    r = runner(KERNELS)
    calls = []
    orig = baseline_runs.check_result

    def counting(*a, **kw):
        calls.append(a[-1])
        return orig(*a, **kw)

    monkeypatch.setattr(baseline_runs, "check_result", counting)
    case = FAMILY.make_case(1, 256, "fp32")
    for _ in range(2):
        res = r.run(job("good", BENCH, cases=[case], baselines=("numpy", "wrong")))
        assert res.status is Status.OK and "baseline wrong: disagrees with the reference" in res.cases[0].message
    n_sets = len(next(iter(r._timing.values())).sets)
    assert n_sets >= 2                                # one set per distribution at least
    # the last timed result on the first set, against the candidate's reference, in every job
    assert sorted(calls) == sorted(["numpy", "wrong"] * 2)


def test_device_made_timing_inputs_are_still_checked():
    r = runner({"good": k_good, "lazy": CountingKernel(4, k_no_work)}, host_limit_elems=100, l2_bytes=1 << 22)
    case = FAMILY.make_case(7, 520, "bf16")
    res = r.run(job("good", BENCH, cases=[case]))
    assert res.status is Status.OK, res.message
    res = r.run(job("lazy", BENCH, cases=[case]))
    assert res.status is Status.WRONG_RESULT and "[timed launches" in res.cases[0].message
    assert "not written" in res.cases[0].message


def test_timing_inputs_are_fresh_in_every_job_and_both_distributions_are_timed():
    r = runner({"good": k_good}, l2_bytes=1)                 # large cases: the fewest sets
    case = FAMILY.make_case(7, 520, "bf16")
    seen = []
    for seed in (101, 202):
        j = job("good", BENCH, cases=[case])
        res = r.run(Job(**{**j.__dict__, "timing_seed": seed}))
        assert res.status is Status.OK, res.message
        tb = next(iter(r._timing.values()))
        seen.append([dict(verify.fingerprints(d)) for d in tb.sets])
        x = [dtypes.to_float64(d["x"], "bf16") for d in tb.sets]
        assert len(x) == 2 and np.abs(x[1]).max() > 10 * np.abs(x[0]).max()    # normal, then wide
    assert seen[0][0]["x"] != seen[1][0]["x"] and seen[0][1]["x"] != seen[1][1]["x"]


def test_baselines_are_timed_in_every_job_never_pooled():
    r = runner(KERNELS, l2_bytes=1)
    case = FAMILY.make_case(1, 256, "fp32")
    for _ in range(2):
        r.backend.flushes = 0
        res = r.run(job("good", BENCH, cases=[case], baseline_reps=2)).cases[0]
        assert res.status is Status.OK and res.samples == 6 and "numpy" in res.baselines_us
        assert "pooled" not in res.message
        assert r.backend.flushes == 8 + 2               # candidate in every round, the baseline twice


class AlternatingKernel:
    """Honest for the first `honest` calls, then does no work on every other call: a kernel whose
    median time would be the lazy calls' while half of its outputs are right."""

    def __init__(self, honest: int):
        self.honest, self.calls = honest, 0

    def __call__(self, be, launch, args):
        self.calls += 1
        if self.calls <= self.honest or self.calls % 2 == 0:
            k_good(be, launch, args)
        else:
            k_no_work(be, launch, args)


def test_bench_catches_a_kernel_that_skips_every_other_timed_call():
    # checked timed launches are the last on every set plus random ones; over a few seeds the
    # alternating kernel must always be caught (each check has a 1/2 chance, several checks)
    case = FAMILY.make_case(7, 520, "bf16")
    caught = 0
    for seed in range(6):
        r = runner({"alt": AlternatingKernel(4)}, l2_bytes=1 << 22)
        j = job("alt", BENCH, cases=[case], reps=20)
        res = r.run(Job(**{**j.__dict__, "seed": seed}))
        caught += res.status is Status.WRONG_RESULT
    assert caught == 6


def test_every_timed_launch_finds_a_poisoned_output():
    """No launch can be told from another by its output buffer: each one starts poisoned."""
    case = FAMILY.make_case(7, 520, "bf16")
    r = runner({"good": k_good}, l2_bytes=1 << 22)
    seen: list[bool] = []

    def looking(be, launch, args):
        y = args[2]
        seen.append(bool(dtypes.is_poison(y, "bf16").all()))
        k_good(be, launch, args)

    r.backend.kernels["good"] = looking
    res = r.run(job("good", BENCH, cases=[case], reps=30))
    assert res.status is Status.OK, res.message
    assert len(seen) >= 2 + 30 and all(seen), seen
    assert "launches poisoned and fingerprinted" in res.cases[0].message


def _adaptive(kind: str):
    """Kernels written against the old judge, which poisoned only the launches it then checked."""
    calls = {"computed": 0, "launches": 0}

    def kernel(be, launch, args):
        y = args[2]
        calls["launches"] += 1
        poisoned = bool(dtypes.is_poison(y.reshape(-1)[:1], _dtype_of(y)).all())
        if poisoned:
            calls["computed"] += 1
            k_good(be, launch, args)
        elif kind == "junk":
            y[...] = dtypes.quantize(np.full(y.shape, 3.0), _dtype_of(y))
        # kind == "skip": leave the previous (correct) output in place
    return kernel, calls


@pytest.mark.parametrize("kind", ["skip", "junk"])
def test_a_kernel_that_reads_its_own_output_gains_nothing(kind):
    """Compute only when the output holds the poison: under this judge that is every launch, so
    the cheat is an honest kernel, timed doing all its work."""
    kernel, calls = _adaptive(kind)
    r = runner({"adaptive": kernel}, l2_bytes=1 << 22)
    res = r.run(job("adaptive", BENCH, cases=[FAMILY.make_case(7, 520, "bf16")], reps=20))
    assert res.status is Status.OK, res.message
    assert calls["computed"] == calls["launches"] >= 22


def test_a_kernel_whose_launches_disagree_is_caught_by_the_fingerprints():
    """Correct on the judged launches, one ulp off on others: caught without luck."""
    n = {"i": 0}

    def wobbly(be, launch, args):
        n["i"] += 1
        k_good(be, launch, args)
        if n["i"] % 3 == 0:
            y = args[2]
            y.reshape(-1).view(np.uint16)[5] ^= 1
    r = runner({"wobbly": wobbly}, l2_bytes=1 << 22)
    res = r.run(job("wobbly", BENCH, cases=[FAMILY.make_case(7, 520, "bf16")], reps=20))
    assert res.status is Status.WRONG_RESULT and "wrote other y" in res.cases[0].message, res.cases[0].message


def test_judged_launches_are_drawn_after_they_ran_and_depend_on_the_seed(monkeypatch):
    from fitness import timing as tmod
    case = FAMILY.make_case(7, 520, "bf16")
    got = {}
    for seed in (1, 2, 3, 4):
        r = runner({"good": k_good}, l2_bytes=1 << 22)
        captured = {}
        orig = tmod.time_case

        def spy(*a, **kw):
            out = orig(*a, **kw)
            captured["judged"] = tuple(out.judged)
            return out

        monkeypatch.setattr(dev, "time_case", spy)
        j = job("good", BENCH, cases=[case], reps=40)
        assert r.run(Job(**{**j.__dict__, "timing_seed": seed})).status is Status.OK
        got[seed] = captured["judged"]
    assert len(set(got.values())) > 1, got


def test_the_order_of_implementations_rotates():
    from fitness.timing import rotated
    assert [rotated(["c", "a", "b"], r)[0] for r in range(4)] == ["c", "a", "b", "c"]


def test_long_rounds_cut_the_warm_up_to_one_round():
    # a round longer than WARMUP_BUDGET_S needs one warm-up round, not timing.warmup of them
    case = FAMILY.make_case(7, 520, "bf16")
    calls = {"n": 0}

    def slow(be, launch, args):
        calls["n"] += 1
        time.sleep(tmod.WARMUP_BUDGET_S * 1.5)
        k_good(be, launch, args)

    r = runner({"slow": slow}, l2_bytes=1 << 22)
    res = r.run(job("slow", BENCH, cases=[case], reps=6, warmup=5))
    assert res.status is Status.OK, res.message
    assert res.cases[0].samples == 6
    # 2 verification calls + 1 warm-up + 6 timed launches
    assert calls["n"] == 2 + 1 + 6, calls



def test_slow_host_calls_get_a_launch_shield_fast_ones_do_not():
    class SpinBackend(FakeBackend):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.spins: list[int] = []

        def spin(self, ns):
            self.spins.append(int(ns))

    r = dev.DeviceRunner(0, backend=SpinBackend({"good": k_good}, l2_bytes=1 << 22))
    r._families[("fake_rmsnorm", "fake_root")] = FAMILY
    case = FAMILY.make_case(7, 256, "bf16")
    res = r.run(job("good", BENCH, cases=[case], reps=10, baselines=("slow",)))
    assert res.status is Status.OK, res.message
    spins = r.backend.spins
    # round 0 measures; every later launch of the slow baseline is shielded (>= 1.5 x 300 us)
    # (the numpy stand-in of the candidate is slow on the host too, and gets its own shield)
    assert sum(ns >= 0.45e6 for ns in spins) >= 10, spins
    import re
    m = re.search(r"slow (\d+) us", res.cases[0].message)
    assert "launch shield:" in res.cases[0].message and m and int(m.group(1)) >= 450, res.cases[0].message


def test_launch_shield_grows_only_for_slow_host_calls():
    sh = dev.LaunchShield()
    for _ in range(4):
        sh.record("fast", 5e-6)
        sh.record("slow", 100e-6)
    sh.update()
    assert "fast" not in sh.ns and sh.ns["slow"] == int(tmod.SHIELD_FACTOR * 100e-6 * 1e9)
    for _ in range(8):
        sh.record("slow", 10e-6)                   # a faster stretch does not shrink the shield
    sh.update()
    assert sh.ns["slow"] == int(tmod.SHIELD_FACTOR * 100e-6 * 1e9)
    assert sh.note().startswith("launch shield: slow 150 us")


# -- several launches per case, with a workspace ------------------------------------------------------
class TwoStepFamily(Family):
    """rstd into a workspace by one kernel, y from it by a second (the shape of a backward pass:
    partials, then their reduction)."""

    name = "fake_two_step"

    def workspace(self, case):
        return {"scratch": dev.BufferSpec((case.params["M"],), "float32")}


TWO_STEP = TwoStepFamily(dtypes=("bf16",))


def k_rstd_to_scratch(be, launch, args):
    x, w, scratch = args
    scratch[...] = _compute(x, w)[1]


def k_y_from_scratch(be, launch, args):
    x, w, y, scratch = args
    xf = dtypes.to_float64(x, "bf16").astype(np.float32)
    y[...] = dtypes.quantize((xf * scratch[:, None] * w[None, :]).astype(np.float32), "bf16")


class TwoStepBackend(FakeBackend):
    def load(self, cubin):
        return dict(self.kernels)


def _two_step_job(stage, cases, **timing):
    steps = lambda c: (Launch("rstd", (c.params["M"], 1, 1), (256, 1, 1), ("x", "w", "scratch")),   # noqa: E731
                       Launch("y", (c.params["M"], 1, 1), (256, 1, 1), ("x", "w", "y", "scratch")))
    t = TimingConfig(reps=timing.pop("reps", 6), warmup=2, baselines=(), **timing)
    return Job(job_id=f"two-{stage}", key="two", stage=stage, family="fake_two_step", family_root="fake_root",
               cubin=b"two", cases=tuple(cases), launches={c.id: steps(c) for c in cases}, seed=5, timing=t)


def _two_step_runner(kernels):
    r = dev.DeviceRunner(0, backend=TwoStepBackend(kernels, l2_bytes=1 << 22))
    r._families[("fake_two_step", "fake_root")] = TWO_STEP
    return r


def test_a_case_may_run_several_launches_with_a_workspace():
    cases = [TWO_STEP.make_case(7, 520, "bf16"), TWO_STEP.make_case(3, 1000, "bf16")]
    r = _two_step_runner({"rstd": k_rstd_to_scratch, "y": k_y_from_scratch})
    res = r.run(_two_step_job(CHECK, cases))
    assert res.status is Status.OK, res.message
    r.backend.launches = 0
    res = r.run(_two_step_job(BENCH, cases[:1]))
    assert res.status is Status.OK and res.cases[0].time_us > 0, res.message
    assert r.backend.launches >= 2 * (2 + 6)                  # both kernels in every verified and timed launch


def test_a_second_kernel_cannot_live_off_a_stale_workspace():
    """The first kernel computes only once; the second keeps reading what is in the workspace:
    the workspace is poisoned before every launch sequence, so that fails at once."""
    calls = {"n": 0}

    def k_rstd_once(be, launch, args):
        calls["n"] += 1
        if calls["n"] == 1:
            k_rstd_to_scratch(be, launch, args)

    r = _two_step_runner({"rstd": k_rstd_once, "y": k_y_from_scratch})
    res = r.run(_two_step_job(CHECK, [TWO_STEP.make_case(7, 520, "bf16")]))
    assert res.status is Status.WRONG_RESULT and "call 2" in res.message, res.message


def test_a_workspace_named_like_an_output_is_a_family_bug():
    class Clash(TwoStepFamily):
        def workspace(self, case):
            return {"y": dev.BufferSpec((case.params["M"],), "float32")}

    r = _two_step_runner({"rstd": k_rstd_to_scratch, "y": k_y_from_scratch})
    r._families[("fake_two_step", "fake_root")] = Clash(dtypes=("bf16",))
    res = r.run(_two_step_job(CHECK, [TWO_STEP.make_case(7, 520, "bf16")]))
    assert res.status is Status.RUNTIME_ERROR and res.extra.get("internal_error") and "share names" in res.message


def test_only_a_later_launch_may_overlap_the_one_before_it():
    """Launch.overlap on a case's first launch would let the candidate start under the judge's own
    kernels (the L2 flush, the launch shield's spin) and before its start event: INVALID. On a
    later launch it is the family's permission, and the runner launches it (here in order)."""
    case = TWO_STEP.make_case(7, 520, "bf16")
    r = _two_step_runner({"rstd": k_rstd_to_scratch, "y": k_y_from_scratch})
    job = _two_step_job(CHECK, [case])
    first, second = job.launches[case.id]
    early = replace(job, launches={case.id: (replace(first, overlap=True), second)})
    res = r.run(early)
    assert res.status is Status.INVALID and "launch 1 asks to overlap" in res.message, res.message
    later = replace(job, launches={case.id: (first, replace(second, overlap=True))})
    carveouts = []
    r.backend.prefer_shared_carveout = carveouts.append       # the pair asks the same L1/shared split
    res = r.run(later)
    assert res.status is Status.OK, res.message
    assert carveouts[:2] == [r.backend.kernels["rstd"], r.backend.kernels["y"]]
    carveouts.clear()
    assert r.run(job).status is Status.OK and carveouts == []   # no overlap: the driver's own choice


# -- the streaming ceiling measured again ---------------------------------------------------------------
class CeilingBackend(FakeBackend):
    """A fake GPU whose streaming ceiling is measured as `figures` say, one figure (per pattern) per
    measurement, the last one repeated."""

    def __init__(self, kernels, figures):
        super().__init__(kernels)
        self.figures = list(figures)
        self.measured = 0

    def copy_ceiling_tbps(self):
        parts = self.figures[min(self.measured, len(self.figures) - 1)]
        self.measured += 1
        self.ceiling_parts = dict(parts)
        return max(parts.values())


def _ceiling_runner(figures) -> dev.DeviceRunner:
    r = dev.DeviceRunner(0, backend=CeilingBackend(KERNELS, figures))
    r._families[("fake_rmsnorm", "fake_root")] = FAMILY
    return r


def _suspects(res, ceiling):
    from fitness.objectives import suspect_cases  # noqa: PLC0415

    sizes = {c.id: FAMILY.bytes_moved(c) for c in job("good").cases}
    return suspect_cases(res.cases, sizes, ceiling)


TINY = 1e-9           # TB/s: any fake kernel streams faster than this


def test_a_ceiling_measured_low_is_measured_again_and_the_fastest_figure_per_pattern_stands():
    """Session 30: the H100 worker measured its ceiling at 3.023 TB/s (session 29's: 3.080-3.087) and flagged
    four genomes suspect on launches session 29 had verified unflagged at 3.10-3.11 TB/s. A job with a case
    faster than the worker's ceiling has it measured again before the result leaves; each pattern keeps the
    fastest of the two measurements, and the suspect test then reads the figure the device really streams."""
    r = _ceiling_runner([{"copy": TINY, "add_tiled": 2 * TINY}, {"copy": 5.0, "add_tiled": TINY}])
    assert r.copy_ceiling_tbps == 2 * TINY
    res = r.run(job("good", BENCH))
    assert res.status is Status.OK, res.message
    assert _suspects(res, 2 * TINY) == [c.case for c in res.cases]       # what the first figure would flag
    assert r.backend.measured == 2 and res.copy_ceiling_tbps == 5.0
    assert res.extra["ceiling_tbps_by_pattern"] == {"copy": 5.0, "add_tiled": 2 * TINY}
    assert res.extra["ceiling_rechecks"] == 1
    assert _suspects(res, res.copy_ceiling_tbps) == []
    r.run(job("good", BENCH))                    # now faster than nothing it ran: not measured again
    assert r.backend.measured == 2


def test_a_kernel_faster_than_every_measurement_stays_suspect_and_the_rechecks_are_bounded():
    """A candidate really faster than the device streams (it skipped work the checks did not see) is faster
    than the ceiling however often it is measured: flagged still. A worker measures again at most
    CEILING_RECHECKS times, so a run of such candidates costs a few measurements, not one per job; a job
    slower than the ceiling never triggers one."""
    r = _ceiling_runner([{"copy": TINY}])
    for _ in range(dev.CEILING_RECHECKS + 2):
        res = r.run(job("good", BENCH))
        assert res.status is Status.OK, res.message
        assert res.copy_ceiling_tbps == TINY and _suspects(res, res.copy_ceiling_tbps) == [c.case for c in res.cases]
    assert r.backend.measured == 1 + dev.CEILING_RECHECKS
    assert res.extra["ceiling_rechecks"] == dev.CEILING_RECHECKS
    slow = _ceiling_runner([{"copy": 1e6}])
    assert slow.run(job("good", BENCH)).status is Status.OK and slow.backend.measured == 1
    assert "ceiling_rechecks" not in slow.run(job("good", BENCH)).extra
