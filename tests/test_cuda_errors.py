"""fitness.cuda_errors: every mapped CUDA runtime's pending error is cleared, nothing is loaded anew,
and nothing raises (the judge calls it after a baseline fails; see its docstring for why)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fitness.cuda_errors import clear_pending_errors, loaded_runtimes

MAPS = [
    "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6",
    "7f10-7f11 r-xp 00000000 08:01 2 /venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13",
    "7f11-7f12 r--p 00010000 08:01 2 /venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13",
    "7f20-7f21 r-xp 00000000 08:01 3 /opt/cupy/lib/libcudart.so.13.0.88",
    "7f30-7f31 r-xp 00000000 08:01 4 /opt/x/libcudart_static_helper.so",
    "7f40-7f41 rw-p 00000000 00:00 0 ",
    "7f50-7f51 r-xp 00000000 08:01 5 /usr/local/cuda/lib64/libcudart.so",
]


def test_loaded_runtimes_lists_each_shared_runtime_once():
    assert loaded_runtimes(MAPS) == [
        "/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13",
        "/opt/cupy/lib/libcudart.so.13.0.88",
        "/usr/local/cuda/lib64/libcudart.so",
    ]


class _Runtime:
    """One runtime instance's last-error state, as cudaGetLastError treats it."""

    def __init__(self, pending: int = 0):
        self.pending = pending
        self.calls = 0

    def cudaGetLastError(self):  # noqa: N802 - the C name
        self.calls += 1
        code, self.pending = self.pending, 0
        return code


def test_every_runtime_is_cleared_and_the_cleared_errors_are_reported():
    rts = {"a": _Runtime(1), "b": _Runtime(0), "c": _Runtime(719)}
    assert clear_pending_errors(["a", "b", "c"], opener=rts.__getitem__) == {"a": 1, "c": 719}
    assert all(r.pending == 0 and r.calls == 1 for r in rts.values())
    assert clear_pending_errors(["a", "b", "c"], opener=rts.__getitem__) == {}


def test_a_runtime_that_cannot_be_opened_is_skipped_not_raised():
    def opener(path):
        if path == "gone":
            raise OSError("not loaded")
        return _Runtime(1)
    assert clear_pending_errors(["gone", "here"], opener=opener) == {"here": 1}


RUNTIME = next((p for p in ("/usr/local/cuda/lib64/libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so")
                if Path(p).exists()), None)


@pytest.mark.skipif(RUNTIME is None, reason="no CUDA runtime library here")
def test_the_real_call_never_loads_a_runtime_this_process_has_not_mapped():
    """RTLD_NOLOAD: in a fresh process that has not mapped the runtime, clearing it (by its real
    path, a library that exists) opens nothing: it is still not mapped afterwards."""
    code = ("from fitness.cuda_errors import clear_pending_errors, loaded_runtimes;"
            "assert loaded_runtimes() == [], loaded_runtimes();"
            f"assert clear_pending_errors([{RUNTIME!r}]) == {{}};"
            "assert loaded_runtimes() == [], loaded_runtimes()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.skipif(RUNTIME is None, reason="no CUDA runtime library here")
def test_a_refused_runtime_call_is_found_pending_in_the_real_library():
    """In a fresh process: the runtime is found in the maps once loaded, and a refused call
    (cudaSetDevice of a device that does not exist; without a driver every call is refused)
    leaves an error that clear_pending_errors reports under that library's path."""
    code = (f"import ctypes; lib = ctypes.CDLL({RUNTIME!r});"
            "from fitness.cuda_errors import clear_pending_errors, loaded_runtimes;"
            "assert loaded_runtimes(), 'not mapped';"
            "rc = lib.cudaSetDevice(9999); assert rc != 0, rc;"
            "got = clear_pending_errors(); print(sorted(got.values()));"
            "assert list(got) == loaded_runtimes() and all(got.values()), got")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]


def test_the_judge_clears_the_runtime_after_a_baseline_fails_while_timed(monkeypatch):
    import fitness.timing
    from fitness.records import Status
    from tests.test_device_runner import BENCH, KERNELS, job, runner
    calls = []
    monkeypatch.setattr(fitness.timing, "clear_pending_errors", lambda: calls.append("timed") or {})
    res = runner(KERNELS, l2_bytes=1).run(job("good", BENCH, baselines=("flaky", "numpy")))
    assert res.status is Status.OK and "baseline flaky: failed while timed" in res.cases[1].message
    assert calls and set(calls) == {"timed"}


def test_the_judge_clears_the_runtime_after_a_baseline_fails_when_prepared(monkeypatch):
    """The H200 case: INT21's trial run raised (a refused launch), and the error it left pending
    surfaced in the next baseline's call."""
    import fitness.baseline_runs
    from fitness.records import Status
    from tests.test_device_runner import BENCH, KERNELS, job, runner
    calls = []
    monkeypatch.setattr(fitness.baseline_runs, "clear_pending_errors", lambda: calls.append("prepared") or {})
    res = runner(KERNELS, l2_bytes=1 << 22).run(job("good", BENCH, baselines=("broken", "numpy")))
    assert res.status is Status.OK and all("shared memory exhausted" in c.message for c in res.cases)
    assert calls and set(calls) == {"prepared"}


class _HungRuntime:
    """cupy's runtime as a hung kernel leaves it: every event stays not ready (cudaErrorNotReady)."""

    def eventQuery(self, ptr):  # noqa: N802 - cupy's name
        return 600

    def deviceSynchronize(self):  # noqa: N802 - blocks as long as the kernel hangs (here: 3 s)
        import time
        time.sleep(3.0)


def _fake_cupy(runtime):
    import types
    import numpy as np

    class Event:
        ptr = 1

        def record(self):
            pass

        def synchronize(self):
            pass

    cuda = types.SimpleNamespace(runtime=runtime, Event=Event)
    return types.SimpleNamespace(cuda=cuda, arange=np.arange, float32=np.float32)


def test_context_alive_gives_up_on_a_hung_kernel_instead_of_blocking():
    """After a baseline's CUDA error the judge asks whether the context is alive; with the
    candidate's kernel hung on the device, the probe must come back (False: not usable) within its
    timeout, not wait in cudaDeviceSynchronize until the pool's job timeout."""
    import time

    from fitness.cuda_backend import CupyBackend

    backend = object.__new__(CupyBackend)
    backend.cp = _fake_cupy(_HungRuntime())
    t0 = time.monotonic()
    assert backend.context_alive(timeout_s=0.2) is False
    assert time.monotonic() - t0 < 2.0


def test_context_alive_is_true_when_the_queue_drains_and_the_probe_computes():
    from fitness.cuda_backend import CupyBackend

    class Drained(_HungRuntime):
        def eventQuery(self, ptr):  # noqa: N802
            return 0

    backend = object.__new__(CupyBackend)
    backend.cp = _fake_cupy(Drained())
    assert backend.context_alive(timeout_s=0.2) is True
