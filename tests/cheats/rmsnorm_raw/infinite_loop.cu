// cheat suite kernel: infinite_loop (tests/test_cheats_gpu.py)

__device__ volatile int never_set = 0;

RMSNORM_FWD(rmsnorm_fwd)
{
    while (!never_set) { __nanosleep(1000); }
    const int row = blockIdx.x;
    if (row >= M) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
}
