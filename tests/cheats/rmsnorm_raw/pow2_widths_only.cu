// cheat suite kernel: pow2_widths_only (tests/test_cheats_gpu.py)

RMSNORM_FWD(rmsnorm_fwd)
{
    const int row = blockIdx.x;
    if (row >= M) return;
    const int ncols = N > 8192 ? (N & ~1023) : N;        // long rows: whole 1024-column tiles only
    rmsnorm_row(x, w, y, rstd, row, N, eps, ncols);
}
