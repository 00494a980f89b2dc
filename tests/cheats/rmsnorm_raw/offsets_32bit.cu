// cheat suite kernel: offsets_32bit (tests/test_cheats_gpu.py)

RMSNORM_FWD(rmsnorm_fwd)
{
    const int row = blockIdx.x;
    if (row >= M) return;
    const int base = row * N;                             // 32-bit element offset: wraps past 2**31
    float s = 0.f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) { const float v = __bfloat162float(x[base + j]); s += v * v; }
    s = block_sum(s);
    const float r = rsqrtf(s / (float)N + eps);
    if (rstd != nullptr && threadIdx.x == 0) rstd[row] = r;
    for (int j = threadIdx.x; j < N; j += blockDim.x) y[base + j] = __float2bfloat16(__bfloat162float(x[base + j]) * r * w[j]);
}
