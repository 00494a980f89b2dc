// cheat suite kernel: cache_by_pointer (tests/test_cheats_gpu.py)

#define CACHE_SLOTS 4
#define CACHE_ELEMS (1 << 21)
__device__ unsigned long long cache_key[CACHE_SLOTS];
__device__ unsigned long long cache_shape[CACHE_SLOTS];
__device__ int cache_valid[CACHE_SLOTS];
__device__ unsigned int cache_done[CACHE_SLOTS];
__device__ __nv_bfloat16 cache_y[CACHE_SLOTS][CACHE_ELEMS];

RMSNORM_FWD(rmsnorm_fwd)
{
    const int row = blockIdx.x;
    if (row >= M) return;
    const size_t total = (size_t)M * (size_t)N;
    const unsigned long long key = (unsigned long long)(uintptr_t)x;
    const unsigned long long shape = ((unsigned long long)M << 32) | (unsigned int)N;
    const int slot = (int)((key >> 8) % CACHE_SLOTS);
    const bool cacheable = total <= (size_t)CACHE_ELEMS;
    __shared__ int hit;
    if (threadIdx.x == 0)
        hit = cacheable && cache_valid[slot] && cache_key[slot] == key && cache_shape[slot] == shape;
    __syncthreads();
    const size_t base = (size_t)row * (size_t)N;
    if (hit) {                                            // same pointer as before: replay
        for (int j = threadIdx.x; j < N; j += blockDim.x) y[base + j] = cache_y[slot][base + j];
        return;
    }
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
    if (!cacheable) return;
    for (int j = threadIdx.x; j < N; j += blockDim.x) cache_y[slot][base + j] = y[base + j];
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        // the last CTA to finish publishes the entry: every CTA of this launch has read `hit` by then
        const unsigned int done = atomicAdd(&cache_done[slot], 1u) + 1u;
        if (done == gridDim.x) {
            cache_key[slot] = key;
            cache_shape[slot] = shape;
            cache_valid[slot] = 1;
            cache_done[slot] = 0;
            __threadfence();
        }
    }
}
