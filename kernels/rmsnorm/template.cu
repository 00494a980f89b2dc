// RMSNorm forward, evolvable template (sm_90a). Rendered by kernels/rmsnorm/family.py:
// a block of #defines from the genome, this text, then one extern "C" entry per
// (x dtype, weight dtype, cluster size) generated with RMS_ENTRY (see the end of this file).
//
//   y[m, n] = x[m, n] * rstd[m] * w[n],  rstd[m] = 1 / sqrt(sum_n x[m, n]^2 / N + eps)
//
// Sum of squares in fp32; y computed in fp32 and rounded once; rstd written when rstd != nullptr.
// Requirements checked by launch(): N * sizeof(T) a multiple of 16 bytes (N % 8 == 0 for 16-bit,
// N % 4 == 0 for fp32), 16-byte aligned x, w, y. M >= 1 arbitrary.
//
// Geometry (from launch(): block = (TPR, R), grid.x = row groups x C, or a persistent grid):
//   a row group is R rows; cluster of C CTAs (C = template arg, __cluster_dims__(C,1,1)) shares
//   every row of the group, CTA rank c owning the 16-byte units [c*SU, min((c+1)*SU, U)) of the row
//   (U = row bytes / 16, SU = ceil(U / C)). Inside the slice the data is cut into vectors of
//   RMS_VEC_BYTES (one or two 16-byte "packets", or one 8-byte packet); thread t of the row owns
//   vectors t, t + TPR, t + 2 TPR, ... Every packet of the slice belongs to exactly one thread.
//
// The genes (#defines, set by render):
//   RMS_VEC_BYTES 8|16|32  RMS_CHUNKS 1..8  RMS_CTA_THREADS  RMS_MIN_BLOCKS  RMS_MAXRREG
//   RMS_PERSISTENT 0|1  RMS_STAGES 1|2  RMS_UNROLL  RMS_STAGING 0 regs|1 smem_sync|2 smem_async|3 bulk
//   RMS_WEIGHT_REGS  RMS_WEIGHT_EARLY  RMS_RSQRT 0 approx|1 newton|2 precise  RMS_CLUSTER_REDUCE 0 st_async|1 barrier
//@ Regions (fitness/template_regions.py) keep code of genes added later out of what genomes at the gene's
//@ legacy value render, so their sources (compile keys, carried evidence, exported packages) stay
//@ byte for byte those of the session that judged them.
//@ RMS_WBATCH 2|4|8 (weight_batch, space v3; absent = 1): output passes issue the loads of this many
//@ vectors (weight; x too where it is re-read from global) before normalizing and storing any of
//@ them. Every load and store is an asm volatile, which the compiler never reorders among
//@ themselves, so one vector at a time leaves a warp one L2 round trip in flight per vector written.
//@ weight_pipeline (space v4; shared-memory staging with weight_batch > 1): the weight of the
//@ first batch is loaded before the row's reduction (in flight across its barriers), and each
//@ batch's successor before the batch is written: two batches of weight in registers.
//@ inf_safe (space v6; rsqrt = newton only): the Newton step is skipped for a mean square of +inf, so a
//@ row holding an infinity gives rstd 0 (torch's rule: NaN at the infinities, 0 elsewhere) instead of NaN.
//@ lean_groups (space v5): "row group g exists" is tested as g * R < M instead of g < ceil(M / R), so
//@ no CTA divides by its runtime row count (an integer division, a MUFU.RCP among ~25 SASS
//@ instructions, ahead of the first load: 63 -> 37 instructions before the first LDG of ed8f41a1).
//   PTX qualifier strings: RMS_LDX_MAIN, RMS_LDX_OVF1, RMS_LDX_OVF2 (x loads: main / overflow first
//   pass / overflow re-read), RMS_LDW (weight), RMS_STY (y), RMS_CPASYNC, each with a *_POL policy
//   selector (0 none, 1 L2 evict_first, 2 L2 evict_last: appended ", policy" operand).

#include <stdint.h>

#ifndef RMS_VEC_BYTES
#error "render the template through kernels/rmsnorm/family.py (genes are #defines)"
#endif

#define RMS_PB (RMS_VEC_BYTES < 16 ? RMS_VEC_BYTES : 16)   // packet bytes (one ld/st instruction)
#define RMS_PPV (RMS_VEC_BYTES / RMS_PB)                   // packets per vector
#define RMS_PW (RMS_PB / 4)                                // 32-bit words per packet
#define RMS_RMAX (RMS_CTA_THREADS / 32 > 0 ? RMS_CTA_THREADS / 32 : 1)
#define RMS_FULL 0xffffffffu
constexpr int kUnroll = RMS_UNROLL;   // #pragma unroll does not expand macros
//@weight_batch new
constexpr int kWB = RMS_WBATCH;       // vectors whose loads are issued together in output passes
//@weight_batch end

struct bf16_t { unsigned short bits; };
struct fp16_t { unsigned short bits; };

