"""On the H200 (`pytest -m gpu tests/test_cluster_launch_gpu.py`): clusters set at launch time and
by-value arguments through fitness.cuda_backend.CupyBackend (cuLaunchKernelEx, fitness.driver_launch),
beside the compile-time path. Each kernel reads its cluster special registers (%cluster_nctarank,
%cluster_ctarank, %clusterid.x) and writes them out per CTA; the probe of arguments writes back a
NULL pointer test, an int, a float, a 128-byte struct passed by value (a CUtensorMap's size and
alignment) and a 64-bit integer. Launch.overlap (programmatic dependent launch): a consumer
launched with it starts while its producer still runs, and one launched without it after. The CPU
half: tests/test_driver_launch.py."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.family import Buffer, ByValue, Launch

pytestmark = pytest.mark.gpu

SOURCE = r"""
struct __align__(64) Blob { unsigned int w[32]; };          // 128 bytes, aligned as a CUtensorMap

__device__ __forceinline__ void probe(unsigned int* out) {
    unsigned int n, r, c;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(c));
    if (threadIdx.x == 0) { out[3 * blockIdx.x] = n; out[3 * blockIdx.x + 1] = r; out[3 * blockIdx.x + 2] = c; }
}

extern "C" __global__ void probe_runtime(unsigned int* out) { probe(out); }
extern "C" __global__ void __cluster_dims__(2, 1, 1) probe_compiled(unsigned int* out) { probe(out); }

extern "C" __global__ void probe_args(unsigned int* out, const float* nothing, int a, float b,
                                      const __grid_constant__ Blob blob, unsigned long long c) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        out[0] = nothing == nullptr;
        out[1] = (unsigned int)a;
        out[2] = __float_as_uint(b);
        for (int i = 0; i < 32; i++) out[3 + i] = blob.w[i];
        out[35] = (unsigned int)c;
        out[36] = (unsigned int)(c >> 32);
    }
}

// Launch.overlap: the producer lets its dependents start at once, spins spin_ns on the global
// timer, then publishes a word and a release flag; the consumer notes when it started, waits for
// the flag with acquire loads and reads the word (a consumer that never overlaps finds the flag set)
__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void pdl_producer(unsigned int* flag, unsigned long long* times, unsigned int spin_ns) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const unsigned long long t0 = now_ns();
    unsigned long long t = t0;
    while (t - t0 < spin_ns) t = now_ns();
    if (threadIdx.x == 0) {
        flag[1] = 42u;
        __threadfence();
        asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(flag), "r"(1u) : "memory");
        times[0] = t0;
        times[1] = now_ns();
    }
}

// KDA v7's shape (kernels/kda/README.md "v7"): a persistent producer of prep's footprint (256
// threads, 43 KB of dynamic shared memory, 3 CTAs an SM) that lets its dependents start at once,
// and consumer CTAs of kda_rec's (128 threads, 57 KB): each CTA writes its SM and when it ran
__device__ __forceinline__ unsigned int sm_id() {
    unsigned int s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

extern "C" __global__ void __launch_bounds__(256, 3) pdl_wide_producer(unsigned long long* spans, unsigned int spin_ns) {
    extern __shared__ unsigned int smem[];
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const unsigned long long t0 = now_ns();
    smem[threadIdx.x] = threadIdx.x;
    unsigned long long t = t0;
    while (t - t0 < spin_ns) t = now_ns();
    __syncthreads();
    if (threadIdx.x == 0) {
        spans[3 * blockIdx.x] = sm_id() + smem[1] - 1;     // (smem read: the shared memory is used)
        spans[3 * blockIdx.x + 1] = t0;
        spans[3 * blockIdx.x + 2] = now_ns();
    }
}

extern "C" __global__ void __launch_bounds__(128, 1) pdl_wide_consumer(unsigned long long* spans) {
    extern __shared__ unsigned int smem[];
    smem[threadIdx.x] = threadIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) {
        spans[3 * blockIdx.x] = sm_id() + smem[1] - 1;
        spans[3 * blockIdx.x + 1] = now_ns();
    }
}

