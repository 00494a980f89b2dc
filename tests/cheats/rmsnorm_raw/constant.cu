// cheat suite kernel: constant (tests/test_cheats_gpu.py)

RMSNORM_FWD(rmsnorm_fwd)
{
    const int row = blockIdx.x;
    if (row >= M) return;
    const size_t base = (size_t)row * (size_t)N;
    for (int j = threadIdx.x; j < N; j += blockDim.x) y[base + j] = __float2bfloat16(1.0f);
    if (rstd != nullptr && threadIdx.x == 0) rstd[row] = 1.0f;
}