// ---------------------------------------------------------------------------------------------
// element types: unpack a 32-bit word into floats, pack floats into a word (round to nearest even)
template <typename T> struct Tr;
template <> struct Tr<float> {
  static constexpr int SIZE = 4, EPW = 1;
  static __device__ __forceinline__ void unpack(uint32_t w, float* f) { f[0] = __uint_as_float(w); }
  static __device__ __forceinline__ uint32_t pack(const float* f) { return __float_as_uint(f[0]); }
};
template <> struct Tr<bf16_t> {
  static constexpr int SIZE = 2, EPW = 2;
  static __device__ __forceinline__ void unpack(uint32_t w, float* f) {
    f[0] = __uint_as_float(w << 16);
    f[1] = __uint_as_float(w & 0xffff0000u);
  }
  static __device__ __forceinline__ uint32_t pack(const float* f) {
    uint32_t r;  // upper half from the first operand: element 1 high, element 0 low
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(f[1]), "f"(f[0]));
    return r;
  }
};
template <> struct Tr<fp16_t> {
  static constexpr int SIZE = 2, EPW = 2;
  static __device__ __forceinline__ void unpack(uint32_t w, float* f) {
    asm("{\n\t.reg .f16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\tcvt.f32.f16 %0, lo;\n\tcvt.f32.f16 %1, hi;\n\t}"
        : "=f"(f[0]), "=f"(f[1]) : "r"(w));
  }
  static __device__ __forceinline__ uint32_t pack(const float* f) {
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(f[1]), "f"(f[0]));
    return r;
  }
};

// ---------------------------------------------------------------------------------------------
// global memory access through inline PTX (the genes choose the qualifiers)
struct Pol { uint64_t ef, el; };   // createpolicy results: L2 evict_first / evict_last

__device__ __forceinline__ Pol make_policies() {
  Pol p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p.ef));
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p.el));
  return p;
}

#define RMS_POLREG(SEL, pol) ((SEL) == 1 ? (pol).ef : (pol).el)

// NW 32-bit words from global memory at p (NW = 2, 4 or 8; 8 = two 16-byte loads)
#define RMS_DEFINE_LOAD(NAME, QUAL, SEL)                                                          \
  template <int NW>                                                                               \
  __device__ __forceinline__ void NAME(uint32_t* d, const void* p, const Pol& pol) {              \
    if constexpr (NW == 8) {                                                                      \
      NAME<4>(d, p, pol);                                                                         \
      NAME<4>(d + 4, (const char*)p + 16, pol);                                                   \
    } else if constexpr (NW == 4) {                                                               \
      if constexpr ((SEL) == 0)                                                                   \
        asm volatile(QUAL ".v4.u32 {%0,%1,%2,%3}, [%4];"                                          \
                     : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "l"(p));                  \
      else                                                                                        \
        asm volatile(QUAL ".v4.u32 {%0,%1,%2,%3}, [%4], %5;"                                      \
                     : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])                             \
                     : "l"(p), "l"(RMS_POLREG(SEL, pol)));                                        \
    } else {                                                                                      \
      static_assert(NW == 2, "load width");                                                       \
      if constexpr ((SEL) == 0)                                                                   \
        asm volatile(QUAL ".v2.u32 {%0,%1}, [%2];" : "=r"(d[0]), "=r"(d[1]) : "l"(p));            \
      else                                                                                        \
        asm volatile(QUAL ".v2.u32 {%0,%1}, [%2], %3;"                                            \
                     : "=r"(d[0]), "=r"(d[1]) : "l"(p), "l"(RMS_POLREG(SEL, pol)));               \
    }                                                                                             \
  }

RMS_DEFINE_LOAD(ld_x_main, RMS_LDX_MAIN, RMS_LDX_MAIN_POL)
RMS_DEFINE_LOAD(ld_x_ovf1, RMS_LDX_OVF1, RMS_LDX_OVF1_POL)
RMS_DEFINE_LOAD(ld_x_ovf2, RMS_LDX_OVF2, RMS_LDX_OVF2_POL)
RMS_DEFINE_LOAD(ld_w, RMS_LDW, RMS_LDW_POL)

template <int NW>
__device__ __forceinline__ void st_y(void* p, const uint32_t* s, const Pol& pol) {
  if constexpr (NW == 4) {
#if RMS_STY_POL == 0
    asm volatile(RMS_STY ".v4.u32 [%0], {%1,%2,%3,%4};"
                 :: "l"(p), "r"(s[0]), "r"(s[1]), "r"(s[2]), "r"(s[3]) : "memory");
#else
    asm volatile(RMS_STY ".v4.u32 [%0], {%1,%2,%3,%4}, %5;"
                 :: "l"(p), "r"(s[0]), "r"(s[1]), "r"(s[2]), "r"(s[3]), "l"(RMS_POLREG(RMS_STY_POL, pol))
                 : "memory");
#endif
  } else {
    static_assert(NW == 2, "store width");
#if RMS_STY_POL == 0
    asm volatile(RMS_STY ".v2.u32 [%0], {%1,%2};" :: "l"(p), "r"(s[0]), "r"(s[1]) : "memory");
#else
    asm volatile(RMS_STY ".v2.u32 [%0], {%1,%2}, %3;"
                 :: "l"(p), "r"(s[0]), "r"(s[1]), "l"(RMS_POLREG(RMS_STY_POL, pol)) : "memory");
#endif
  }
}

