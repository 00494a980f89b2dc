"""fitness.memfill: poison patterns written by the driver's memset must equal array.fill."""

from __future__ import annotations

import numpy as np
import pytest

from fitness import dtypes, memfill


@pytest.mark.parametrize("dt", ["bf16", "fp16", "fp32", "fp64"])
def test_numpy_arrays_fall_back_to_fill(dt):
    a = np.zeros(1001, dtype=dtypes.bits_dtype(dt))
    memfill.fill(a, dtypes.poison_bits(dt))
    assert (a == dtypes.poison_bits(dt)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["bf16", "fp16", "fp32", "fp64"])
@pytest.mark.parametrize("n", [1, 7, 4099, (1 << 20) + 3])
def test_device_fill_equals_cupy_fill(dt, n):
    cp = pytest.importorskip("cupy")
    bits = dtypes.bits_dtype(dt)
    full = cp.zeros(n + 16, dtype=bits)
    view = full[5:5 + n]                           # an offset slice, as GuardedBuffer.data is
    memfill.fill(view, dtypes.poison_bits(dt))
    want = cp.zeros(n + 16, dtype=bits)
    want[5:5 + n].fill(dtypes.poison_bits(dt))
    cp.cuda.runtime.deviceSynchronize()
    assert bool((full == want).all())
