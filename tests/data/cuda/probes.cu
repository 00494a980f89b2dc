// Probe kernels for the SASS tests: each one uses one inline-PTX feature, so that the tests
// (and the table in fitness/sass.py) can say what sm_90a machine code each PTX form becomes.
// Compiled, never run: the addresses and sizes only have to be plausible.
#include <cstdint>
#include <cuda.h>

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 128-bit read-only load + streaming (evict-first) store.
extern "C" __global__ void k_nc_cs(const float4* __restrict__ x, float4* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a, b, c, d;
  asm volatile("ld.global.nc.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(x + i));
  asm volatile("st.global.cs.v4.f32 [%0], {%1,%2,%3,%4};"
               :: "l"(y + i), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}

// Cache hints: L1 no-allocate, L2 sector promotion, an L2 evict-first policy, prefetches.
extern "C" __global__ void k_hints(const float4* __restrict__ x, float4* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  float a, b, c, d, e, f, g, h;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(x + i));
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;"
               : "=f"(e), "=f"(f), "=f"(g), "=f"(h) : "l"(x + i + n), "l"(pol));
  asm volatile("prefetch.global.L2::evict_last [%0];" :: "l"(x + i + 2 * n));
  asm volatile("st.global.L1::no_allocate.v4.f32 [%0], {%1,%2,%3,%4};"
               :: "l"(y + i), "f"(a + e), "f"(b + f), "f"(c + g), "f"(d + h) : "memory");
}

// Bulk copy (non-tensor TMA) global -> shared completing on an mbarrier, then shared -> global.
extern "C" __global__ void k_bulk(const float* __restrict__ x, float* y) {
  __shared__ alignas(128) float buf[1024];
  __shared__ alignas(8) uint64_t bar;
  const uint32_t b = smem_addr(&bar), s = smem_addr(buf);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 4096;" :: "r"(b));
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 4096, [%2];"
                 :: "r"(s), "l"(x + blockIdx.x * 1024), "r"(b) : "memory");
  }
  asm volatile("{ .reg .pred p; WAIT: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0; @!p bra WAIT; }"
               :: "r"(b) : "memory");
  buf[threadIdx.x] *= 2.f;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 4096;"
                 :: "l"(y + blockIdx.x * 1024), "r"(s) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
}

// Tensor TMA: a 2D tile load and store through a CUtensorMap kernel parameter.
extern "C" __global__ void k_tma(const __grid_constant__ CUtensorMap tmap) {
  __shared__ alignas(128) float tile[64 * 64];
  __shared__ alignas(8) uint64_t bar;
  const uint32_t b = smem_addr(&bar), s = smem_addr(tile);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 16384;" :: "r"(b));
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(s), "l"(&tmap), "r"(0), "r"(int(blockIdx.x) * 64), "r"(b) : "memory");
  }
  asm volatile("{ .reg .pred p; WAIT: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0; @!p bra WAIT; }"
               :: "r"(b) : "memory");
  tile[threadIdx.x] += 1.f;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(&tmap), "r"(0), "r"(int(blockIdx.x) * 64), "r"(s) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

// Ampere-style asynchronous copy (cp.async), 16-byte cache-global form.
extern "C" __global__ void k_cp_async(const float4* __restrict__ x, float* y) {
  __shared__ alignas(16) float4 buf[256];
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
               :: "r"(smem_addr(buf + threadIdx.x)), "l"(x + blockIdx.x * 256 + threadIdx.x) : "memory");
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  float4 v = buf[threadIdx.x ^ 1];
  y[blockIdx.x * 256 + threadIdx.x] = v.x + v.y + v.z + v.w;
}

// Distributed shared memory: read and write the peer CTA's shared memory in a 2-CTA cluster.
extern "C" __global__ void __cluster_dims__(2, 1, 1) k_dsmem(float* y) {
  __shared__ float buf[256];
  buf[threadIdx.x] = float(threadIdx.x);
  asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
  uint32_t rank, peer;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(peer) : "r"(smem_addr(buf + threadIdx.x)), "r"(rank ^ 1));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(peer) : "memory");
  asm volatile("st.shared::cluster.f32 [%0], %1;" :: "r"(peer ^ 4), "f"(v + 1.f) : "memory");
  asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
  y[blockIdx.x * 256 + threadIdx.x] = v;
}

// Warpgroup MMA (one m64n16k16 bf16 step from shared-memory descriptors).
extern "C" __global__ void k_wgmma(const uint64_t* descs, float* y) {
  float d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile("wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
               "{%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, 1, 1, 1, 0, 0;"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
               : "l"(descs[0]), "l"(descs[1]));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  for (int j = 0; j < 8; ++j) y[threadIdx.x * 8 + j] = d[j];
}

// Warp specialisation registers: producer warps give registers back, consumers take more.
extern "C" __global__ void __launch_bounds__(384, 1) k_setmaxnreg(float* y) {
  if (threadIdx.x < 128) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
  else asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  y[threadIdx.x] = 1.f;
}

// A per-thread array indexed at run time: ptxas must place it in local memory (stack frame).
template <int N>
__global__ void k_local(const int* idx, float* y) {
  float arr[N];
#pragma unroll 1
  for (int i = 0; i < N; ++i) arr[i] = y[i] * 1.5f;
  y[threadIdx.x] = arr[idx[threadIdx.x] % N];
}
template __global__ void k_local<64>(const int*, float*);