// ---------------------------------------------------------------------------------------------
// shared memory, cluster and mbarrier primitives
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ uint32_t cta_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t mapa(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_sync_release_acquire() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t a = smem_u32(bar);
  uint32_t done = 0;
  do {
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(a), "r"(parity) : "memory");
  } while (!done);
}

// ---------------------------------------------------------------------------------------------
// math
__device__ __forceinline__ float rms_rsqrt(float v) {
  float r;
#if RMS_RSQRT == 0
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
#elif RMS_RSQRT == 1
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
//@inf_safe legacy
  r = r * fmaf(-0.5f * v * r, r, 1.5f);
//@inf_safe new
  // one Newton step, skipped for v = +inf (rsqrt 0): 0 * (inf * 0) would make the whole row NaN,
  // where torch's rule (and the approx/precise paths) give rstd 0
  const float rn = r * fmaf(-0.5f * v * r, r, 1.5f);
  r = (v < __int_as_float(0x7f800000)) ? rn : r;
//@inf_safe end
#else
  float s;
  asm("sqrt.rn.f32 %0, %1;" : "=f"(s) : "f"(v));
  asm("rcp.rn.f32 %0, %1;" : "=f"(r) : "f"(s));
#endif
  return r;
}

// sum of squares of the elements packed in n words
template <typename T, int N>
__device__ __forceinline__ void sumsq(const uint32_t* w, float& a0, float& a1) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float f[Tr<T>::EPW];
    Tr<T>::unpack(w[i], f);
#pragma unroll
    for (int e = 0; e < Tr<T>::EPW; ++e) {
      if ((i * Tr<T>::EPW + e) & 1) a1 = fmaf(f[e], f[e], a1);
      else a0 = fmaf(f[e], f[e], a0);
    }
  }
}

// One packet: x words (RMS_PW), weight words (WPW), rstd -> y words (RMS_PW)
template <typename T, typename W>
struct Packet {
  static constexpr int EP = RMS_PB / Tr<T>::SIZE;            // elements per packet
  static constexpr int WPW = EP * Tr<W>::SIZE / 4;           // weight words per packet (2, 4, 8)
  static __device__ __forceinline__ void norm(const uint32_t* xw, const uint32_t* ww, float rs,
                                              uint32_t* yw) {
    float xf[EP], wf[EP], yf[EP];
#pragma unroll
    for (int i = 0; i < RMS_PW; ++i) Tr<T>::unpack(xw[i], xf + i * Tr<T>::EPW);
#pragma unroll
    for (int i = 0; i < WPW; ++i) Tr<W>::unpack(ww[i], wf + i * Tr<W>::EPW);
#pragma unroll
    for (int e = 0; e < EP; ++e) yf[e] = (xf[e] * rs) * wf[e];
#pragma unroll
    for (int i = 0; i < RMS_PW; ++i) yw[i] = Tr<T>::pack(yf + i * Tr<T>::EPW);
  }
};

// ---------------------------------------------------------------------------------------------
// per-CTA shared state for the reductions
template <int C>
struct Shared {
  float red[2][RMS_RMAX];           // warp partial sums [parity][row * warps_per_row + warp]
  float cl[2][RMS_RMAX * C];        // cluster partial sums [parity][row * C + rank]
  uint64_t cbar[2];                 // st.async arrival barriers, one per parity
  uint64_t dbar[2];                 // bulk-copy barriers, one per stage
};
template <>
struct Shared<1> {
  float red[2][RMS_RMAX];
  uint64_t dbar[2];
};

