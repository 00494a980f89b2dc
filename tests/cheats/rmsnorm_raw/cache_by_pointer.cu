// cheat suite kernel: cache_by_pointer (tests/test_cheats_gpu.py)

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

#define CACHE_SLOTS 4
#define CACHE_ELEMS (1 << 21)
__device__ unsigned long long cache_key[CACHE_SLOTS];
__device__ unsigned long long cache_shape[CACHE_SLOTS];
__device__ int cache_valid[CACHE_SLOTS];
__device__ unsigned int cache_done[CACHE_SLOTS];
__device__ __nv_bfloat16 cache_y[CACHE_SLOTS][CACHE_ELEMS];

extern "C" __global__ void __launch_bounds__(256)
rmsnorm_fwd(const __nv_bfloat16* __restrict__ x, const float* __restrict__ w,
            __nv_bfloat16* __restrict__ y, float* rstd, int M, int N, float eps)
{
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
}
