"""KDA on the device (`pytest -m gpu tests/test_kda_gpu.py`): inputs and the float64 reference made
with cupy agree with the host's, and both baselines (where they can be built or imported) pass
the family's tolerances on the smoke matrix and the CHECK cases they support."""

from __future__ import annotations

import numpy as np
import pytest

from fitness import dtypes, verify
from fitness.family import load_family

pytestmark = pytest.mark.gpu
FAMILY = load_family("kda")


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


@pytest.mark.parametrize("case", FAMILY.benchmark_cases("smoke")[:2] + FAMILY.check_cases()[:4], ids=lambda c: c.id)
def test_device_inputs_and_reference_match_the_host(cp, case):
    ins, outs = FAMILY.io(case)
    for i, dist in enumerate(FAMILY.distributions):
        dev = FAMILY.make_inputs(case, cp.random.RandomState(i), dist, xp=cp)
        for name, spec in ins.items():
            assert dev[name].shape == spec.shape and dev[name].dtype == dtypes.storage_dtype(spec.dtype), name
        host = {n: cp.asnumpy(a) for n, a in dev.items()}
        r_dev, r_host = FAMILY.reference(case, dev), FAMILY.reference(case, host)
        for name in outs:
            rel = np.linalg.norm(cp.asnumpy(r_dev[name]) - r_host[name]) / np.linalg.norm(r_host[name])
            assert rel < 1e-12, (case.id, dist, name, rel)


def test_device_recurrent_equals_chunked_on_a_smoke_scenario(cp):
    case = FAMILY.benchmark_cases("smoke")[1]                     # mixed lengths
    dev = FAMILY.make_inputs(case, cp.random.RandomState(7), "long_memory", xp=cp)
    a, b = FAMILY.reference(case, dev), FAMILY.reference(case, dev, method="recurrent")
    for name in a:
        assert float(cp.linalg.norm(a[name] - b[name]) / cp.linalg.norm(b[name])) < 1e-12


@pytest.mark.parametrize("name", ["flashkda", "fla"])
def test_baseline_within_tolerance(cp, name):
    """The adapters hand the libraries the right views, layouts and options: on FlashKDA's own
    input recipe (the first distribution) both must be within tolerance. How they fare on the
    long-memory inputs is a measurement (experiments/device/kda_baselines.py), not asserted."""
    baseline = {b.name: b for b in FAMILY.baselines()}[name]
    if not baseline.available():
        pytest.skip(f"{name} is not available here")
    checked = 0
    dist = FAMILY.distributions[0]
    for i, case in enumerate(FAMILY.benchmark_cases("smoke") + [c for c in FAMILY.check_cases()
                                                              if 0 not in c.params["lens"]]):
        _, outs = FAMILY.io(case)
        tols = FAMILY.tolerances(case)
        dev = FAMILY.make_inputs(case, cp.random.RandomState(100 + i), dist, xp=cp)
        run = baseline.prepare(case, dev)
        if run is None:
            continue
        refs = FAMILY.reference(case, dev)
        for out, value in run.as_outputs(run()).items():
            arr = cp.asarray(value)
            want = dtypes.storage_dtype(outs[out].dtype)
            arr = arr.view(want) if arr.dtype != want else arr
            res = verify.check_output(arr.reshape(outs[out].shape), refs[out], tols[out],
                                      dtypes.canonical(outs[out].dtype), name=out)
            assert res.ok, f"{name} on {case.id} ({dist}): {res.message}"
        checked += 1
    assert checked >= 6
