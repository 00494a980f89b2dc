// cheat suite kernel: newton_nonfinite (tests/test_cheats_gpu.py)

RMSNORM_FWD(rmsnorm_fwd)
{
    const int row = blockIdx.x;
    if (row >= M) return;
    const size_t base = (size_t)row * (size_t)N;
    float s = 0.f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) { const float v = __bfloat162float(x[base + j]); s += v * v; }
    s = block_sum(s);
    const float v = s / (float)N + eps;
    float r = rsqrtf(v);
    r = r * (1.5f - 0.5f * v * r * r);                    // a Newton step: NaN for v = inf
    if (rstd != nullptr && threadIdx.x == 0) rstd[row] = r;
    for (int j = threadIdx.x; j < N; j += blockDim.x) y[base + j] = __float2bfloat16(__bfloat162float(x[base + j]) * r * w[j]);
}
