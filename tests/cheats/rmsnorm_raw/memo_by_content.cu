// cheat suite kernel: memo_by_content (tests/test_cheats_gpu.py)
#define MEMO_ELEMS (1 << 23)
__device__ unsigned int memo_key;
__device__ __nv_bfloat16 memo_y[MEMO_ELEMS];

RMSNORM_FWD(rmsnorm_fwd)
{
    // remember the output of the last inputs seen (keyed by a sample of x) and replay it
    const int row = blockIdx.x;
    if (row >= M) return;
    const size_t total = (size_t)M * (size_t)N, base = (size_t)row * (size_t)N;
    unsigned int key = (unsigned int)M * 2654435761u ^ (unsigned int)N;
    for (int k = 0; k < 16; ++k) key = key * 31u + ((const unsigned short*)x)[(total / 16) * k];
    if (total <= MEMO_ELEMS && memo_key == key) {
        for (int j = threadIdx.x; j < N; j += blockDim.x) y[base + j] = memo_y[base + j];
        return;
    }
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
    if (total <= MEMO_ELEMS) {
        for (int j = threadIdx.x; j < N; j += blockDim.x) memo_y[base + j] = y[base + j];
        if (row == M - 1 && threadIdx.x == 0) memo_key = key;
    }
}