// Sum of v over the TPR threads of a row, then over the C CTAs of the cluster. Called by every
// thread of the CTA the same number of times (`it` counts the calls; parity double-buffers the
// shared slots so that one barrier per call suffices).
template <int C>
__device__ __forceinline__ float row_reduce(float v, int it, Shared<C>& sh) {
  const int TPR = blockDim.x, t = threadIdx.x, r = threadIdx.y;
  const int p = it & 1;
  // lanes of this warp that exist (launch() makes blocks whole warps; this guards the rule)
  const int left = (int)(blockDim.x * blockDim.y) - ((r * TPR + t) & ~31);
  const unsigned mask = left >= 32 ? RMS_FULL : ((1u << left) - 1u);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < TPR) v += __shfl_xor_sync(mask, v, o);
  if (TPR > 32 || C > 1) {
    const int NW = TPR > 32 ? TPR >> 5 : 1;          // warps per row (rows never share a warp here)
    float* red = sh.red[p];
    if ((t & 31) == 0) red[r * NW + (t >> 5)] = v;
    __syncthreads();
    v = 0.f;
    for (int i = 0; i < NW; ++i) v += red[r * NW + i];
    if constexpr (C > 1) {
      const uint32_t rank = cta_rank();
      float* cl = sh.cl[p];
#if RMS_CLUSTER_REDUCE == 0
      // push this CTA's partial into slot [r][rank] of every CTA of the cluster (itself included)
      // with st.async; each CTA's barrier expects R * C floats per call.
      if (t == 0 && r == 0) mbar_arrive_expect_tx(&sh.cbar[p], (uint32_t)(blockDim.y * C * 4));
      if (t < C) {
        const uint32_t dst = mapa(smem_u32(&cl[r * C + rank]), (uint32_t)t);
        const uint32_t bar = mapa(smem_u32(&sh.cbar[p]), (uint32_t)t);
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];"
                     :: "r"(dst), "f"(v), "r"(bar) : "memory");
      }
      mbar_wait(&sh.cbar[p], (uint32_t)((it >> 1) & 1));
#else
      if (t < C) {
        const uint32_t dst = mapa(smem_u32(&cl[r * C + rank]), (uint32_t)t);
        asm volatile("st.shared::cluster.f32 [%0], %1;" :: "r"(dst), "f"(v) : "memory");
      }
      cluster_sync_release_acquire();
#endif
      v = 0.f;
#pragma unroll
      for (int c = 0; c < C; ++c) v += cl[r * C + c];   // same order in every CTA: same rstd
    }
  }
  return v;
}

//@lean_groups new
// ---------------------------------------------------------------------------------------------
// the row groups of R rows each (R = blockDim.y): "g < groups" means g * R < M, no division
struct RowGroups { int M, R; };
// (unsigned: g runs at most ncl + 1 groups past the last, so g * R < 2^32 for any int M)
__device__ __forceinline__ bool operator<(int g, RowGroups s) { return (unsigned)g * (unsigned)s.R < (unsigned)s.M; }

//@lean_groups end
// ---------------------------------------------------------------------------------------------
// the kernel body
template <typename T, typename W, int C>
__device__ __forceinline__ void rms_body(const T* __restrict__ x, const W* __restrict__ w,
                                         T* __restrict__ y, float* __restrict__ rstd, int M, int N,
                                         float eps) {
  constexpr int K = RMS_CHUNKS, PPV = RMS_PPV, PB = RMS_PB, PW = RMS_PW;
  using P = Packet<T, W>;
  constexpr int WPW = P::WPW;
  __shared__ __align__(16) Shared<C> sh;

  const int TPR = blockDim.x, R = blockDim.y, t = threadIdx.x, r = threadIdx.y;
  const int tid = r * TPR + t;
  const int rank = C > 1 ? (int)cta_rank() : 0;

  // this CTA's slice of every row: bytes [off, off + sbytes) of the row
  const int U = (N * Tr<T>::SIZE) >> 4;
  const int SU = (U + C - 1) / C;
  const int u0 = min(U, rank * SU), u1 = min(U, u0 + SU);
  const int off = u0 << 4, sbytes = (u1 - u0) << 4;
  const int npk = sbytes / PB;                         // packets in the slice
  const int nvs = (npk + PPV - 1) / PPV;               // vectors in the slice
  const size_t row_bytes = (size_t)N * Tr<T>::SIZE;
  const char* xs = (const char*)x + off;               // + row * row_bytes + packet * PB
  char* ys = (char*)y + off;
  // weight element of byte b of the x slice: (off + b) / sizeof(T); weight bytes scale by W/T
  const char* ws = (const char*)w + (size_t)(off / Tr<T>::SIZE) * Tr<W>::SIZE;
  constexpr int WPB = P::EP * Tr<W>::SIZE;             // weight bytes per packet
  const float inv_n = 1.0f / (float)N;

//@lean_groups legacy
  const int groups = (M + R - 1) / R;
//@lean_groups new
  const RowGroups groups{M, R};
//@lean_groups end
  const int cid = blockIdx.x / C;
  const int ncl = gridDim.x / C;
  const Pol pol = make_policies();

  // ---- one-time setup: barriers, cluster start
  constexpr bool BULK = RMS_STAGING == 3;
  constexpr bool CBAR = (C > 1) && (RMS_CLUSTER_REDUCE == 0);
  if constexpr (BULK || CBAR) {
    if (tid == 0) {
      if constexpr (CBAR) { mbar_init(&sh.cbar[0], 1); mbar_init(&sh.cbar[1], 1); }
      if constexpr (BULK) {
#pragma unroll
        for (int s = 0; s < RMS_STAGES; ++s) mbar_init(&sh.dbar[s], 1);
      }
      mbar_init_fence();
    }
    __syncthreads();
  }
  if constexpr (C > 1) {
    // every CTA of the cluster must be running (and its barriers initialised) before any
    // distributed-shared-memory access; the wait is deferred to just before the first exchange
    cluster_arrive_relaxed();
  }
  bool first_exchange = true;
  auto reduce = [&](float v, int it) -> float {
    if constexpr (C > 1) {
      if (first_exchange) { cluster_wait(); first_exchange = false; }
    }
    return row_reduce<C>(v, it, sh);
  };

  // ===========================================================================================
#if RMS_STAGING == 0
  // registers: K vectors per thread held; vectors beyond K * TPR (overflow) re-read from L2
  auto load_regs = [&](uint32_t (&xv)[K][PPV * PW], int g) {
    const int row = g * R + r;
    const bool ok = g < groups && row < M;
    const char* xr = xs + (size_t)row * row_bytes;
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int q = 0; q < PPV; ++q) {
        const int pk = (t + k * TPR) * PPV + q;
        if (ok && pk < npk) {
          ld_x_main<PW>(&xv[k][q * PW], xr + (size_t)pk * PB, pol);
        } else {
#pragma unroll
          for (int i = 0; i < PW; ++i) xv[k][q * PW + i] = 0u;
        }
      }
  };
  // weight of the thread's register vectors: loaded once (RMS_WEIGHT_REGS, persistent) or with x
  // before the reduction (RMS_WEIGHT_EARLY), instead of after it in the output loop
  auto load_w_regs = [&](uint32_t (&wv)[K][PPV][WPW], bool ok) {
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int q = 0; q < PPV; ++q) {
        const int pk = (t + k * TPR) * PPV + q;
        if (ok && pk < npk) ld_w<WPW>(wv[k][q], ws + (size_t)pk * WPB, pol);
        else {
#pragma unroll
          for (int i = 0; i < WPW; ++i) wv[k][q][i] = 0u;
        }
      }
  };
