// cheat suite kernel: compute_if_poisoned (tests/test_cheats_gpu.py)

extern "C" __global__ void __launch_bounds__(256)
rmsnorm_fwd(const __nv_bfloat16* __restrict__ x, const float* __restrict__ w,
            __nv_bfloat16* __restrict__ y, float* rstd, int M, int N, float eps)
{
    // against a judge that poisons only the launches it checks: skip the work of a row whenever
    // its output does not hold the poison pattern (bf16 poison 0x7FC1), keeping the old result
    const int row = blockIdx.x;
    if (row >= M) return;
    if (((const unsigned short*)y)[(size_t)row * (size_t)N] != 0x7FC1u) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
}
