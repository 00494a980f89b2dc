// cheat suite kernel: stale_output (tests/test_cheats_gpu.py)

RMSNORM_FWD(rmsnorm_fwd)
{
    const int row = blockIdx.x;
    if (row >= M) return;
    const size_t base = (size_t)row * (size_t)N;
    float s = 0.f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) {
        const float v = __bfloat162float(x[base + j]);
        s += v * v;
    }
    s = block_sum(s);
    if (rstd != nullptr && threadIdx.x == 0) rstd[row] = rsqrtf(s / (float)N + eps);
    // y is left as it was
}
