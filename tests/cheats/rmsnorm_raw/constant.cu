// cheat suite kernel: constant (tests/test_cheats_gpu.py)

extern "C" __global__ void __launch_bounds__(256)
rmsnorm_fwd(const __nv_bfloat16* __restrict__ x, const float* __restrict__ w,
            __nv_bfloat16* __restrict__ y, float* rstd, int M, int N, float eps)
{
    const int row = blockIdx.x;
    if (row >= M) return;
    const size_t base = (size_t)row * (size_t)N;
    for (int j = threadIdx.x; j < N; j += blockDim.x) y[base + j] = __float2bfloat16(1.0f);
    if (rstd != nullptr && threadIdx.x == 0) rstd[row] = 1.0f;
}
