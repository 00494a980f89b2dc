// Two ptxas diagnostics worth recognising: setmaxnreg ignored (C7508, names no function) and a
// non-inlined device function (reported under "Function properties" without an entry line).
__device__ __noinline__ float pick(const float* x, int n) {
  float a[32];
  for (int i = 0; i < 32; ++i) a[i] = x[i];
  return a[n & 31];
}

extern "C" __global__ void k_call(const float* x, float* y, int n) { y[threadIdx.x] = pick(x, n); }

// No __launch_bounds__ and 64 live values: ptxas cannot know the entry register count.
extern "C" __global__ void k_setmaxnreg_ignored(const float* x, float* y) {
  float acc[64];
#pragma unroll
  for (int j = 0; j < 64; ++j) acc[j] = x[threadIdx.x + j * 128];
  asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 64; ++j) s += acc[j] * acc[63 - j];
  y[threadIdx.x] = s;
}
