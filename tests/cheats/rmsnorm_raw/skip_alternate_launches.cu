// cheat suite kernel: skip_alternate_launches (tests/test_cheats_gpu.py)
__device__ unsigned int launches_seen;

RMSNORM_FWD(rmsnorm_fwd)
{
    // honest on the CHECK cases; at a benchmark width every other launch does nothing
    __shared__ unsigned int seen;
    if (threadIdx.x == 0) seen = launches_seen;
    __syncthreads();
    const int row = blockIdx.x;
    if (row >= M) return;
    const bool big = (N == 8192);                        // a benchmark width no CHECK case has
    if (!(big && (seen & 1u))) rmsnorm_row(x, w, y, rstd, row, N, eps, N);
    if (row == 0 && threadIdx.x == 0) atomicAdd(&launches_seen, 1u);
}
