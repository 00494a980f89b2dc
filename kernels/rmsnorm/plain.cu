// RMSNorm forward, plain hand-written kernel: the sanity baseline of the pipeline.
// One CTA of 256 threads per row, scalar loads, fp32 sum of squares, block reduction through
// shared memory, y = x * rstd * w in fp32 rounded once (round to nearest even).
// Entries are appended by kernels/rmsnorm/family.py (render_plain) with RMS_PLAIN_ENTRY:
//   extern "C" __global__ void rmsnorm_plain_<x>_<w>(const T* x, const W* w, T* y,
//                                                      float* rstd /* may be null */,
//                                                      int M, int N, float eps)
// launch: grid = (M, 1, 1), block = (256, 1, 1), no dynamic shared memory.

#include <stdint.h>

struct bf16_t { unsigned short bits; };
struct fp16_t { unsigned short bits; };

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16_t v) { return __uint_as_float(((uint32_t)v.bits) << 16); }
__device__ __forceinline__ float to_f32(fp16_t v) {
  float f;
  asm("{\n\t.reg .f16 h;\n\tmov.b16 h, %1;\n\tcvt.f32.f16 %0, h;\n\t}" : "=f"(f) : "h"(v.bits));
  return f;
}

__device__ __forceinline__ void from_f32(float f, float* out) { *out = f; }
__device__ __forceinline__ void from_f32(float f, bf16_t* out) {
  unsigned short b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
  out->bits = b;
}
__device__ __forceinline__ void from_f32(float f, fp16_t* out) {
  unsigned short b;
  asm("{\n\t.reg .f16 h;\n\tcvt.rn.f16.f32 h, %1;\n\tmov.b16 %0, h;\n\t}" : "=h"(b) : "f"(f));
  out->bits = b;
}

template <typename T, typename W>
__device__ __forceinline__ void rms_plain(const T* __restrict__ x, const W* __restrict__ w,
                                          T* __restrict__ y, float* __restrict__ rstd, int M, int N,
                                          float eps) {
  __shared__ float partial[256 / 32];
  const int row = blockIdx.x;
  if (row >= M) return;                       // whole CTA leaves together: no barrier skipped
  const T* xr = x + (size_t)row * N;
  T* yr = y + (size_t)row * N;

  float ss = 0.f;
  for (int i = threadIdx.x; i < N; i += blockDim.x) {
    const float v = to_f32(xr[i]);
    ss = fmaf(v, v, ss);
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < (int)(blockDim.x >> 5); ++i) total += partial[i];

  const float r = 1.0f / sqrtf(total / (float)N + eps);   // IEEE sqrt and division
  if (rstd != nullptr && threadIdx.x == 0) rstd[row] = r;
  for (int i = threadIdx.x; i < N; i += blockDim.x) {
    from_f32((to_f32(xr[i]) * r) * to_f32(w[i]), &yr[i]);
  }
}

#define RMS_PLAIN_ENTRY(NAME, T, W)                                                               \
  extern "C" __global__ void __launch_bounds__(256) NAME(const T* __restrict__ x,                 \
      const W* __restrict__ w, T* __restrict__ y, float* __restrict__ rstd, int M, int N,        \
      float eps) {                                                                                \
    rms_plain<T, W>(x, w, y, rstd, M, N, eps);                                                    \
  }
