// cheat suite kernel: no_work (tests/test_cheats_gpu.py)

extern "C" __global__ void __launch_bounds__(256)
rmsnorm_fwd(const __nv_bfloat16* __restrict__ x, const float* __restrict__ w,
            __nv_bfloat16* __restrict__ y, float* rstd, int M, int N, float eps)
{
    return;
}
