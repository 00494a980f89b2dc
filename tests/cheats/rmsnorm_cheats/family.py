"""A kernel family of cheats: RMSNorm forward (bf16 x, fp32 w) kernels that try to fool the judge.

Loaded like any family, by path: `load_family("rmsnorm_cheats", root=Path("tests/cheats"))`. Its
gene space (space.py beside this file) has one Choice gene, `variant`; every variant renders one
kernel with the RMSNorm forward convention of kernels/rmsnorm/operation.py:

    extern "C" __global__ void rmsnorm_fwd(const __nv_bfloat16* x, const float* w,
                                           __nv_bfloat16* y, float* rstd, int M, int N, float eps)

launched with one 256-thread CTA per row. tests/test_cheats_gpu.py runs each through the real
pipeline and asserts the verdict: `good` must be OK, every cheat must be caught.
"""

from __future__ import annotations

from fitness.family import KERNELS_DIR, Launch, import_sibling

_op = import_sibling(str(KERNELS_DIR / "rmsnorm" / "family.py"), "operation")
_space = import_sibling(__file__, "space")

VARIANTS = _space.VARIANTS
SPACE = _space.SPACE
THREADS = 256

_PRELUDE = r"""
#include <cuda_bf16.h>
#include <stdint.h>

// Sum over the CTA; every thread gets the total. Called once per kernel invocation.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_sums[32];
    __shared__ float total;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        const int n_warps = (blockDim.x + 31) >> 5;
        float s = lane < n_warps ? warp_sums[lane] : 0.f;
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

// One row of RMSNorm; stores the first `ncols` columns of y (all of them when ncols == N).
__device__ __forceinline__ float rmsnorm_row(const __nv_bfloat16* __restrict__ x, const float* __restrict__ w,
                                             __nv_bfloat16* __restrict__ y, float* rstd,
                                             int row, int N, float eps, int ncols) {
    const size_t base = (size_t)row * (size_t)N;
    float s = 0.f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) {
        const float v = __bfloat162float(x[base + j]);
        s += v * v;
    }
    s = block_sum(s);
    const float r = rsqrtf(s / (float)N + eps);
    if (rstd != nullptr && threadIdx.x == 0) rstd[row] = r;
    for (int j = threadIdx.x; j < ncols; j += blockDim.x) {
        const float v = __bfloat162float(x[base + j]);
        y[base + j] = __float2bfloat16(v * r * w[j]);
    }
    return r;
}
"""

_SIGNATURE = r"""
extern "C" __global__ void __launch_bounds__(256)
rmsnorm_fwd(const __nv_bfloat16* __restrict__ x, const float* __restrict__ w,
            __nv_bfloat16* __restrict__ y, float* rstd, int M, int N, float eps)
"""

_GLOBALS = {
    "cache_by_pointer": r"""
#define CACHE_SLOTS 4
#define CACHE_ELEMS (1 << 21)
__device__ unsigned long long cache_key[CACHE_SLOTS];
__device__ unsigned long long cache_shape[CACHE_SLOTS];
__device__ int cache_valid[CACHE_SLOTS];
__device__ unsigned int cache_done[CACHE_SLOTS];
__device__ __nv_bfloat16 cache_y[CACHE_SLOTS][CACHE_ELEMS];
""",
    "infinite_loop": r"""
__device__ volatile int never_set = 0;
""",
}

