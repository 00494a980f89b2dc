// cheat suite kernel: out_of_bounds_write (tests/test_cheats_gpu.py)

extern "C" __global__ void __launch_bounds__(256)
rmsnorm_fwd(const __nv_bfloat16* __restrict__ x, const float* __restrict__ w,
            __nv_bfloat16* __restrict__ y, float* rstd, int M, int N, float eps)
{
    const int row = blockIdx.x;
    if (row >= M) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
    if (row == M - 1 && threadIdx.x < 8)
        y[(size_t)M * (size_t)N + threadIdx.x] = __float2bfloat16(1.0f);   // past the end of y
}
