// cheat suite kernel: bf16_accumulate (tests/test_cheats_gpu.py)

RMSNORM_FWD(rmsnorm_fwd)
{
    const int row = blockIdx.x;
    if (row >= M) return;
    const size_t base = (size_t)row * (size_t)N;
    __nv_bfloat16 acc = __float2bfloat16(0.f);            // sum of squares kept in bf16
    for (int j = threadIdx.x; j < N; j += blockDim.x) { const __nv_bfloat16 v = x[base + j]; acc = __hfma(v, v, acc); }
    const float s = block_sum(__bfloat162float(acc));
    const float r = rsqrtf(s / (float)N + eps);
    if (rstd != nullptr && threadIdx.x == 0) rstd[row] = r;
    for (int j = threadIdx.x; j < N; j += blockDim.x) y[base + j] = __float2bfloat16(__bfloat162float(x[base + j]) * r * w[j]);
}
