// cheat suite kernel: newton_nonfinite (tests/test_cheats_gpu.py)

extern "C" __global__ void __launch_bounds__(256)
rmsnorm_fwd(const __nv_bfloat16* __restrict__ x, const float* __restrict__ w,
            __nv_bfloat16* __restrict__ y, float* rstd, int M, int N, float eps)
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
