// cheat suite kernel: fault (tests/test_cheats_gpu.py)

extern "C" __global__ void __launch_bounds__(256)
rmsnorm_fwd(const __nv_bfloat16* __restrict__ x, const float* __restrict__ w,
            __nv_bfloat16* __restrict__ y, float* rstd, int M, int N, float eps)
{
    const int row = blockIdx.x;
    if (row >= M) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
    if (threadIdx.x == 0) {
        volatile float* wild = (volatile float*)(uintptr_t)(0x1000ull + (unsigned)(M & 0));   // unmapped page
        *wild = 1.0f;
    }
}
