// cheat suite kernel: skip_alternate_launches (tests/test_cheats_gpu.py)
__device__ unsigned int launches_seen;

extern "C" __global__ void __launch_bounds__(256)
rmsnorm_fwd(const __nv_bfloat16* __restrict__ x, const float* __restrict__ w,
            __nv_bfloat16* __restrict__ y, float* rstd, int M, int N, float eps)
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