extern "C" __global__ void pdl_consumer(unsigned int* flag, unsigned long long* times, unsigned int* out) {
    if (threadIdx.x == 0) {
        times[2] = now_ns();
        unsigned int v = 0;
        while (v != 1u) asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
        out[0] = flag[1];
    }
}
"""


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    pytest.importorskip("cupy")
    from fitness.compile import Compiler
    from fitness.cuda_backend import CupyBackend

    res = Compiler(tmp_path_factory.mktemp("cc")).compile(SOURCE)
    assert res.ok, res.log
    backend = CupyBackend(0)
    module = backend.load(res.cubin())
    return backend, module


def _run(gpu, name, launch, out, extra=()):
    backend, module = gpu
    k = backend.get_kernel(module, name)
    backend.prepare_kernel(k, launch)
    backend.launch(k, launch, [out, *extra])
    backend.synchronize(10.0)
    return out.get()


@pytest.mark.parametrize("c", [2, 4, 16])            # 16: non-portable, opted in per kernel
def test_a_cluster_set_at_launch_time(gpu, c):
    cp = gpu[0].cp
    grid = 2 * c
    out = cp.full(3 * grid, 0xFFFFFFFF, dtype=cp.uint32)
    got = _run(gpu, "probe_runtime", Launch("probe_runtime", (grid, 1, 1), (32, 1, 1), (Buffer("out"),),
                                            cluster=(c, 1, 1)), out).reshape(grid, 3)
    b = np.arange(grid)
    assert (got[:, 0] == c).all() and (got[:, 1] == b % c).all() and (got[:, 2] == b // c).all(), got


def test_without_a_cluster_each_cta_is_its_own(gpu):
    cp = gpu[0].cp
    out = cp.full(3 * 4, 0xFFFFFFFF, dtype=cp.uint32)
    got = _run(gpu, "probe_runtime", Launch("probe_runtime", (4, 1, 1), (32, 1, 1), ("out",)), out).reshape(4, 3)
    assert (got[:, 0] == 1).all() and (got[:, 1] == 0).all() and (got[:, 2] == np.arange(4)).all()


def test_the_compile_time_cluster_still_launches_through_cupy(gpu):
    from fitness.cuda_backend import LaunchInvalid

    cp = gpu[0].cp
    for cluster in ((2, 1, 1), (1, 1, 1)):               # repeated, or left to the kernel
        out = cp.full(3 * 8, 0xFFFFFFFF, dtype=cp.uint32)
        got = _run(gpu, "probe_compiled", Launch("probe_compiled", (8, 1, 1), (32, 1, 1), ("out",), cluster=cluster),
                   out).reshape(8, 3)
        assert (got[:, 0] == 2).all() and (got[:, 1] == np.arange(8) % 2).all()
    backend, module = gpu
    with pytest.raises(LaunchInvalid, match="differs from the kernel's __cluster_dims__"):
        backend.prepare_kernel(backend.get_kernel(module, "probe_compiled"),
                               Launch("probe_compiled", (8, 1, 1), (32, 1, 1), ("out",), cluster=(4, 1, 1)))
    with pytest.raises(LaunchInvalid, match="at most 16"):
        backend.prepare_kernel(backend.get_kernel(module, "probe_runtime"),
                               Launch("probe_runtime", (32, 1, 1), (32, 1, 1), ("out",), cluster=(32, 1, 1)))


@pytest.mark.parametrize("cluster", [(1, 1, 1), (2, 1, 1)])
def test_by_value_arguments_reach_the_kernel(gpu, cluster):
    cp = gpu[0].cp
    words = np.arange(32, dtype=np.uint32) * 0x01010101 + 7
    out = cp.zeros(37, dtype=cp.uint32)
    launch = Launch("probe_args", (2, 1, 1), (32, 1, 1),
                    ("out", None, np.int32(-12345), np.float32(3.25), ByValue(words.tobytes(), 64, "blob"),
                     np.uint64(0x0123_4567_89AB_CDEF)), cluster=cluster)
    got = _run(gpu, "probe_args", launch, out, extra=[None, np.int32(-12345), np.float32(3.25),
                                                      ByValue(words.tobytes(), 64, "blob"), np.uint64(0x0123_4567_89AB_CDEF)])
    assert got[0] == 1 and got[1] == np.uint32(np.int32(-12345).view(np.uint32))
    assert got[2] == np.float32(3.25).view(np.uint32) and (got[3:35] == words).all()
    assert (int(got[36]) << 32 | int(got[35])) == 0x0123_4567_89AB_CDEF


@pytest.mark.parametrize("stream", ["default", "created"])
@pytest.mark.parametrize("overlap", [True, False])
def test_an_overlapping_launch_starts_before_its_producer_ends(gpu, overlap, stream):
    """The consumer with Launch.overlap starts while the producer (one CTA, 2 ms on the global
    timer after griddepcontrol.launch_dependents) still runs and still reads its release-published
    word; without overlap it starts after the producer's end. On the judge's stream (cupy's current
    one: the legacy default stream) and on a created non-blocking stream, both kernels asking the
    carveout of the most shared memory as the runner does for an overlapping pair."""
    backend, module = gpu
    cp = backend.cp
    flag, times, out = cp.zeros(2, dtype=cp.uint32), cp.zeros(3, dtype=cp.uint64), cp.zeros(1, dtype=cp.uint32)
    spin = np.uint32(2_000_000)
    prod = Launch("pdl_producer", (1, 1, 1), (32, 1, 1), ("flag", "times", spin))
    cons = Launch("pdl_consumer", (1, 1, 1), (32, 1, 1), ("flag", "times", "out"), overlap=overlap)
    kp, kc = backend.get_kernel(module, "pdl_producer"), backend.get_kernel(module, "pdl_consumer")
    backend.prepare_kernel(kp, prod)
    backend.prepare_kernel(kc, cons)
    backend.prefer_shared_carveout(kp)
    backend.prefer_shared_carveout(kc)
    s = cp.cuda.Stream(non_blocking=True) if stream == "created" else cp.cuda.get_current_stream()
    cp.cuda.Device().synchronize()                   # the zeros are written before either launch
    with s:
        backend.launch(kp, prod, [flag, times, spin])
        backend.launch(kc, cons, [flag, times, out])
        s.synchronize()
    t = times.get()
    assert int(out.get()[0]) == 42
    assert int(t[1]) - int(t[0]) >= int(spin)
    if overlap:
        assert int(t[2]) < int(t[1]), f"the consumer started {int(t[2]) - int(t[1])} ns after the producer's end"
    else:
        assert int(t[2]) >= int(t[1])


def test_consumers_of_kda_recs_footprint_run_beside_a_persistent_producer(gpu):
    """The premise of KDA v7 with its kernels' footprints: 3 x 132 persistent producer CTAs (256
    threads, 43,136 B of shared memory each) lasting 3 ms, then 132 consumer CTAs (128 threads,
    57,984 B) launched with overlap: most consumers start while the producers still run, on SMs
    that hold producers (the shared memory left beside 3 of them fits one). Both kernels ask the
    carveout of the most shared memory, as the runner does for an overlapping pair."""
    backend, module = gpu
    cp = backend.cp
    sms = backend.sm_count
    prod_n, cons_n = 3 * sms, sms
    spin = np.uint32(3_000_000)
    prod_spans, cons_spans = cp.zeros(3 * prod_n, dtype=cp.uint64), cp.zeros(3 * cons_n, dtype=cp.uint64)
    prod = Launch("pdl_wide_producer", (prod_n, 1, 1), (256, 1, 1), ("p", spin), shared_bytes=42112)
    cons = Launch("pdl_wide_consumer", (cons_n, 1, 1), (128, 1, 1), ("c",), shared_bytes=56960, overlap=True)
    kp, kc = backend.get_kernel(module, "pdl_wide_producer"), backend.get_kernel(module, "pdl_wide_consumer")
    for k, launch in ((kp, prod), (kc, cons)):
        backend.prepare_kernel(k, launch)
        backend.prefer_shared_carveout(k)
    cp.cuda.Device().synchronize()
    backend.launch(kp, prod, [prod_spans, spin])
    backend.launch(kc, cons, [cons_spans])
    backend.synchronize(10.0)
    p, c = prod_spans.get().reshape(prod_n, 3), cons_spans.get().reshape(cons_n, 3)
    prod_end = int(p[:, 2].max())
    early = c[c[:, 1].astype(np.int64) < prod_end]
    beside = {int(x) for x in early[:, 0]} & {int(x) for x in p[:, 0]}
    assert len(early) >= cons_n // 2, f"{len(early)} of {cons_n} consumer CTAs started before the producers ended"
    assert len(beside) >= len(early) // 2, "the early consumers did not share SMs with the producers"
