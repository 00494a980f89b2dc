// cheat suite kernel: too_much_smem (tests/test_cheats_gpu.py)

RMSNORM_FWD(rmsnorm_fwd)
{
    __shared__ float big[300 * 1024 / 4];                 // 300 KB: more than any CTA may have
    const int row = blockIdx.x;
    if (row >= M) return;
    const size_t base = (size_t)row * (size_t)N;
    for (int j = threadIdx.x; j < N; j += blockDim.x) big[(j * 977) % (300 * 256)] = __bfloat162float(x[base + j]);
    __syncthreads();
    for (int j = threadIdx.x; j < N; j += blockDim.x) y[base + j] = __float2bfloat16(big[(j * 977) % (300 * 256)] * w[j]);
}
