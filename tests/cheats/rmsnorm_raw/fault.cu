// cheat suite kernel: fault (tests/test_cheats_gpu.py)

RMSNORM_FWD(rmsnorm_fwd)
{
    const int row = blockIdx.x;
    if (row >= M) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
    if (threadIdx.x == 0) {
        volatile float* wild = (volatile float*)(uintptr_t)(0x1000ull + (unsigned)(M & 0));   // unmapped page
        *wild = 1.0f;
    }
}
