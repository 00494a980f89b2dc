// cheat suite kernel: far_write (tests/test_cheats_gpu.py)

RMSNORM_FWD(rmsnorm_fwd)
{
    const int row = blockIdx.x;
    if (row >= M) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
    const size_t total = (size_t)M * (size_t)N;
    if (row == M - 1 && threadIdx.x == 0) y[total + total / 2 + 1000] = __float2bfloat16(1.0f);   // far past the end
}