_BODIES = {
    "good": r"""
    const int row = blockIdx.x;
    if (row >= M) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
""",
    "partial_write": r"""
    const int row = blockIdx.x;
    if (row >= M) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N - 1);      // the last column is never stored
""",
    "constant": r"""
    const int row = blockIdx.x;
    if (row >= M) return;
    const size_t base = (size_t)row * (size_t)N;
    for (int j = threadIdx.x; j < N; j += blockDim.x) y[base + j] = __float2bfloat16(1.0f);
    if (rstd != nullptr && threadIdx.x == 0) rstd[row] = 1.0f;
""",
    "cache_by_pointer": r"""
    const int row = blockIdx.x;
    if (row >= M) return;
    const size_t total = (size_t)M * (size_t)N;
    const unsigned long long key = (unsigned long long)(uintptr_t)x;
    const unsigned long long shape = ((unsigned long long)M << 32) | (unsigned int)N;
    const int slot = (int)((key >> 8) % CACHE_SLOTS);
    const bool cacheable = total <= (size_t)CACHE_ELEMS;
    __shared__ int hit;
    if (threadIdx.x == 0)
        hit = cacheable && cache_valid[slot] && cache_key[slot] == key && cache_shape[slot] == shape;
    __syncthreads();
    const size_t base = (size_t)row * (size_t)N;
    if (hit) {                                            // same pointer as before: replay
        for (int j = threadIdx.x; j < N; j += blockDim.x) y[base + j] = cache_y[slot][base + j];
        return;
    }
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
    if (!cacheable) return;
    for (int j = threadIdx.x; j < N; j += blockDim.x) cache_y[slot][base + j] = y[base + j];
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        // the last CTA to finish publishes the entry: every CTA of this launch has read `hit` by then
        const unsigned int done = atomicAdd(&cache_done[slot], 1u) + 1u;
        if (done == gridDim.x) {
            cache_key[slot] = key;
            cache_shape[slot] = shape;
            cache_valid[slot] = 1;
            cache_done[slot] = 0;
            __threadfence();
        }
    }
""",
    "stale_output": r"""
    const int row = blockIdx.x;
    if (row >= M) return;
    const size_t base = (size_t)row * (size_t)N;
    float s = 0.f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) {
        const float v = __bfloat162float(x[base + j]);
        s += v * v;
    }
    s = block_sum(s);
    if (rstd != nullptr && threadIdx.x == 0) rstd[row] = rsqrtf(s / (float)N + eps);
    // y is left as it was
""",
    "modify_input": r"""
    const int row = blockIdx.x;
    if (row >= M) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
    __syncthreads();                                      // every read of this row is done
    if (threadIdx.x == 0) {
        unsigned short* bits = (unsigned short*)(x + (size_t)row * (size_t)N);
        bits[0] ^= 1u;                                    // flip the lowest mantissa bit
    }
""",
    "no_work": r"""
    return;
""",
    "out_of_bounds_write": r"""
    const int row = blockIdx.x;
    if (row >= M) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
    if (row == M - 1 && threadIdx.x < 8)
        y[(size_t)M * (size_t)N + threadIdx.x] = __float2bfloat16(1.0f);   // past the end of y
""",
    "infinite_loop": r"""
    while (!never_set) { __nanosleep(1000); }
    const int row = blockIdx.x;
    if (row >= M) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
""",
    "too_much_smem": r"""
    __shared__ float big[300 * 1024 / 4];                 // 300 KB: more than any CTA may have
    const int row = blockIdx.x;
    if (row >= M) return;
    const size_t base = (size_t)row * (size_t)N;
    for (int j = threadIdx.x; j < N; j += blockDim.x) big[(j * 977) % (300 * 256)] = __bfloat162float(x[base + j]);
    __syncthreads();
    for (int j = threadIdx.x; j < N; j += blockDim.x) y[base + j] = __float2bfloat16(big[(j * 977) % (300 * 256)] * w[j]);
""",
    "fault": r"""
    const int row = blockIdx.x;
    if (row >= M) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
    if (threadIdx.x == 0) {
        volatile float* wild = (volatile float*)(uintptr_t)(0x1000ull + (unsigned)(M & 0));   // unmapped page
        *wild = 1.0f;
    }
""",
}

assert set(_BODIES) == set(VARIANTS), "every variant needs a kernel body"


def render_variant(variant: str) -> str:
    if variant not in _BODIES:
        raise ValueError(f"unknown cheat variant {variant!r}; known: {list(VARIANTS)}")
    return (f"// rmsnorm_cheats variant: {variant}\n" + _PRELUDE + _GLOBALS.get(variant, "")
            + _SIGNATURE + "{" + _BODIES[variant] + "}\n")


class RMSNormCheats(_op.RMSNormOperation):
    name = "rmsnorm_cheats"
    space_name = "rmsnorm_cheats"

    def __init__(self) -> None:
        super().__init__(dtypes=("bf16",))

    def render(self, genome) -> str:
        return render_variant(genome["variant"])

    def launch(self, genome, case) -> Launch | None:
        if case.params["dtype"] != "bf16" or case.params.get("weight_dtype", "fp32") != "fp32":
            return None
        return Launch(kernel="rmsnorm_fwd", grid=(int(case.params["M"]), 1, 1), block=(THREADS, 1, 1),
                      args=self.kernel_args(case))


FAMILY = RMSNormCheats()
