"""A judge backend on numpy for tests: the surface DeviceRunner and the device scripts call
(fitness.cuda_backend.CupyBackend's), with host arrays, wall-clock events and nothing to wait for.
Tests subclass it and override what they model (kernels, a clock, a device of limited memory)."""

from __future__ import annotations

import time

import numpy as np


class HostEvent:
    """A recorded point in time (perf_counter), as a CUDA event the backend records."""

    def __init__(self):
        self.t = time.perf_counter()


class HostBackend:
    xp = np
    has_device_rng = True
    max_threads = 1024
    max_smem_optin = 227 * 1024
    total_mem = 1 << 32
    l2_bytes = 1 << 20
    flushes = 0

    def describe(self) -> str:
        return "host backend (numpy)"

    def get_kernel(self, module, name):
        return module[name]

    def prepare_kernel(self, kernel, launch):
        pass

    def record(self):
        return HostEvent()

    def elapsed_ms(self, a, b):
        return (b.t - a.t) * 1e3

    def wait(self, event, timeout_s):
        pass

    def synchronize(self, timeout_s):
        pass

    def flush_l2(self):
        self.flushes += 1

    def spin(self, ns):
        pass

    def upload(self, dst, src):
        np.copyto(dst, src)

    def device_rng(self, seed):
        return np.random.default_rng(seed)

    def free_all(self):
        pass

    def copy_ceiling_tbps(self):
        return 4.0

    def cuda_status(self, exc):
        return None

    def context_alive(self):
        return True
