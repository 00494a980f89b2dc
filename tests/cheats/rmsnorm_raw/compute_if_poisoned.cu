// cheat suite kernel: compute_if_poisoned (tests/test_cheats_gpu.py)

RMSNORM_FWD(rmsnorm_fwd)
{
    // against a judge that poisons only the launches it checks: skip the work of a row whenever
    // its output does not hold the poison pattern (bf16 poison 0x7FC1), keeping the old result
    const int row = blockIdx.x;
    if (row >= M) return;
    if (((const unsigned short*)y)[(size_t)row * (size_t)N] != 0x7FC1u) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
}