#if RMS_WEIGHT_REGS || RMS_WEIGHT_EARLY
  uint32_t wv[K][PPV][WPW];
#endif
#if RMS_WEIGHT_REGS
  load_w_regs(wv, true);
#endif
  uint32_t xv[K][PPV * PW];
#if RMS_STAGES == 2
  load_regs(xv, cid);   // prologue: later groups are loaded one iteration ahead (xn)
#endif
  int it = 0;
#if RMS_PERSISTENT
  for (int g = cid; g < groups; g += ncl, ++it)
#else
  const int g = cid;
#endif
  {
#if RMS_STAGES == 2
    uint32_t xn[K][PPV * PW];
    load_regs(xn, g + ncl);
#else
    load_regs(xv, g);
#endif
    const int row = g * R + r;
    const bool ok = row < M;
#if RMS_WEIGHT_EARLY
    load_w_regs(wv, ok);
#endif
    const char* xr = xs + (size_t)row * row_bytes;
    char* yr = ys + (size_t)row * row_bytes;
    float a0 = 0.f, a1 = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) sumsq<T, PPV * PW>(xv[k], a0, a1);
    // overflow, first pass
    const int jo = t + K * TPR;
    if (ok) {
#pragma unroll kUnroll
      for (int j = jo; j < nvs; j += TPR) {
#pragma unroll
        for (int q = 0; q < PPV; ++q) {
          const int pk = j * PPV + q;
          if (pk < npk) {
            uint32_t v[PW];
            ld_x_ovf1<PW>(v, xr + (size_t)pk * PB, pol);
            sumsq<T, PW>(v, a0, a1);
          }
        }
      }
    }
    const float ss = reduce(a0 + a1, it);
    const float rs = rms_rsqrt(fmaf(ss, inv_n, eps));
    if (rstd != nullptr && ok && t == 0 && rank == 0) rstd[row] = rs;
    // output from registers
//@weight_batch legacy
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int q = 0; q < PPV; ++q) {
        const int pk = (t + k * TPR) * PPV + q;
        if (ok && pk < npk) {
          uint32_t yw[PW];
#if RMS_WEIGHT_REGS || RMS_WEIGHT_EARLY
          P::norm(&xv[k][q * PW], wv[k][q], rs, yw);
#else
          uint32_t ww[WPW];
          ld_w<WPW>(ww, ws + (size_t)pk * WPB, pol);
          P::norm(&xv[k][q * PW], ww, rs, yw);
#endif
          st_y<PW>(yr + (size_t)pk * PB, yw, pol);
        }
      }
//@weight_batch new
#if RMS_WEIGHT_REGS || RMS_WEIGHT_EARLY
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int q = 0; q < PPV; ++q) {
        const int pk = (t + k * TPR) * PPV + q;
        if (ok && pk < npk) {
          uint32_t yw[PW];
          P::norm(&xv[k][q * PW], wv[k][q], rs, yw);
          st_y<PW>(yr + (size_t)pk * PB, yw, pol);
        }
      }
#else
    // the weight of kWB register vectors is loaded before any of them is written
