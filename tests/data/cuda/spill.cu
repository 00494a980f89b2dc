// Register pressure for the spill tests: 48 live accumulators cannot fit in 32 registers, so
// compiled with -maxrregcount=32 ptxas spills (STL/LDL). A namespaced kernel gives a mangled name,
// a __device__ variable gives a gmem line.
__device__ float bias[32];

namespace probe {
__global__ void k_spill(const float* __restrict__ x, float* y, int n) {
  float acc[48];
#pragma unroll
  for (int j = 0; j < 48; ++j) acc[j] = x[threadIdx.x + j * 128];
#pragma unroll 1
  for (int it = 0; it < n; ++it) {
#pragma unroll
    for (int j = 0; j < 48; ++j) acc[j] = acc[j] * acc[(j + 7) % 48] + x[it + j];
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 48; ++j) s += acc[j];
  y[threadIdx.x] = s + bias[threadIdx.x & 31];
}
}  // namespace probe

extern "C" __global__ void k_light(float* y) { y[threadIdx.x] = 2.f * threadIdx.x; }
