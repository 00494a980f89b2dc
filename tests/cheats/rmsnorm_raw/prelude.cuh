// The shared part of every cheat suite kernel (tests/test_cheats_gpu.py puts it after each
// kernel's first line): a CTA-wide sum and one honest row of RMSNorm.
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

// The RMSNorm forward convention of kernels/rmsnorm/operation.py, one CTA of 256 threads per row.
#define RMSNORM_FWD(name)                                                                     \
    extern "C" __global__ void __launch_bounds__(256)                                         \
    name(const __nv_bfloat16* __restrict__ x, const float* __restrict__ w,                    \
         __nv_bfloat16* __restrict__ y, float* rstd, int M, int N, float eps)