#pragma unroll
    for (int k0 = 0; k0 < K; k0 += kWB) {
      uint32_t wb[kWB][PPV][WPW];
#pragma unroll
      for (int u = 0; u < kWB; ++u)
#pragma unroll
        for (int q = 0; q < PPV; ++q) {
          const int pk = (t + (k0 + u) * TPR) * PPV + q;
          if (k0 + u < K && ok && pk < npk) ld_w<WPW>(wb[u][q], ws + (size_t)pk * WPB, pol);
        }
#pragma unroll
      for (int u = 0; u < kWB; ++u)
#pragma unroll
        for (int q = 0; q < PPV; ++q) {
          const int pk = (t + (k0 + u) * TPR) * PPV + q;
          if (k0 + u < K && ok && pk < npk) {
            uint32_t yw[PW];
            P::norm(&xv[k0 + u < K ? k0 + u : 0][q * PW], wb[u][q], rs, yw);
            st_y<PW>(yr + (size_t)pk * PB, yw, pol);
          }
        }
    }
#endif
//@weight_batch end
    // overflow, second pass: re-read x
//@weight_batch legacy
    if (ok) {
#pragma unroll kUnroll
      for (int j = jo; j < nvs; j += TPR) {
#pragma unroll
        for (int q = 0; q < PPV; ++q) {
          const int pk = j * PPV + q;
          if (pk < npk) {
            uint32_t v[PW], ww[WPW], yw[PW];
            ld_x_ovf2<PW>(v, xr + (size_t)pk * PB, pol);
            ld_w<WPW>(ww, ws + (size_t)pk * WPB, pol);
            P::norm(v, ww, rs, yw);
            st_y<PW>(yr + (size_t)pk * PB, yw, pol);
          }
        }
      }
    }
//@weight_batch new
    if (ok) {
#pragma unroll kUnroll
      for (int j0 = jo; j0 < nvs; j0 += kWB * TPR) {
        uint32_t xb[kWB][PPV][PW], wb[kWB][PPV][WPW];
#pragma unroll
        for (int u = 0; u < kWB; ++u)
#pragma unroll
          for (int q = 0; q < PPV; ++q) {
            const int pk = (j0 + u * TPR) * PPV + q;
            if (j0 + u * TPR < nvs && pk < npk) {
              ld_x_ovf2<PW>(xb[u][q], xr + (size_t)pk * PB, pol);
              ld_w<WPW>(wb[u][q], ws + (size_t)pk * WPB, pol);
            }
          }
#pragma unroll
        for (int u = 0; u < kWB; ++u)
#pragma unroll
          for (int q = 0; q < PPV; ++q) {
            const int pk = (j0 + u * TPR) * PPV + q;
            if (j0 + u * TPR < nvs && pk < npk) {
              uint32_t yw[PW];
              P::norm(xb[u][q], wb[u][q], rs, yw);
              st_y<PW>(yr + (size_t)pk * PB, yw, pol);
            }
          }
      }
    }
//@weight_batch end
#if RMS_STAGES == 2
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int i = 0; i < PPV * PW; ++i) xv[k][i] = xn[k][i];
#endif
  }

  // ===========================================================================================
#else
  // shared-memory staging: the CTA slice of row r of stage s lives at dsm + (s * R + r) * stride
  extern __shared__ __align__(128) unsigned char dsm[];
  const int stride = ((SU << 4) + 127) & ~127;
  auto buf = [&](int s, int rr) -> unsigned char* { return dsm + (size_t)(s * R + rr) * stride; };

