// cheat suite kernel: rows_16bit (tests/test_cheats_gpu.py)

RMSNORM_FWD(rmsnorm_fwd)
{
    const int row = blockIdx.x & 0xFFFF;                  // row index folded into 16 bits
    if (row >= M) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
}
