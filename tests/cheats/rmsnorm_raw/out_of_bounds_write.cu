// cheat suite kernel: out_of_bounds_write (tests/test_cheats_gpu.py)

RMSNORM_FWD(rmsnorm_fwd)
{
    const int row = blockIdx.x;
    if (row >= M) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
    if (row == M - 1 && threadIdx.x < 8)
        y[(size_t)M * (size_t)N + threadIdx.x] = __float2bfloat16(1.0f);   // past the end of y
}