#if RMS_STAGING == 2
  // cp.async: each thread copies (and later reads) only its own packets: no CTA barrier needed
  auto issue = [&](int g, int s) {
    const int row = g * R + r;
    const bool ok = g < groups && row < M;
    const char* xr = xs + (size_t)row * row_bytes;
    const uint32_t sb = smem_u32(buf(s, r));
    if (ok) {
#pragma unroll kUnroll
      for (int j = t; j < nvs; j += TPR) {
#pragma unroll
        for (int q = 0; q < PPV; ++q) {
          const int pk = j * PPV + q;
          if (pk < npk) {
#if RMS_CPASYNC_POL == 0
            asm volatile(RMS_CPASYNC " [%0], [%1], %2;"
                         :: "r"(sb + pk * PB), "l"(xr + (size_t)pk * PB), "n"(PB) : "memory");
#else
            asm volatile(RMS_CPASYNC " [%0], [%1], %2, %3;"
                         :: "r"(sb + pk * PB), "l"(xr + (size_t)pk * PB), "n"(PB),
                            "l"(RMS_POLREG(RMS_CPASYNC_POL, pol)) : "memory");
#endif
          }
        }
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
#elif RMS_STAGING == 3
  // cp.async.bulk: thread 0 copies every row slice of the group; one mbarrier per stage
  auto issue = [&](int g, int s) {
    if (tid != 0) return;
    uint32_t total = 0;
    for (int rr = 0; rr < R; ++rr) {
      const int row = g * R + rr;
      if (g < groups && row < M) total += (uint32_t)sbytes;
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    mbar_arrive_expect_tx(&sh.dbar[s], total);
    if (sbytes == 0) return;
    for (int rr = 0; rr < R; ++rr) {
      const int row = g * R + rr;
      if (g < groups && row < M) {
        const char* src = xs + (size_t)row * row_bytes;
#if RMS_BULK_POL == 0
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(smem_u32(buf(s, rr))), "l"(src), "r"(sbytes), "r"(smem_u32(&sh.dbar[s]))
                     : "memory");
#else
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                     " [%0], [%1], %2, [%3], %4;"
                     :: "r"(smem_u32(buf(s, rr))), "l"(src), "r"(sbytes), "r"(smem_u32(&sh.dbar[s])),
                        "l"(RMS_POLREG(RMS_BULK_POL, pol)) : "memory");
#endif
      }
    }
  };
#endif

#if RMS_STAGES == 2
  issue(cid, 0);
#endif
  int it = 0;
#if RMS_PERSISTENT
  for (int g = cid; g < groups; g += ncl, ++it)
#else
  const int g = cid;
#endif
  {
    const int s = RMS_STAGES == 2 ? (it & 1) : 0;
    const int row = g * R + r;
    const bool ok = row < M;
    const char* xr = xs + (size_t)row * row_bytes;
    char* yr = ys + (size_t)row * row_bytes;
    unsigned char* b = buf(s, r);
    float a0 = 0.f, a1 = 0.f;

#if RMS_STAGING == 1
    // ld.global -> registers (sum of squares) -> st.shared, K vectors at a time
    if (ok) {
      for (int j0 = t; j0 < nvs; j0 += K * TPR) {
        uint32_t v[K][PPV * PW];
#pragma unroll
        for (int k = 0; k < K; ++k)
#pragma unroll
          for (int q = 0; q < PPV; ++q) {
            const int pk = (j0 + k * TPR) * PPV + q;
            if (pk < npk) ld_x_main<PW>(&v[k][q * PW], xr + (size_t)pk * PB, pol);
            else {
#pragma unroll
              for (int i = 0; i < PW; ++i) v[k][q * PW + i] = 0u;
            }
          }
#pragma unroll
        for (int k = 0; k < K; ++k) {
          sumsq<T, PPV * PW>(v[k], a0, a1);
#pragma unroll
          for (int q = 0; q < PPV; ++q) {
            const int pk = (j0 + k * TPR) * PPV + q;
            if (pk < npk) {
              if constexpr (PW == 4)
                *(uint4*)(b + pk * PB) = make_uint4(v[k][q * PW], v[k][q * PW + 1], v[k][q * PW + 2], v[k][q * PW + 3]);
              else
                *(uint2*)(b + pk * PB) = make_uint2(v[k][q * PW], v[k][q * PW + 1]);
            }
          }
        }
      }
    }
#else
#if RMS_STAGING == 2
#if RMS_STAGES == 2
    issue(g + ncl, (it + 1) & 1);
    asm volatile("cp.async.wait_group 1;" ::: "memory");
#else
    issue(g, 0);
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
#else  // bulk
    __syncthreads();   // every thread is done reading the buffer the next copy overwrites
#if RMS_STAGES == 2
    issue(g + ncl, (it + 1) & 1);
    mbar_wait(&sh.dbar[s], (uint32_t)((it >> 1) & 1));
#else
    issue(g, 0);
    mbar_wait(&sh.dbar[0], (uint32_t)(it & 1));
#endif
#endif
    if (ok) {
#pragma unroll kUnroll
      for (int j = t; j < nvs; j += TPR) {
#pragma unroll
        for (int q = 0; q < PPV; ++q) {
          const int pk = j * PPV + q;
          if (pk < npk) {
            uint32_t v[PW];
            if constexpr (PW == 4) {
              const uint4 u = *(const uint4*)(b + pk * PB);
              v[0] = u.x; v[1] = u.y; v[2] = u.z; v[3] = u.w;
            } else {
              const uint2 u = *(const uint2*)(b + pk * PB);
              v[0] = u.x; v[1] = u.y;
            }
            sumsq<T, PW>(v, a0, a1);
          }
        }
      }
    }
#endif
//@weight_pipeline new
    // the weight of the first kWB vectors is in flight across the reduction's barriers
    uint32_t wp0[kWB][PPV][WPW], wp1[kWB][PPV][WPW];
    auto wp_load = [&](uint32_t (&w)[kWB][PPV][WPW], int j0) {
#pragma unroll
      for (int u = 0; u < kWB; ++u)
#pragma unroll
        for (int q = 0; q < PPV; ++q) {
          const int pk = (j0 + u * TPR) * PPV + q;
          if (j0 + u * TPR < nvs && pk < npk) ld_w<WPW>(w[u][q], ws + (size_t)pk * WPB, pol);
        }
    };
    if (ok) wp_load(wp0, t);
//@weight_pipeline end
    const float ss = reduce(a0 + a1, it);
    const float rs = rms_rsqrt(fmaf(ss, inv_n, eps));
    if (rstd != nullptr && ok && t == 0 && rank == 0) rstd[row] = rs;
//@weight_batch legacy
    if (ok) {
#pragma unroll kUnroll
      for (int j = t; j < nvs; j += TPR) {
#pragma unroll
        for (int q = 0; q < PPV; ++q) {
          const int pk = j * PPV + q;
          if (pk < npk) {
            uint32_t v[PW], ww[WPW], yw[PW];
            if constexpr (PW == 4) {
              const uint4 u = *(const uint4*)(b + pk * PB);
              v[0] = u.x; v[1] = u.y; v[2] = u.z; v[3] = u.w;
            } else {
              const uint2 u = *(const uint2*)(b + pk * PB);
              v[0] = u.x; v[1] = u.y;
            }
            ld_w<WPW>(ww, ws + (size_t)pk * WPB, pol);
            P::norm(v, ww, rs, yw);
            st_y<PW>(yr + (size_t)pk * PB, yw, pol);
          }
        }
      }
    }
//@weight_batch new
    if (ok) {
//@ wp_store repeats the body of the loop below on purpose: that loop (the weight_pipeline legacy
//@ part) must stay byte for byte what session 5's weight_batch genomes were judged with.
//@weight_pipeline new
      // two batches in registers: the next batch's weight is loaded before this batch is written
      auto wp_store = [&](const uint32_t (&w)[kWB][PPV][WPW], int j0) {
#pragma unroll
        for (int u = 0; u < kWB; ++u)
#pragma unroll
          for (int q = 0; q < PPV; ++q) {
            const int pk = (j0 + u * TPR) * PPV + q;
            if (j0 + u * TPR < nvs && pk < npk) {
              uint32_t v[PW], yw[PW];
              if constexpr (PW == 4) {
                const uint4 x4 = *(const uint4*)(b + pk * PB);
                v[0] = x4.x; v[1] = x4.y; v[2] = x4.z; v[3] = x4.w;
              } else {
                const uint2 x2 = *(const uint2*)(b + pk * PB);
                v[0] = x2.x; v[1] = x2.y;
              }
              P::norm(v, w[u][q], rs, yw);
              st_y<PW>(yr + (size_t)pk * PB, yw, pol);
            }
          }
      };
      for (int j0 = t; j0 < nvs; j0 += 2 * kWB * TPR) {
        wp_load(wp1, j0 + kWB * TPR);
        wp_store(wp0, j0);
        wp_load(wp0, j0 + 2 * kWB * TPR);
        wp_store(wp1, j0 + kWB * TPR);
      }
//@weight_pipeline legacy
      // the weight of kWB vectors is loaded before any of them is written
#pragma unroll kUnroll
      for (int j0 = t; j0 < nvs; j0 += kWB * TPR) {
        uint32_t wb[kWB][PPV][WPW];
#pragma unroll
        for (int u = 0; u < kWB; ++u)
#pragma unroll
          for (int q = 0; q < PPV; ++q) {
            const int pk = (j0 + u * TPR) * PPV + q;
            if (j0 + u * TPR < nvs && pk < npk) ld_w<WPW>(wb[u][q], ws + (size_t)pk * WPB, pol);
          }
#pragma unroll
        for (int u = 0; u < kWB; ++u)
#pragma unroll
          for (int q = 0; q < PPV; ++q) {
            const int pk = (j0 + u * TPR) * PPV + q;
            if (j0 + u * TPR < nvs && pk < npk) {
              uint32_t v[PW], yw[PW];
              if constexpr (PW == 4) {
                const uint4 x4 = *(const uint4*)(b + pk * PB);
                v[0] = x4.x; v[1] = x4.y; v[2] = x4.z; v[3] = x4.w;
              } else {
                const uint2 x2 = *(const uint2*)(b + pk * PB);
                v[0] = x2.x; v[1] = x2.y;
              }
              P::norm(v, wb[u][q], rs, yw);
              st_y<PW>(yr + (size_t)pk * PB, yw, pol);
            }
          }
      }
//@weight_pipeline end
    }
//@weight_batch end
  }
#endif
  (void)ncl; (void)it;
}

// One entry: RMS_ENTRY(name, x type, weight type, cluster size, cluster attribute)
#if RMS_MAXRREG > 0
#define RMS_BOUNDS __maxnreg__(RMS_MAXRREG)
#else
#define RMS_BOUNDS __launch_bounds__(RMS_CTA_THREADS, RMS_MIN_BLOCKS)
#endif
#define RMS_ENTRY(NAME, T, W, C, CATTR)                                                           \
  extern "C" __global__ void RMS_BOUNDS CATTR NAME(const T* __restrict__ x,                       \
      const W* __restrict__ w, T* __restrict__ y, float* __restrict__ rstd, int M, int N,        \
      float eps) {                                                                                \
    rms_body<T, W, C>(x, w, y, rstd, M, N, eps);                                                  \
  }
