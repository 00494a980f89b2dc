"""On the GPU (`pytest -m gpu tests/test_copy_ceiling_gpu.py`): the judge's streaming ceiling is a ceiling.
The suspect test (fitness.objectives.is_suspect) flags a case faster than this figure by 2 %; session 27's
H100 measured 2.98 TB/s by a device-to-device copy alone while torch.add, two reads and a write, ran at
3.07, and three verified genomes as fast as the add were flagged. The ceiling now takes the faster of the
copy and a two-read-one-write stream (fitness.cuda_backend.CupyBackend.copy_ceiling_tbps). That test allowed
the ceiling 2 % below the add and passed on session 28's H100, whose ceiling (2.97-2.99) then flagged verified
children as fast as the add (3.04). Session 29's H100, with the ceiling the fastest of three patterns after a
warm-up: 3.088 TB/s (the tiled stream) against the add's median of 3.093, 0.15 % below it, and no verified genome
was flagged (the table's fastest case ran 3.11). So the test asks what the suspect rule needs: the ceiling within
1 % of the add's median (run-to-run noise, half the rule's 2 %), and the add's fastest repetition, timed as a
candidate would be, not flagged by the judge's own rule (fitness.objectives.is_suspect, its default slack)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_the_ceiling_is_not_below_the_add_kernel_the_backward_is_compared_with():
    cp = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    from fitness.cuda_backend import CupyBackend
    from fitness.objectives import is_suspect
    from fitness.records import CaseResult, Status

    backend = CupyBackend()
    ceiling = backend.copy_ceiling_tbps()
    n = 1 << 29                                          # 2 GiB a tensor (fp32): the 2**31-element cases' scale
    x, y = torch.ones(n, device="cuda"), torch.ones(n, device="cuda")
    out = torch.empty_like(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(20):                                  # the clocks up, as the judge's ceiling warms them
        torch.add(x, y, out=out)
    times = []
    for i in range(12):
        start.record()
        torch.add(x, y, out=out)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    add_tbps = 3 * 4 * n / (float(np.median(times)) * 1e-3) / 1e12
    add_fastest_us = float(min(times)) * 1e3
    del x, y, out
    print(f"ceiling {ceiling:.3f} TB/s by pattern {backend.ceiling_parts}; torch.add median {add_tbps:.3f} TB/s, "
          f"fastest {3 * 4 * n / (add_fastest_us * 1e-6) / 1e12:.3f}")
    assert set(backend.ceiling_parts) == {"copy", "add", "add_tiled"}   # both streams built and ran right
    assert ceiling >= 0.99 * add_tbps, (ceiling, add_tbps, backend.ceiling_parts)
    fastest = CaseResult(case="fp32/add", status=Status.OK, time_us=add_fastest_us)
    assert not is_suspect(fastest, 3 * 4 * n, ceiling), (ceiling, add_fastest_us)
    assert backend._memcpy_tbps(1 << 30, 10) <= ceiling * 1.01   # the max of the patterns, never below the copy
    cp.get_default_memory_pool().free_all_blocks()
