// RMSNorm backward, evolvable template (sm_90a). Rendered by kernels/rmsnorm_bwd/family.py: a block
// of #defines from the genome, this text, then the extern "C" entries (BWD_ENTRY per x dtype and
// cluster size, the dw reduction and the dw zeroing kernels).
//
//   xhat = x * rstd,  dx = rstd * (w*dy - xhat * c),  c = mean_n(xhat * w * dy) = rstd * mean_n(x*w*dy)
//   dw[n] = sum_m dy[m, n] * xhat[m, n]
//
// Geometry (launch(): block = (TPR, R), grid.x = clusters x C, persistent):
//   CTA (cluster) k of K = gridDim.x / C visits row groups g = k, k + K, ...; a group is R rows, row
//   g*R + threadIdx.y. Inside a cluster, CTA rank c owns the vectors [c*SV, min((c+1)*SV, V)) of every
//   row (V = N / E vectors of BWD_VEC_BYTES, E elements each; SV = ceil(V / C)); thread t owns the
//   vectors t + j*TPR (j < BWD_CHUNKS) of its slice, the same in every row, so its dw accumulators stay
//   in fp32 registers for the whole kernel. At the end the R rows of a CTA are combined through shared
//   memory and the CTA's dw row is written to dw_part[k, :] (its slice of it), or added into dw with
//   red.global.add.f32 (BWD_DW_ATOMIC; dw zeroed by bwd_dw_zero first).
// Requirements checked by launch(): N * sizeof(T) a multiple of 16 bytes; 16-byte aligned pointers.
//
// Genes (#defines): BWD_VEC_BYTES 8|16  BWD_CHUNKS  BWD_CTA_THREADS  BWD_MIN_BLOCKS  BWD_MAXRREG
//   BWD_STAGES 1|2 (1..4 with shared-memory staging: a ring of row groups in flight)  BWD_WEIGHT_REGS
//   BWD_RECOMPUTE (rstd from x)  BWD_DW_ATOMIC
//   BWD_STAGING 0 registers | 1 cp.async into shared memory (space v2; BWD_CPASYNC its qualifiers)
//   BWD_SCHED_DYNAMIC (space v3): clustered entries take their row groups from a counter (below)
//   BWD_XCHG_ASYNC (space v4): the clustered row exchange by st.async + mbarrier (row_reduce_async:
//   no __syncthreads, no barrier.cluster, hence no MEMBAR.ALL.GPU / CCTL.IVALL, per row group)
//   BWD_DW_SMEM (space v3): the dw accumulators in dynamic shared memory (after the staging ring)
//   BWD_ROLLED (space v3): the two passes loop over a thread's vectors without unrolling (needs
//   BWD_DW_SMEM, BWD_STAGING or BWD_L2, and no weight in registers: nothing indexed by the vector is
//   a register); BWD_ROLLED 4 (space v5): the same loop unrolled by 4 (four vectors' loads in flight)
//   BWD_L2 (space v5): x and dy are not staged: one bulk L2 prefetch (cp.async.bulk.prefetch.L2,
//   SASS UBLKPF) per row and tensor S - 1 groups ahead, both passes ld.global from L2 (pass 2 is a
//   re-read), so a CTA's shared memory holds only the dw accumulators and more CTAs fit an SM
//@ BWD_DW_SHADOW (space v6, gene dw_update = shadow; its code sits in //@dw_update regions, so
//@ genomes at dw_update = pass2 render byte for byte as before v6): dw += dy * x * rstd from the
//@ loaded rstd between sending the row sums and waiting for the cluster's (st.async exchange: in
//@ the exchange's shadow; otherwise just before the exchange); after it only dx is left
//@ exchange_wait = suspend (space v9; //@exchange_wait region in mbar_wait): the async exchange's wait
//@ is one try_wait loop with a suspend-time hint instead of a polling C++ loop
//@ BWD_P2_REGS (space v9, gene pass2_data = regs; //@pass2_data regions): pass 1 keeps the words
//@ of x and dy it read from the staging slots (or L2) in registers, and pass 2 (and the shadow)
//@ use them: the row is read once from shared memory (L2) a visit instead of twice
//@ specialize = exact_width (space v11; //@exact_width regions, keyed on that value): BWD_ENTRY_XN, an
//@ exact entry with the row width a compile-time constant too (the shape fixes it: N = C x chunks x XT x
//@ elements a vector)
//@ pass2_data = regs_exact (space v11; //@held_exact region, keyed on that value, inside //@pass2_data):
//@ only the exact entries hold pass 1's words for pass 2; the run-time entries read the row again
//@ launch_overlap = pdl (space v11; //@launch_overlap regions): programmatic dependent launch inside a
//@ call. Every kernel executes griddepcontrol.launch_dependents first; family.launch launches each later
//@ kernel with Launch.overlap, and it executes griddepcontrol.wait (it returns once the kernel before has
//@ completed and its memory is visible; at once when the launch was not overlapped) before it touches
//@ what that kernel writes: bwd_dw_reduce before the partial rows, the main kernel before the row
//@ schedule's counter (bwd_sched_init zeroes it) and before its dw atomics (bwd_dw_zero, bwd_sched_init).
//@ bwd_dw_reduce then reads the partial rows with ld.global.cg (L2, coherent), not ld.global.nc: the
//@ non-coherent path is for data read-only during the kernel's lifetime, which an overlapped launch breaks.
//@ Deadlock-free: no kernel waits on a later one, and a waiting CTA holds only room that no unstarted CTA
//@ of the kernel before needs (the later kernel is scheduled once every CTA of that one has started).
//@ short_schedule = dynamic (space v12; //@short_schedule regions): the unclustered entries take their row
//@ groups from the counter too (BWD_SCHED_DYNAMIC is then defined 1 so the schedule's code compiles, and
//@ BWD_SCHED_CLUSTER says whether the clustered entries use it: row_schedule). Thread (0, 0) fetches a
//@ visit's next group and writes it into xg[par] before the row reduction's CTA barrier (one more barrier
//@ where a row has a warp or less, which has none), every thread reads it after: the parity argument of
//@ row_reduce covers it as it covers `red`.
//@ refill = pass2 (space v14; //@refill regions): with one stage of shared-memory staging, the next group's
//@ copies are issued in pass 2, each vector's right after its slots are read and used, not at the top of the
//@ visit that reduces it. refill = pass1 (v15; //@refill_p1 regions, keyed on that value): in pass 1 where the
//@ entry holds the row in registers for pass 2 (the others refill in pass 2); the clustered dynamic schedule
//@ then fetches one group more at the start (gst[S + 1]) and each visit's fetch names the group two visits on
//@ (gn). pass2_data = regs_exact32 (v15; //@held32 regions): regs_exact in the entries of 32-bit x only.
//   PTX qualifier strings BWD_LDX (x and dy loads), BWD_STX (dx stores), each with a *_POL selector
//   (0 none, 1 L2 evict_first policy operand).

#include <stdint.h>

#ifndef BWD_VEC_BYTES
#error "render the template through kernels/rmsnorm_bwd/family.py (genes are #defines)"
#endif
#ifndef BWD_STAGING
#define BWD_STAGING 0          // space v2: 1 = x and dy staged in shared memory by cp.async
#endif
#ifndef BWD_SCHED_DYNAMIC
#define BWD_SCHED_DYNAMIC 0    // space v3: 1 = clustered entries schedule row groups dynamically
#endif
#ifndef BWD_DW_SMEM
#define BWD_DW_SMEM 0          // space v3: 1 = dw accumulators in shared memory, not registers
#endif
#ifndef BWD_ROLLED
#define BWD_ROLLED 0           // space v3: 1 = the passes' vector loops rolled (one vector live)
#endif
#ifndef BWD_XCHG_ASYNC
#define BWD_XCHG_ASYNC 0       // space v4: 1 = clustered row sums exchanged by st.async + mbarrier
#endif
#ifndef BWD_L2
#define BWD_L2 0               // space v5: 1 = x and dy prefetched into L2 and read from it in both passes
#endif
#if BWD_L2 && BWD_STAGING
#error "BWD_L2 replaces staging: x and dy are not copied into shared memory"
#endif
//@dw_update new
#ifndef BWD_DW_SHADOW
#define BWD_DW_SHADOW 0        // space v6: 1 = dw accumulated before the exchange completes
#endif
#if BWD_DW_SHADOW && BWD_RECOMPUTE
#error "dw_update = shadow needs the row's rstd before the exchange: rstd loaded, not recomputed"
#endif
//@dw_update end
//@pass2_data new
#ifndef BWD_P2_REGS
#define BWD_P2_REGS 0          // space v9: 1 = pass 2 takes x and dy from registers pass 1 filled
#endif
#if BWD_P2_REGS && (BWD_ROLLED || !(BWD_STAGING || BWD_L2))
#error "pass2_data = regs holds pass 1's words by vector (unrolled loops) of a staged row (smem_async or l2)"
#endif
//@pass2_data end
#if BWD_ROLLED && !(BWD_DW_SMEM && (BWD_STAGING || BWD_L2) && !BWD_WEIGHT_REGS)
#error "rolled vector loops need dw in shared memory, x and dy re-read (shared memory or L2) and the weight re-read"
#endif
#if BWD_ROLLED
// a rolled loop must not index a register array by the vector: ownership is recomputed
//@specialize legacy
#define BWD_OWN(j) (v0 + tx + (j) * tpr < v1)
//@specialize new
#define BWD_OWN(j) (XT > 0 || v0 + tx + (j) * tpr < v1)
//@specialize end
#if BWD_ROLLED == 4
#define BWD_VLOOP _Pragma("unroll 4")
#else
#define BWD_VLOOP _Pragma("unroll 1")
#endif
#else
#define BWD_OWN(j) own[j]
#define BWD_VLOOP _Pragma("unroll")
#endif
#if BWD_STAGES > 2 && !BWD_STAGING && !BWD_L2
#error "more than two stages need shared-memory staging (BWD_STAGING 1) or L2 prefetch (BWD_L2 1)"
#endif

#define BWD_NW (BWD_VEC_BYTES / 4)                     // 32-bit words per vector
#define BWD_WARPS (BWD_CTA_THREADS / 32 > 0 ? BWD_CTA_THREADS / 32 : 1)
#define BWD_FULL 0xffffffffu

struct bf16_t { unsigned short bits; };
struct fp16_t { unsigned short bits; };

// ---------------------------------------------------------------------------------------------
// element types: a 32-bit word <-> EPW floats (round to nearest even on the way back)
template <typename T> struct Tr;
template <> struct Tr<float> {
  static constexpr int EPW = 1;
  static __device__ __forceinline__ void unpack(uint32_t w, float* f) { f[0] = __uint_as_float(w); }
  static __device__ __forceinline__ uint32_t pack(const float* f) { return __float_as_uint(f[0]); }
};
template <> struct Tr<bf16_t> {
  static constexpr int EPW = 2;
  static __device__ __forceinline__ void unpack(uint32_t w, float* f) {
    f[0] = __uint_as_float(w << 16);
    f[1] = __uint_as_float(w & 0xffff0000u);
  }
  static __device__ __forceinline__ uint32_t pack(const float* f) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(f[1]), "f"(f[0]));
    return r;
  }
};
template <> struct Tr<fp16_t> {
  static constexpr int EPW = 2;
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
// global memory through inline PTX (the genes choose the qualifiers)
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

// one vector (BWD_NW words) of x or dy
__device__ __forceinline__ void ld_vec(uint32_t* d, const void* p, uint64_t pol) {
#if BWD_NW == 4
#if BWD_LDX_POL == 0
  asm volatile(BWD_LDX ".v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "l"(p));
#else
  asm volatile(BWD_LDX ".v4.u32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "l"(p), "l"(pol));
#endif
#else
#if BWD_LDX_POL == 0
  asm volatile(BWD_LDX ".v2.u32 {%0,%1}, [%2];" : "=r"(d[0]), "=r"(d[1]) : "l"(p));
#else
  asm volatile(BWD_LDX ".v2.u32 {%0,%1}, [%2], %3;" : "=r"(d[0]), "=r"(d[1]) : "l"(p), "l"(pol));
#endif
#endif
}

__device__ __forceinline__ void st_vec(void* p, const uint32_t* s, uint64_t pol) {
#if BWD_NW == 4
#if BWD_STX_POL == 0
  asm volatile(BWD_STX ".v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(s[0]), "r"(s[1]), "r"(s[2]), "r"(s[3])
               : "memory");
#else
  asm volatile(BWD_STX ".v4.u32 [%0], {%1,%2,%3,%4}, %5;"
               :: "l"(p), "r"(s[0]), "r"(s[1]), "r"(s[2]), "r"(s[3]), "l"(pol) : "memory");
#endif
#else
#if BWD_STX_POL == 0
  asm volatile(BWD_STX ".v2.u32 [%0], {%1,%2};" :: "l"(p), "r"(s[0]), "r"(s[1]) : "memory");
#else
  asm volatile(BWD_STX ".v2.u32 [%0], {%1,%2}, %3;" :: "l"(p), "r"(s[0]), "r"(s[1]), "l"(pol) : "memory");
#endif
#endif
}

// E fp32 values (E = 2, 4 or 8) through the read-only path (weight)
template <int E>
__device__ __forceinline__ void ld_f32(float* d, const float* p) {
  if constexpr (E == 8) {
    ld_f32<4>(d, p);
    ld_f32<4>(d + 4, p + 4);
  } else if constexpr (E == 4) {
    asm volatile("ld.global.nc.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]) : "l"(p));
  } else {
    static_assert(E == 2, "fp32 vector width");
    asm volatile("ld.global.nc.v2.f32 {%0,%1}, [%2];" : "=f"(d[0]), "=f"(d[1]) : "l"(p));
  }
}

// E fp32 values stored (dw partial rows)
template <int E>
__device__ __forceinline__ void st_f32(float* p, const float* s) {
  if constexpr (E == 8) {
    st_f32<4>(p, s);
    st_f32<4>(p + 4, s + 4);
  } else if constexpr (E == 4) {
    asm volatile("st.global.v4.f32 [%0], {%1,%2,%3,%4};" :: "l"(p), "f"(s[0]), "f"(s[1]), "f"(s[2]), "f"(s[3])
                 : "memory");
  } else {
    asm volatile("st.global.v2.f32 [%0], {%1,%2};" :: "l"(p), "f"(s[0]), "f"(s[1]) : "memory");
  }
}

// cp.async of one vector into shared memory (BWD_CPASYNC: .cg for 16 bytes, .ca for 8; optional L2
// evict_first hint and L2 prefetch size), its group commit and wait, and the shared read back
__device__ __forceinline__ void cp_async_vec(uint32_t* dst, const void* src, uint64_t pol) {
#if BWD_STAGING
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
#if BWD_LDX_POL == 0
  asm volatile(BWD_CPASYNC " [%0], [%1], %2;" :: "r"(d), "l"(src), "n"(BWD_VEC_BYTES) : "memory");
#else
  asm volatile(BWD_CPASYNC " [%0], [%1], %2, %3;" :: "r"(d), "l"(src), "n"(BWD_VEC_BYTES), "l"(pol) : "memory");
#endif
#endif
}

// >>> bulk_span
// The bulk prefetch takes a 16-byte aligned address and a multiple of 16 bytes (PTX ISA,
// cp.async.bulk.prefetch.L2; anything else is CUDA error 716, misaligned address: session 14's
// 8-byte-vector genomes on rows whose slice starts mid-line). The span is trimmed inward to the
// whole 16-byte lines inside [a, a + bytes): never a byte outside the CTA's slice, and the loads
// fetch the trimmed edges themselves. Returns the trimmed size (0: nothing to prefetch).
__host__ __device__ __forceinline__ unsigned bulk_span(unsigned long long a, unsigned bytes,
                                                       unsigned long long* lo) {
  *lo = (a + 15ull) & ~15ull;
  const unsigned long long hi = (a + bytes) & ~15ull;
  return hi > *lo ? (unsigned)(hi - *lo) : 0u;
}
// <<< bulk_span

// space v5: a row slice of x or dy from global memory into L2, no completion to wait for (the
// loads that follow find the lines there, or fetch them themselves: a late prefetch costs nothing
// but the duplicate request); one instruction per row slice and tensor, issued by one thread
__device__ __forceinline__ void l2_prefetch_bulk(const void* p, unsigned bytes) {
  unsigned long long lo;
  const unsigned n = bulk_span(reinterpret_cast<unsigned long long>(p), bytes, &lo);
  if (n) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(lo), "r"(n));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N_>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N_) : "memory"); }

__device__ __forceinline__ void ld_shared_vec(uint32_t* d, const uint32_t* p) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
#if BWD_NW == 4
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(a));
#else
  asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(d[0]), "=r"(d[1]) : "r"(a));
#endif
}

__device__ __forceinline__ void red_add(float* p, float v) {
  asm volatile("red.global.add.f32 [%0], %1;" :: "l"(p), "f"(v) : "memory");
}

//@rstd_stage new
// (v13) rstd copied beside its row group's x and dy: one 4-byte cp.async into the thread's own slot,
// committed with the group, so it lands when the group's data does and holds no register meanwhile
__device__ __forceinline__ void cp_async_f32(float* dst, const float* src) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ float ld_shared_f32(const float* p) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"((unsigned)__cvta_generic_to_shared(p)));
  return v;
}
//@rstd_stage end
__device__ __forceinline__ float ld_rstd(const float* p) {
  float r;
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(r) : "l"(p));
  return r;
}

// ---------------------------------------------------------------------------------------------
// cluster helpers (distributed shared memory)
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ void st_cluster_f32(const float* local_addr, unsigned rank, float v) {
  unsigned a = (unsigned)__cvta_generic_to_shared(local_addr), ra;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;" :: "r"(ra), "f"(v) : "memory");
}

__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ void st_cluster_s32(const int* local_addr, unsigned rank, int v) {
  unsigned a = (unsigned)__cvta_generic_to_shared(local_addr), ra;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
  asm volatile("st.shared::cluster.s32 [%0], %1;" :: "r"(ra), "r"(v) : "memory");
}

//@launch_overlap new
// space v11 (launch_overlap = pdl): the next kernel of the call may be scheduled from now on
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
// the kernel before has completed and its writes are visible (at once when not launched overlapped)
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

//@launch_overlap end
// the next row groups of a dynamically scheduled cluster: one atom.global.add per fetch, by one
// thread of rank 0 (the result travels to the other CTAs with the row sums)
__device__ __forceinline__ int fetch_groups(int* ctr, int n) {
  int r;
  asm volatile("atom.global.add.s32 %0, [%1], %2;" : "=r"(r) : "l"(ctr), "r"(n) : "memory");
  return r;
}

// ---------------------------------------------------------------------------------------------
// the row reduction of NV values (dot product; sum of squares with BWD_RECOMPUTE): lanes of a row
// (TPR <= 32: an aligned group of TPR lanes; else whole warps, then shared memory), then the CTAs of
// a cluster. `par` alternates the shared slots between consecutive rows, so one __syncthreads (one
// cluster barrier) per row suffices: a CTA can be at most one row ahead of the slowest reader.
#define BWD_NV (1 + BWD_RECOMPUTE)

// Dynamic scheduling (BWD_SCHED_DYNAMIC, `xg` non-null): thread (0, 0) of rank 0 also writes `nxt`
// (the group it fetched) into slot xg[par] of every CTA before the cluster barrier; every thread
// reads it back into `got` after it. The parity argument above covers xg as it covers xch.
template <int C>
__device__ __forceinline__ void row_reduce(float* v, int tpr, int par, float (*red)[BWD_NV][BWD_WARPS],
                                           float* xch, int* xg = nullptr, int nxt = 0, int* got = nullptr) {
  const int lin = threadIdx.y * tpr + threadIdx.x;
#pragma unroll
  for (int i = 0; i < BWD_NV; ++i) {
    for (int o = (tpr < 32 ? tpr : 32) >> 1; o > 0; o >>= 1) v[i] += __shfl_xor_sync(BWD_FULL, v[i], o);
  }
  if (tpr > 32) {
    const int wpr = tpr >> 5;
    if ((lin & 31) == 0) {
#pragma unroll
      for (int i = 0; i < BWD_NV; ++i) red[par][i][lin >> 5] = v[i];
    }
//@short_schedule new
    if constexpr (C == 1) {
      if (xg != nullptr && lin == 0) xg[par] = nxt;   // the CTA's next group, across the barrier below
    }
//@short_schedule end
    __syncthreads();
    const int w0 = threadIdx.y * wpr;
#pragma unroll
    for (int i = 0; i < BWD_NV; ++i) {
      float s = 0.f;
      for (int q = 0; q < wpr; ++q) s += red[par][i][w0 + q];
      v[i] = s;
    }
  }
//@short_schedule new
  if constexpr (C == 1) {
    if (xg != nullptr) {
      if (tpr <= 32) {                           // rows of a warp or less reduce without a CTA barrier
        if (lin == 0) xg[par] = nxt;
        __syncthreads();
      }
      *got = xg[par];
    }
  }
//@short_schedule end
  if constexpr (C > 1) {
    // xch[par][src][row][i]: every CTA's row sums in every CTA of the cluster
    const unsigned me = cluster_rank();
    const int R = blockDim.y;
    if (threadIdx.x == 0) {
      for (int dst = 0; dst < C; ++dst) {
#pragma unroll
        for (int i = 0; i < BWD_NV; ++i)
          st_cluster_f32(xch + ((par * C + (int)me) * R + threadIdx.y) * BWD_NV + i, (unsigned)dst, v[i]);
      }
    }
#if BWD_SCHED_DYNAMIC
    if (xg != nullptr && me == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
      for (int dst = 0; dst < C; ++dst) st_cluster_s32(xg + par, (unsigned)dst, nxt);
    }
#endif
    cluster_sync();
#if BWD_SCHED_DYNAMIC
    if (xg != nullptr) *got = xg[par];
#endif
#pragma unroll
    for (int i = 0; i < BWD_NV; ++i) {
      float s = 0.f;
#pragma unroll
      for (int src = 0; src < C; ++src) s += xch[((par * C + src) * R + threadIdx.y) * BWD_NV + i];
      v[i] = s;
    }
  }
}

#if BWD_XCHG_ASYNC
// ---------------------------------------------------------------------------------------------
// The clustered row exchange without a cluster barrier (space v4). barrier.cluster.arrive.release
// compiles to MEMBAR.ALL.GPU + UCGABAR_ARV, and wait.acquire to UCGABAR_WAIT + CCTL.IVALL: every
// row group waited until the thread's dx stores of the previous group were acknowledged by L2 and
// until every CTA of the cluster had arrived, then dropped L1. Here every warp pushes its row sums
// into slot [par][row][src rank][warp of the row] of every CTA of the cluster with
// st.async ... mbarrier::complete_tx (SASS STAS), and waits (SYNCS try_wait) on its own CTA's
// barrier xbar[par], which thread (0, 0) arms with the bytes that call brings (C CTAs x all warps x
// NV floats, + 4 for the dynamic schedule's group index). No fence and no CTA barrier: a warp
// waits only for the sums it needs.
// Reuse of slot parity par (calls it and it + 2): a CTA's call it + 2 sends wait for its call
// it + 1 completion, which needs the call it + 1 sends of every warp of the cluster, each issued
// after that warp read (and used) its call it values, so nothing is overwritten before it is read;
// and a barrier phase cannot complete twice under a waiting warp (it + 2 needs that warp's sends).
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"((unsigned)__cvta_generic_to_shared(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_expect(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"((unsigned)__cvta_generic_to_shared(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(bar);
//@exchange_wait legacy
  unsigned done = 0;
  do {
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(a), "r"(parity) : "memory");
  } while (!done);
//@exchange_wait new
  // space v9 (exchange_wait = suspend): one asm loop with a suspend-time hint (INT21's wait): the warp
  // sleeps in try_wait until the phase completes (or the hint's time passes) instead of re-issuing the
  // probe, its select and the C++ loop's compare and branch (session 22's Nsight Compute: 1d61564c
  // executed 6x INT21's SYNCS a row, ~30 a warp and visit)
  asm volatile("{\n\t.reg .pred p;\n"
               "BWD_WAIT_%=:\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1, %2;\n\t"
               "@!p bra BWD_WAIT_%=;\n\t}" :: "r"(a), "r"(parity), "r"(10000000u) : "memory");
//@exchange_wait end
}
// v into the same-offset slot of CTA `rank`, counted by that CTA's barrier at bar's offset
__device__ __forceinline__ void st_async_f32(const float* slot, unsigned rank, float v, const uint64_t* bar) {
  unsigned d, b;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"((unsigned)__cvta_generic_to_shared(slot)), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(b) : "r"((unsigned)__cvta_generic_to_shared(bar)), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];" :: "r"(d), "f"(v), "r"(b)
               : "memory");
}
__device__ __forceinline__ void st_async_s32(const int* slot, unsigned rank, int v, const uint64_t* bar) {
  unsigned d, b;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"((unsigned)__cvta_generic_to_shared(slot)), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(b) : "r"((unsigned)__cvta_generic_to_shared(bar)), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.s32 [%0], %1, [%2];" :: "r"(d), "r"(v), "r"(b)
               : "memory");
}

// The row sums of call `it` (the visit count) over the cluster; clustered rows are whole warps
// (tpr >= 32, geometry()), so a warp belongs to one row. xch holds 2 x R x C x (tpr / 32) x NV
// floats. Each warp sums the row's C x wpr slots the same way (lane l takes l, l + 32, ..., then a
// shuffle tree), so every CTA gets the same sums bit for bit.
//@dw_update legacy
template <int C>
__device__ __forceinline__ void row_reduce_async(float* v, int tpr, int it, float* xch, uint64_t* xbar,
                                                 int* xg = nullptr, int nxt = 0, int* got = nullptr) {
  const int par = it & 1;
  const unsigned ph = (unsigned)((it >> 1) & 1);
  const int lane = threadIdx.x & 31, wr = threadIdx.x >> 5, wpr = tpr >> 5, R = blockDim.y;
  const unsigned me = cluster_rank();
#pragma unroll
  for (int i = 0; i < BWD_NV; ++i)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v[i] += __shfl_xor_sync(BWD_FULL, v[i], o);
  if (threadIdx.x == 0 && threadIdx.y == 0)
    mbar_expect(xbar + par, (unsigned)(C * R * wpr * BWD_NV * 4) + (xg != nullptr ? 4u : 0u));
  float* const rowx = xch + (size_t)(par * R + threadIdx.y) * C * wpr * BWD_NV;
  if (lane < C) {
#pragma unroll
    for (int i = 0; i < BWD_NV; ++i) st_async_f32(rowx + ((int)me * wpr + wr) * BWD_NV + i, (unsigned)lane, v[i], xbar + par);
  }
#if BWD_SCHED_DYNAMIC
  if (xg != nullptr && me == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
    for (int dst = 0; dst < C; ++dst) st_async_s32(xg + par, (unsigned)dst, nxt, xbar + par);
  }
#endif
  mbar_wait(xbar + par, ph);
#if BWD_SCHED_DYNAMIC
  if (xg != nullptr) *got = xg[par];
#endif
#pragma unroll
  for (int i = 0; i < BWD_NV; ++i) {
    float s = 0.f;
    for (int q = lane; q < C * wpr; q += 32) s += rowx[q * BWD_NV + i];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(BWD_FULL, s, o);
    v[i] = s;
  }
}
//@dw_update new
template <int C>
__device__ __forceinline__ void row_send_async(float* v, int tpr, int it, float* xch, uint64_t* xbar,
                                               int* xg = nullptr, int nxt = 0) {
  const int par = it & 1;
  const int lane = threadIdx.x & 31, wr = threadIdx.x >> 5, wpr = tpr >> 5, R = blockDim.y;
  const unsigned me = cluster_rank();
#pragma unroll
  for (int i = 0; i < BWD_NV; ++i)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v[i] += __shfl_xor_sync(BWD_FULL, v[i], o);
  if (threadIdx.x == 0 && threadIdx.y == 0)
    mbar_expect(xbar + par, (unsigned)(C * R * wpr * BWD_NV * 4) + (xg != nullptr ? 4u : 0u));
  float* const rowx = xch + (size_t)(par * R + threadIdx.y) * C * wpr * BWD_NV;
  if (lane < C) {
#pragma unroll
    for (int i = 0; i < BWD_NV; ++i) st_async_f32(rowx + ((int)me * wpr + wr) * BWD_NV + i, (unsigned)lane, v[i], xbar + par);
  }
#if BWD_SCHED_DYNAMIC
  if (xg != nullptr && me == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
    for (int dst = 0; dst < C; ++dst) st_async_s32(xg + par, (unsigned)dst, nxt, xbar + par);
  }
#else
  (void)nxt;
#endif
}

// the second half: wait for every rank's warp sums of this row group (and, dynamic, the next group
// index), then sum them; between the two halves a thread may do work that needs no row sum
template <int C>
__device__ __forceinline__ void row_finish_async(float* v, int tpr, int it, float* xch, uint64_t* xbar,
                                                 int* xg = nullptr, int* got = nullptr) {
  const int par = it & 1;
  const unsigned ph = (unsigned)((it >> 1) & 1);
  const int lane = threadIdx.x & 31, wpr = tpr >> 5, R = blockDim.y;
  float* const rowx = xch + (size_t)(par * R + threadIdx.y) * C * wpr * BWD_NV;
  mbar_wait(xbar + par, ph);
#if BWD_SCHED_DYNAMIC
  if (xg != nullptr) *got = xg[par];
#else
  (void)xg; (void)got;
#endif
#pragma unroll
  for (int i = 0; i < BWD_NV; ++i) {
    float s = 0.f;
    for (int q = lane; q < C * wpr; q += 32) s += rowx[q * BWD_NV + i];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(BWD_FULL, s, o);
    v[i] = s;
  }
}

template <int C>
__device__ __forceinline__ void row_reduce_async(float* v, int tpr, int it, float* xch, uint64_t* xbar,
                                                 int* xg = nullptr, int nxt = 0, int* got = nullptr) {
  row_send_async<C>(v, tpr, it, xch, xbar, xg, nxt);
  row_finish_async<C>(v, tpr, it, xch, xbar, xg, got);
}
//@dw_update end
#endif

// ---------------------------------------------------------------------------------------------
// the main kernel: dx for every row, one dw row per CTA (cluster)
//@specialize legacy
template <typename T, int C>
//@specialize new
template <typename T, int C, int XT = 0, int XR = 0>
//@specialize end
__device__ __forceinline__ void bwd_main(const T* __restrict__ x, const float* __restrict__ w,
                                         const T* __restrict__ dy, const float* __restrict__ rstd,
                                         T* __restrict__ dx, float* __restrict__ dw, float* __restrict__ dw_part,
                                         int M, int N, float eps) {
//@launch_overlap new
  pdl_trigger();                                 // (v11) the dw reduction may be scheduled now
//@launch_overlap end
  constexpr int EPW = Tr<T>::EPW;
  constexpr int E = BWD_NW * EPW;               // elements per vector
  constexpr int K = BWD_CHUNKS;
  __shared__ float red[2][BWD_NV][BWD_WARPS];
  __shared__ float xch[C > 1 ? 2 * C * BWD_WARPS * BWD_NV : 1];
#if !BWD_DW_SMEM
  __shared__ __align__(16) float comb[BWD_CTA_THREADS * E];
#endif
#if BWD_STAGING || BWD_DW_SMEM
  extern __shared__ __align__(16) uint32_t dsm[];
#endif

//@specialize legacy
  const int tpr = blockDim.x, R = blockDim.y;
//@specialize new
  // space v10 (specialize = exact): an exact entry (XT > 0) knows its threads per row and rows per CTA
  // at compile time, and launch() uses it only where every vector of every CTA's slice exists
  // (V == C * K * XT) and every row of a visited group does (M % XR == 0): no ownership or row guard,
  // slot and global offsets folded into immediates. A launch that breaks the first promise traps.
  const int tpr = XT > 0 ? XT : (int)blockDim.x, R = XT > 0 ? XR : (int)blockDim.y;
  if constexpr (XT > 0) {
    if (blockDim.x != XT || blockDim.y != XR) __trap();
  }
//@specialize end
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int V = N / E;
  const int rank = C > 1 ? (int)cluster_rank() : 0;
  const int k0 = blockIdx.x / C, nk = gridDim.x / C;
  const int SV = (V + C - 1) / C;
  const int v0 = rank * SV;
  const int v1 = min(V, v0 + SV);
  const uint64_t pol = (BWD_LDX_POL || BWD_STX_POL) ? evict_first_policy() : 0ull;
  const float inv_n = 1.0f / (float)N;

  bool own[K];
#pragma unroll
//@specialize legacy
  for (int j = 0; j < K; ++j) own[j] = v0 + tx + j * tpr < v1;
//@specialize new
  for (int j = 0; j < K; ++j) own[j] = XT > 0 || v0 + tx + j * tpr < v1;
//@specialize end

#if BWD_DW_SMEM
  // dw accumulators in shared memory after the staging ring: slots of AW floats (a float4, or a
  // float2 for 2-element vectors) laid out [row y][vector j][half h][thread tx], so a warp's slot
  // accesses are consecutive; a thread reads and writes only its own slots until the final combine
  constexpr int AW = E >= 4 ? 4 : E, AH = E / AW;
  float* const accs = reinterpret_cast<float*>(dsm) +
                      (BWD_STAGING ? (size_t)BWD_STAGES * R * 2 * K * tpr * BWD_NW : (size_t)0);
  auto aslot = [&](int y, int j, int h) -> float* {
    return accs + ((size_t)((y * K + j) * AH + h) * tpr + tx) * AW;
  };
  auto acc_load = [&](float* a, int j) {
#pragma unroll
    for (int h = 0; h < AH; ++h) {
      if constexpr (AW == 4) {
        const float4 t = *reinterpret_cast<const float4*>(aslot(ty, j, h));
        a[h * 4] = t.x; a[h * 4 + 1] = t.y; a[h * 4 + 2] = t.z; a[h * 4 + 3] = t.w;
      } else {
        const float2 t = *reinterpret_cast<const float2*>(aslot(ty, j, h));
        a[h * 2] = t.x; a[h * 2 + 1] = t.y;
      }
    }
  };
  auto acc_store = [&](const float* a, int j) {
#pragma unroll
    for (int h = 0; h < AH; ++h) {
      if constexpr (AW == 4) *reinterpret_cast<float4*>(aslot(ty, j, h)) = make_float4(a[h * 4], a[h * 4 + 1], a[h * 4 + 2], a[h * 4 + 3]);
      else *reinterpret_cast<float2*>(aslot(ty, j, h)) = make_float2(a[h * 2], a[h * 2 + 1]);
    }
  };
  {
    float z[E];
#pragma unroll
    for (int e = 0; e < E; ++e) z[e] = 0.f;
#pragma unroll
    for (int j = 0; j < K; ++j) acc_store(z, j);
  }
#else
  float acc[K][E];
#pragma unroll
  for (int j = 0; j < K; ++j)
#pragma unroll
    for (int e = 0; e < E; ++e) acc[j][e] = 0.f;
#endif
#if BWD_WEIGHT_REGS
  float wr[K][E];
#pragma unroll
  for (int j = 0; j < K; ++j) {
    if (own[j]) ld_f32<E>(wr[j], w + (size_t)(v0 + tx + j * tpr) * E);
    else
#pragma unroll
      for (int e = 0; e < E; ++e) wr[j][e] = 0.f;
  }
#endif

//@pass2_data new
  // space v9 (pass2_data = regs): the words of x and dy pass 1 read (from the staging slots or L2),
  // held in registers through the exchange for pass 2, which reads nothing again
  uint32_t xk[K][BWD_NW], dk[K][BWD_NW];
#define BWD_HELD(j)                                                                               \
  uint32_t xv[BWD_NW], dv[BWD_NW];                                                                \
  _Pragma("unroll") for (int q = 0; q < BWD_NW; ++q) { xv[q] = xk[j][q]; dv[q] = dk[j][q]; }
//@held_exact new
  // space v11 (pass2_data = regs_exact): only an exact entry (XT > 0) holds the row; a run-time entry
  // (rows that do not divide evenly) reads it again as pass2_data = reread does, so its registers stay
  // the reread twin's: ptxas spills the run-time cluster entries of several held-row genomes at the cap
  // of 128 where their exact entries fit (pass 1's copies into xk, dk are dead there and vanish)
//@held32 new
  // (v15) pass2_data = regs_exact32: only the exact entries of 32-bit x hold it; the 16-bit ones read it again
  // (at 512 threads x 8 vectors ptxas spills 1-1.5 KB in the held 16-bit entries and none in the fp32 ones)
  constexpr bool held_row = XT > 0 && sizeof(T) == 4;
//@held32 end
#undef BWD_HELD
#define BWD_HELD(j)                                                                               \
  uint32_t xh_[BWD_NW], dh_[BWD_NW];                                                              \
//@held32 legacy
  if constexpr (XT > 0) {                                                                         \
//@held32 new
  if constexpr (held_row) {                                                                       \
//@held32 end
    _Pragma("unroll") for (int q = 0; q < BWD_NW; ++q) { xh_[q] = xk[j][q]; dh_[q] = dk[j][q]; }  \
  } else {                                                                                        \
    BWD_FETCH(j)                                                                                  \
    _Pragma("unroll") for (int q = 0; q < BWD_NW; ++q) { xh_[q] = xv[q]; dh_[q] = dv[q]; }        \
  }                                                                                               \
  uint32_t(&xv)[BWD_NW] = xh_;                                                                    \
  uint32_t(&dv)[BWD_NW] = dh_;
//@held_exact end
//@pass2_data end
  // The row groups this CTA (cluster) visits, as a queue: gq[0] is the group being computed,
  // gq[q] the one q visits later, rq[q] its rstd (rstd_mode load); the loads of gq[S - 1] are
  // issued at the top of a visit (S = BWD_STAGES: S - 1 groups in flight behind the current one).
  // Static: groups k0, k0 + nk, ... Dynamic (clustered entries of a BWD_SCHED_DYNAMIC genome, more
  // than one cluster): groups handed out by a counter, ctr = dw_part[nk * N] (the slot past the
  // partial rows, zeroed by bwd_sched_init), fetched by one thread of rank 0 and broadcast with the
  // row exchange, so a cluster that starts late (when the GPCs hold fewer clusters than the grid)
  // finds fewer groups instead of running a second wave.
  constexpr int S = BWD_STAGES;
#if BWD_XCHG_ASYNC
  // the exchange's two barriers (one per slot parity), initialised before any peer may send
  __shared__ __align__(8) uint64_t xbar[2];
  if constexpr (C > 1) {
    if (tx == 0 && ty == 0) {
      mbar_init(xbar, 1);
      mbar_init(xbar + 1, 1);
      mbar_init_fence();
    }
    cluster_sync();                              // once per kernel, outside the row loop
  }
  int it = 0;                                    // visits so far: slot parity and barrier phase
#endif
  int gq[S];
  float rq[S];
#pragma unroll
  for (int q = 0; q < S; ++q) { gq[q] = k0 + q * nk; rq[q] = 0.f; }
//@refill_p1 new
  // (v15) refill = pass1: the group after gq[0] is known a visit early (pass 1 copies it): static, nk further;
  // dynamic, fetched with the first ones, then each visit's fetch (broadcast with its exchange) is the group
  // two visits on
  int gn = k0 + S * nk;
//@refill_p1 end
#if BWD_SCHED_DYNAMIC
  __shared__ int xg[2];
//@refill_p1 legacy
  __shared__ int gst[S];
//@refill_p1 new
  __shared__ int gst[S + 1];
//@refill_p1 end
  // (the counter's address and `dyn` are recomputed from kernel parameters where used: fewer
  // registers live across the row loop)
#define BWD_CTR reinterpret_cast<int*>(dw_part + (size_t)(gridDim.x / C) * (size_t)N)
//@short_schedule legacy
  const bool dyn = C > 1 && gridDim.x > C;
//@short_schedule new
  // (v12) the unclustered entries always; the clustered ones with row_schedule = dynamic
  const bool dyn = (C > 1 ? BWD_SCHED_CLUSTER != 0 : true) && gridDim.x > C;
//@short_schedule end
  if (dyn) {
//@short_schedule legacy
    cluster_sync();                              // every CTA of the cluster is running
//@short_schedule new
    if constexpr (C == 1) {
      // (v12) the first S groups stay the static stride's (k0 + q * nk): every CTA of a grid of at most
      // `groups` starts with work and its prologue loads wait for no counter; the counter numbers the
      // groups from nk * S on (see `last` below)
//@launch_overlap new
      if (tx == 0 && ty == 0) pdl_wait();        // (v11) bwd_sched_init has zeroed the counter
//@launch_overlap end
    } else {
    cluster_sync();                              // every CTA of the cluster is running
//@short_schedule end
    if (rank == 0 && tx == 0 && ty == 0) {
//@launch_overlap new
      pdl_wait();                                // (v11) bwd_sched_init has zeroed the counter
//@launch_overlap end
//@refill_p1 legacy
      const int b = fetch_groups(BWD_CTR, S);
      for (int dst = 0; dst < C; ++dst)
#pragma unroll
        for (int q = 0; q < S; ++q) st_cluster_s32(gst + q, (unsigned)dst, b + q);
//@refill_p1 new
      const int b = fetch_groups(BWD_CTR, S + 1);          // (v15) and the next visit's group
      for (int dst = 0; dst < C; ++dst)
#pragma unroll
        for (int q = 0; q <= S; ++q) st_cluster_s32(gst + q, (unsigned)dst, b + q);
//@refill_p1 end
    }
    cluster_sync();
#pragma unroll
    for (int q = 0; q < S; ++q) gq[q] = gst[q];
//@refill_p1 new
    gn = gst[S];
//@refill_p1 end
//@short_schedule new
    }
//@short_schedule end
  }
#endif
#if BWD_L2
  // x and dy not staged (space v5): thread 0 of each row prefetches the CTA's slice of the row into
  // L2 (both tensors, one bulk prefetch each) S - 1 visits ahead; both passes load every vector
  // from global memory (pass 2 a re-read of what pass 1 brought into L2, and possibly L1)
  auto load_rows = [&](int g, float& r) {
    const int row = g * R + ty;
    const bool ok = row < M;
    if (ok && tx == 0 && v1 > v0) {
      const size_t off = (size_t)row * (size_t)N + (size_t)v0 * E;
      const unsigned bytes = (unsigned)((v1 - v0) * E * sizeof(T));
      l2_prefetch_bulk(x + off, bytes);
      l2_prefetch_bulk(dy + off, bytes);
    }
#if !BWD_RECOMPUTE
    r = ok ? ld_rstd(rstd + row) : 0.f;
#endif
  };
#define BWD_FETCH(j)                                                                              \
  uint32_t xv[BWD_NW], dv[BWD_NW];                                                                \
  if (live && BWD_OWN(j)) {                                                                       \
    const size_t off_ = (size_t)row * (size_t)N + (size_t)(v0 + tx + (j) * tpr) * E;              \
    ld_vec(xv, x + off_, pol);                                                                    \
    ld_vec(dv, dy + off_, pol);                                                                   \
  } else {                                                                                        \
    _Pragma("unroll") for (int q = 0; q < BWD_NW; ++q) xv[q] = dv[q] = 0u;                        \
  }
#elif !BWD_STAGING
  // x and dy of the thread's vectors in registers (stages 2: the next row group's in a second set)
  uint32_t xa[K][BWD_NW], da[K][BWD_NW];
  auto load_rows = [&](int g, uint32_t (*xv)[BWD_NW], uint32_t (*dv)[BWD_NW], float& r) {
    const int row = g * R + ty;
    const bool ok = row < M;
    const size_t base = (size_t)row * (size_t)N;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      if (ok && own[j]) {
        const size_t off = base + (size_t)(v0 + tx + j * tpr) * E;
        ld_vec(xv[j], x + off, pol);
        ld_vec(dv[j], dy + off, pol);
      } else {
#pragma unroll
        for (int q = 0; q < BWD_NW; ++q) xv[j][q] = dv[j][q] = 0u;
      }
    }
#if !BWD_RECOMPUTE
    r = ok ? ld_rstd(rstd + row) : 0.f;
#endif
  };
#define BWD_FETCH(j)                                                                              \
  uint32_t xv[BWD_NW], dv[BWD_NW];                                                                \
  _Pragma("unroll") for (int q = 0; q < BWD_NW; ++q) { xv[q] = xa[j][q]; dv[q] = da[j][q]; }
#else
  // x and dy copied by cp.async into this thread's own slots of shared memory (it reads back only
  // what it copied, so cp.async.wait_group is the only synchronisation); stages S: a ring of S
  auto slot = [&](int sb, int a, int j) -> uint32_t* {
    return dsm + ((size_t)(((sb * R + ty) * 2 + a) * K + j) * tpr + tx) * BWD_NW;
  };
//@rstd_stage new
  // (v13) rstd slots [buffer][row y][thread tx], after the staging ring and the dw accumulators
  auto rslot = [&](int sb) -> float* {
    return reinterpret_cast<float*>(dsm) + (size_t)BWD_STAGES * R * 2 * K * tpr * BWD_NW +
           (BWD_DW_SMEM ? (size_t)R * K * tpr * E : (size_t)0) + (size_t)(sb * R + ty) * tpr + tx;
  };
//@rstd_stage end
  auto load_rows = [&](int g, int sb, float& r) {
    const int row = g * R + ty;
    const bool ok = row < M;
    const size_t base = (size_t)row * (size_t)N;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      if (ok && own[j]) {
        const size_t off = base + (size_t)(v0 + tx + j * tpr) * E;
        cp_async_vec(slot(sb, 0, j), x + off, pol);
        cp_async_vec(slot(sb, 1, j), dy + off, pol);
      }
    }
//@rstd_stage legacy
    cp_async_commit();
#if !BWD_RECOMPUTE
    r = ok ? ld_rstd(rstd + row) : 0.f;
#endif
//@rstd_stage new
    // (v13) rstd_stage = smem: the row's rstd into this thread's slot of buffer sb, in the group's commit
    if (ok) cp_async_f32(rslot(sb), rstd + row);
    cp_async_commit();
    (void)r;
//@rstd_stage end
  };
#define BWD_FETCH(j)                                                                              \
  uint32_t xv[BWD_NW], dv[BWD_NW];                                                                \
  if (live && BWD_OWN(j)) {                                                                       \
    ld_shared_vec(xv, slot(sb, 0, j));                                                            \
    ld_shared_vec(dv, slot(sb, 1, j));                                                            \
  } else {                                                                                        \
    _Pragma("unroll") for (int q = 0; q < BWD_NW; ++q) xv[q] = dv[q] = 0u;                        \
  }
#endif

  int par = 0;
#if BWD_L2
  // prologue: the first S - 1 groups prefetched (their rstd queued)
#pragma unroll
  for (int q = 0; q < S - 1; ++q) load_rows(gq[q], rq[q]);
#elif BWD_STAGING
  // prologue: the first S - 1 groups into buffers 0 .. S - 2 (one commit group each)
#pragma unroll
  for (int q = 0; q < S - 1; ++q) load_rows(gq[q], q, rq[q]);
  int sb = 0;                                    // buffer of gq[0]; gq[S - 1] goes to (sb + S - 1) % S
//@refill new
  load_rows(gq[0], 0, rq[0]);                    // (v14) refill = pass2 (S = 1): the first group here, the rest in pass 2
//@refill end
#elif BWD_STAGES == 2
  if (gq[0] * R < M) load_rows(gq[0], xa, da, rq[0]);
#endif
  while (gq[0] * R < M) {
    const int g = gq[0];
#if BWD_SCHED_DYNAMIC
    const int nxt = (dyn && rank == 0 && tx == 0 && ty == 0) ? fetch_groups(BWD_CTR, 1) : 0;
#endif
#if BWD_L2
    load_rows(gq[S - 1], rq[S - 1]);             // S - 1 groups ahead (S = 1: this group's own)
#elif BWD_STAGING
    {
      const int lb = sb == 0 ? S - 1 : sb - 1;  // (sb + S - 1) % S: the buffer the last visit read
//@refill legacy
      load_rows(gq[S - 1], lb, rq[S - 1]);       // always one commit group (empty past the end) ...
      cp_async_wait<S - 1>();                    // ... so gq[0]'s has landed
//@refill new
      (void)lb;                                  // (v14) gq[0]'s copies were issued by the last visit's pass 2
      cp_async_wait<0>();                        // (or the prologue), one commit group
//@refill end
    }
#elif BWD_STAGES == 2
    uint32_t xb[K][BWD_NW], db[K][BWD_NW];
    if (gq[1] * R < M) load_rows(gq[1], xb, db, rq[1]);
#else
    load_rows(g, xa, da, rq[0]);
#endif
    const int row = g * R + ty;
//@specialize legacy
    const bool live = row < M;
//@specialize new
    const bool live = XT > 0 || row < M;
//@specialize end
    (void)live;
//@refill_p1 new
    // (v15) refill = pass1: where this entry holds the row in registers for pass 2 (pass2_data = regs_exact,
    // the exact entries), pass 1 refills each vector's slots with the next group's copies right after it has
    // used their words, so the next row streams in behind the exchange and the whole of pass 2 as well. The
    // next group (gn) is known before pass 1. The run-time entries refill in pass 2, with the same group.
//@held32 legacy
    constexpr bool rf1 = XT > 0;
//@held32 new
    constexpr bool rf1 = held_row;
//@held32 end
    const int nrow1 = gn * R + ty;
    (void)nrow1;
//@refill_p1 end
    // pass 1: s[0] = sum x*w*dy, s[1] = sum x*x
    float s[BWD_NV];
#pragma unroll
    for (int i = 0; i < BWD_NV; ++i) s[i] = 0.f;
    BWD_VLOOP
    for (int j = 0; j < K; ++j) {
#if BWD_WEIGHT_REGS
      const float* wj = wr[j];
#else
      float wj[E];
      if (BWD_OWN(j)) ld_f32<E>(wj, w + (size_t)(v0 + tx + j * tpr) * E);
      else
#pragma unroll
        for (int e = 0; e < E; ++e) wj[e] = 0.f;
#endif
      BWD_FETCH(j)
//@pass2_data new
      // keep pass 1's words of x and dy for pass 2 (and the shadow): no second read
#pragma unroll
      for (int q = 0; q < BWD_NW; ++q) { xk[j][q] = xv[q]; dk[j][q] = dv[q]; }
//@pass2_data end
#pragma unroll
      for (int q = 0; q < BWD_NW; ++q) {
        float xf[EPW], df[EPW];
        Tr<T>::unpack(xv[q], xf);
        Tr<T>::unpack(dv[q], df);
#pragma unroll
        for (int e = 0; e < EPW; ++e) {
          s[0] = fmaf(xf[e] * wj[q * EPW + e], df[e], s[0]);
#if BWD_RECOMPUTE
          s[1] = fmaf(xf[e], xf[e], s[1]);
#endif
        }
      }
//@refill_p1 new
      // (v15) the words of vector j are held (xk, dk) and used above: its slots take the next group's copies
      if constexpr (rf1) {
        if (nrow1 < M && BWD_OWN(j)) {
          const size_t off = (size_t)nrow1 * (size_t)N + (size_t)(v0 + tx + j * tpr) * E;
          cp_async_vec(slot(sb, 0, j), x + off, pol);
          cp_async_vec(slot(sb, 1, j), dy + off, pol);
        }
      }
//@refill_p1 end
    }
    int got = 0;
//@dw_update legacy
#if BWD_XCHG_ASYNC
    if constexpr (C > 1) {
#if BWD_SCHED_DYNAMIC
      row_reduce_async<C>(s, tpr, it, xch, xbar, dyn ? xg : nullptr, nxt, &got);
#else
      row_reduce_async<C>(s, tpr, it, xch, xbar);
#endif
    } else
#endif
    {
#if BWD_SCHED_DYNAMIC
      row_reduce<C>(s, tpr, par, red, xch, dyn ? xg : nullptr, nxt, &got);
#else
      row_reduce<C>(s, tpr, par, red, xch);
#endif
    }
//@dw_update new
#if BWD_DW_SHADOW
    // dw += dy * xhat from the loaded rstd (pass 2's arithmetic, bit for bit), x and dy read as
    // pass 2 reads them, while the row sums are in flight
    auto dw_shadow = [&]() {
      const float rr = rq[0];
      BWD_VLOOP
      for (int j = 0; j < K; ++j) {
//@pass2_data legacy
        BWD_FETCH(j)
//@pass2_data new
        BWD_HELD(j)
//@pass2_data end
#if BWD_DW_SMEM
        float av[E];
        const bool upd = live && BWD_OWN(j);
        if (upd) acc_load(av, j);
#define BWD_ACC(i) av[i]
#else
#define BWD_ACC(i) acc[j][i]
#endif
#pragma unroll
        for (int q = 0; q < BWD_NW; ++q) {
          float xf[EPW], df[EPW];
          Tr<T>::unpack(xv[q], xf);
          Tr<T>::unpack(dv[q], df);
#pragma unroll
          for (int e = 0; e < EPW; ++e) BWD_ACC(q * EPW + e) = fmaf(df[e], xf[e] * rr, BWD_ACC(q * EPW + e));
        }
#undef BWD_ACC
#if BWD_DW_SMEM
        if (upd) acc_store(av, j);
#endif
      }
    };
#endif
#if BWD_XCHG_ASYNC
    if constexpr (C > 1) {
#if BWD_SCHED_DYNAMIC
      row_send_async<C>(s, tpr, it, xch, xbar, dyn ? xg : nullptr, nxt);
#else
      row_send_async<C>(s, tpr, it, xch, xbar);
#endif
#if BWD_DW_SHADOW
      dw_shadow();
#endif
#if BWD_SCHED_DYNAMIC
      row_finish_async<C>(s, tpr, it, xch, xbar, dyn ? xg : nullptr, &got);
#else
      row_finish_async<C>(s, tpr, it, xch, xbar);
#endif
    } else
#endif
    {
#if BWD_DW_SHADOW
      dw_shadow();
#endif
#if BWD_SCHED_DYNAMIC
      row_reduce<C>(s, tpr, par, red, xch, dyn ? xg : nullptr, nxt, &got);
#else
      row_reduce<C>(s, tpr, par, red, xch);
#endif
    }
//@dw_update end
#if BWD_RECOMPUTE
    const float r = rsqrtf(fmaf(s[1], inv_n, eps));
#else
//@rstd_stage legacy
    const float r = rq[0];
//@rstd_stage new
    // (v13) from this thread's slot (landed with the group's data); 0 for a row past M (never written)
    const float r = live ? ld_shared_f32(rslot(sb)) : 0.f;
//@rstd_stage end
#endif
    const float c = r * s[0] * inv_n;
//@refill new
    // (v14) the next group (the queue's `last` below: static, nk further; dynamic, the broadcast one), whose
    // copies pass 2 issues into this group's slots as it reads them
//@refill_p1 legacy
    int nxg = gq[0] + nk;
#if BWD_SCHED_DYNAMIC
    if (dyn) nxg = C == 1 ? nk * S + got : got;
#endif
//@refill_p1 new
    const int nxg = gn;                          // (v15) known a visit early
//@refill_p1 end
    const int nrow = nxg * R + ty;
//@refill end
    // pass 2: dx, and dw += dy * xhat
    BWD_VLOOP
    for (int j = 0; j < K; ++j) {
#if BWD_WEIGHT_REGS
      const float* wj = wr[j];
#else
      float wj[E];
      if (BWD_OWN(j)) ld_f32<E>(wj, w + (size_t)(v0 + tx + j * tpr) * E);
      else
#pragma unroll
        for (int e = 0; e < E; ++e) wj[e] = 0.f;
#endif
//@pass2_data legacy
      BWD_FETCH(j)
//@pass2_data new
      BWD_HELD(j)
//@pass2_data end
      uint32_t o[BWD_NW];
//@dw_update new
#if BWD_DW_SHADOW
#pragma unroll
      for (int q = 0; q < BWD_NW; ++q) {
        float xf[EPW], df[EPW], gf[EPW];
        Tr<T>::unpack(xv[q], xf);
        Tr<T>::unpack(dv[q], df);
#pragma unroll
        for (int e = 0; e < EPW; ++e) {
          const float xh = xf[e] * r;
          gf[e] = r * fmaf(-xh, c, wj[q * EPW + e] * df[e]);
        }
        o[q] = Tr<T>::pack(gf);
      }
#else
//@dw_update end
#if BWD_DW_SMEM
      float av[E];
      const bool upd = live && BWD_OWN(j);
      if (upd) acc_load(av, j);
#define BWD_ACC(i) av[i]
#else
#define BWD_ACC(i) acc[j][i]
#endif
#pragma unroll
      for (int q = 0; q < BWD_NW; ++q) {
        float xf[EPW], df[EPW], gf[EPW];
        Tr<T>::unpack(xv[q], xf);
        Tr<T>::unpack(dv[q], df);
#pragma unroll
        for (int e = 0; e < EPW; ++e) {
          const float xh = xf[e] * r;
          gf[e] = r * fmaf(-xh, c, wj[q * EPW + e] * df[e]);
          BWD_ACC(q * EPW + e) = fmaf(df[e], xh, BWD_ACC(q * EPW + e));
        }
        o[q] = Tr<T>::pack(gf);
      }
#undef BWD_ACC
#if BWD_DW_SMEM
      if (upd) acc_store(av, j);
#endif
//@dw_update new
#endif
//@dw_update end
      if (live && BWD_OWN(j)) st_vec(dx + (size_t)row * (size_t)N + (size_t)(v0 + tx + j * tpr) * E, o, pol);
//@refill new
      // (v14) the slots of vector j are read and their words used (the store above took them): the next group's
      // copies into them, issued after in program order (each thread copies into and reads only its own slots)
//@refill_p1 legacy
      if (nrow < M && BWD_OWN(j)) {
//@refill_p1 new
      if (!rf1 && nrow < M && BWD_OWN(j)) {        // (v15) the exact entries copied in pass 1
//@refill_p1 end
        const size_t off = (size_t)nrow * (size_t)N + (size_t)(v0 + tx + j * tpr) * E;
        cp_async_vec(slot(sb, 0, j), x + off, pol);
        cp_async_vec(slot(sb, 1, j), dy + off, pol);
      }
//@refill end
    }
//@refill new
#if !BWD_RECOMPUTE
//@rstd_stage legacy
    rq[0] = nrow < M ? ld_rstd(rstd + nrow) : 0.f;
//@rstd_stage new
    if (nrow < M) cp_async_f32(rslot(sb), rstd + nrow);   // (read before pass 2: the slot is free)
//@rstd_stage end
#endif
    cp_async_commit();                           // (v14) one commit group a visit (empty past the end)
//@refill end
#if BWD_STAGES == 2 && !BWD_STAGING && !BWD_L2
#pragma unroll
    for (int j = 0; j < K; ++j)
#pragma unroll
      for (int q = 0; q < BWD_NW; ++q) { xa[j][q] = xb[j][q]; da[j][q] = db[j][q]; }
#endif
    // the queue moves on: a new last group (static: nk further; dynamic: the broadcast one)
//@refill legacy
    int last = gq[S - 1] + nk;
#if BWD_SCHED_DYNAMIC
//@short_schedule legacy
    if (dyn) last = got;
//@short_schedule new
    if (dyn) last = C == 1 ? nk * S + got : got;   // (v12) unclustered: counter values follow the static S
//@short_schedule end
#endif
//@refill new
    const int last = nxg;                        // (v14) found before pass 2, whose copies went to it
//@refill_p1 new
    gn += nk;                                    // (v15) the group after it: static, nk further; dynamic,
#if BWD_SCHED_DYNAMIC
    if (dyn) gn = got;                           // this visit's fetch
#endif
//@refill_p1 end
//@refill end
    (void)got;
#pragma unroll
    for (int q = 0; q + 1 < S; ++q) { gq[q] = gq[q + 1]; rq[q] = rq[q + 1]; }
    gq[S - 1] = last;
#if BWD_STAGING
    sb = sb + 1 == S ? 0 : sb + 1;
#endif
    par ^= 1;
#if BWD_XCHG_ASYNC
    ++it;
#endif
  }
#undef BWD_FETCH
//@pass2_data new
#undef BWD_HELD
//@pass2_data end
#undef BWD_CTR

  // the CTA's dw row: rows of the CTA combined through shared memory (R > 1), one chunk at a time
//@launch_overlap new
#if BWD_DW_ATOMIC
  pdl_wait();                                    // (v11) dw has been zeroed by the kernel before
#endif
//@launch_overlap end
#if !BWD_DW_ATOMIC
  float* prow = dw_part + (size_t)k0 * (size_t)N;
#endif
#if BWD_DW_SMEM
  if (R == 1) {
#pragma unroll
    for (int j = 0; j < K; ++j) {
      if (!own[j]) continue;
      const int col = (v0 + tx + j * tpr) * E;
      float a[E];
      acc_load(a, j);
#if BWD_DW_ATOMIC
#pragma unroll
      for (int e = 0; e < E; ++e) red_add(dw + col + e, a[e]);
#else
      st_f32<E>(prow + col, a);
#endif
    }
  } else {
    // every row's slots of vector j summed by column (the slots are read across threads now)
    __syncthreads();
    const int lin = ty * tpr + tx, nt = tpr * R, span = tpr * E;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      for (int i = lin; i < span; i += nt) {
        const int t = i / E, e = i - t * E;
        if (v0 + t + j * tpr >= v1) continue;
        float sum = 0.f;
        for (int y = 0; y < R; ++y) sum += accs[((size_t)((y * K + j) * AH + e / AW) * tpr + t) * AW + e % AW];
        const int col = (v0 + j * tpr) * E + i;
#if BWD_DW_ATOMIC
        red_add(dw + col, sum);
#else
        prow[col] = sum;
#endif
      }
    }
  }
#else
  if (R == 1) {
#pragma unroll
    for (int j = 0; j < K; ++j) {
      if (!own[j]) continue;
      const int col = (v0 + tx + j * tpr) * E;
#if BWD_DW_ATOMIC
#pragma unroll
      for (int e = 0; e < E; ++e) red_add(dw + col + e, acc[j][e]);
#else
      st_f32<E>(prow + col, acc[j]);
#endif
    }
  } else {
    const int lin = ty * tpr + tx, nt = tpr * R, span = tpr * E;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      __syncthreads();
#pragma unroll
      for (int e = 0; e < E; ++e) comb[ty * span + tx * E + e] = acc[j][e];
      __syncthreads();
      for (int i = lin; i < span; i += nt) {
        const int v = v0 + i / E + j * tpr;
        if (v >= v1) continue;
        float sum = 0.f;
        for (int y = 0; y < R; ++y) sum += comb[y * span + i];
        const int col = (v0 + j * tpr) * E + i;
#if BWD_DW_ATOMIC
        red_add(dw + col, sum);
#else
        prow[col] = sum;
#endif
      }
    }
  }
#endif
  if constexpr (C > 1) cluster_sync();    // no CTA leaves while its cluster may still write its slots
}

#if BWD_MAXRREG > 0
#define BWD_BOUNDS __maxnreg__(BWD_MAXRREG)
#else
#define BWD_BOUNDS __launch_bounds__(BWD_CTA_THREADS, BWD_MIN_BLOCKS)
#endif

#define BWD_ENTRY(NAME, T, C, ATTR)                                                                    \
  extern "C" __global__ void BWD_BOUNDS ATTR NAME(const T* __restrict__ x, const float* __restrict__ w,  \
                                                 const T* __restrict__ dy, const float* __restrict__ rstd, \
                                                 T* __restrict__ dx, float* __restrict__ dw,           \
                                                 float* __restrict__ dw_part, int M, int N, float eps) { \
    bwd_main<T, C>(x, w, dy, rstd, dx, dw, dw_part, M, N, eps);                                        \
  }
//@specialize new
// space v10: an exact entry, XT threads per row and XR rows per CTA fixed at compile time (see bwd_main)
#define BWD_ENTRY_X(NAME, T, C, ATTR, XT, XR)                                                          \
  extern "C" __global__ void BWD_BOUNDS ATTR NAME(const T* __restrict__ x, const float* __restrict__ w,  \
                                                 const T* __restrict__ dy, const float* __restrict__ rstd, \
                                                 T* __restrict__ dx, float* __restrict__ dw,           \
                                                 float* __restrict__ dw_part, int M, int N, float eps) { \
    bwd_main<T, C, XT, XR>(x, w, dy, rstd, dx, dw, dw_part, M, N, eps);                                \
  }
//@exact_width new
// space v11 (specialize = exact_width): an exact entry with the row width XN compiled in as well (the shape fixes it),
// so row strides, 1/N and the dw row offsets fold into immediates; a launch with another N traps
#define BWD_ENTRY_XN(NAME, T, C, ATTR, XT, XR, XN)                                                     \
  extern "C" __global__ void BWD_BOUNDS ATTR NAME(const T* __restrict__ x, const float* __restrict__ w,  \
                                                 const T* __restrict__ dy, const float* __restrict__ rstd, \
                                                 T* __restrict__ dx, float* __restrict__ dw,           \
                                                 float* __restrict__ dw_part, int M, int N, float eps) { \
    if (N != XN) __trap();                                                                             \
    bwd_main<T, C, XT, XR>(x, w, dy, rstd, dx, dw, dw_part, M, XN, eps);                               \
  }
//@exact_width end
//@specialize end

// ---------------------------------------------------------------------------------------------
// dw = column sums of dw_part[0 .. parts, :]. block = (BX, BY): BX threads of float4 columns, BY
// threads splitting the partial rows (each with two accumulators), summed through shared memory.
extern "C" __global__ void __launch_bounds__(1024) bwd_dw_reduce(const float* __restrict__ dw_part,
                                                                 float* __restrict__ dw, int parts, int N) {
  __shared__ float4 sm[1024];
//@launch_overlap new
  // (v11) every partial row is written and visible once this returns; they are read with ld.global.cg
  // (L2 only), not the non-coherent .nc path, since the main kernel wrote them during this kernel's lifetime
  pdl_wait();
//@launch_overlap end
  const int tx = threadIdx.x, ty = threadIdx.y, BX = blockDim.x, BY = blockDim.y;
  const int c4 = blockIdx.x * BX + tx;
  const bool ok = c4 * 4 < N;
  float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
  if (ok) {
    const float* p = dw_part + (size_t)c4 * 4;
    int r = ty;
    for (; r + BY < parts; r += 2 * BY) {
      float4 u, v;
//@launch_overlap legacy
      asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0,%1,%2,%3}, [%4];"
//@launch_overlap new
      asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];"   /* (v11) L2: written while this ran */
//@launch_overlap end
                   : "=f"(u.x), "=f"(u.y), "=f"(u.z), "=f"(u.w) : "l"(p + (size_t)r * N));
//@launch_overlap legacy
      asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0,%1,%2,%3}, [%4];"
//@launch_overlap new
      asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];"   /* (v11) L2: written while this ran */
//@launch_overlap end
                   : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p + (size_t)(r + BY) * N));
      a.x += u.x; a.y += u.y; a.z += u.z; a.w += u.w;
      b.x += v.x; b.y += v.y; b.z += v.z; b.w += v.w;
    }
    if (r < parts) {
      float4 u;
//@launch_overlap legacy
      asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0,%1,%2,%3}, [%4];"
//@launch_overlap new
      asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];"   /* (v11) L2: written while this ran */
//@launch_overlap end
                   : "=f"(u.x), "=f"(u.y), "=f"(u.z), "=f"(u.w) : "l"(p + (size_t)r * N));
      a.x += u.x; a.y += u.y; a.z += u.z; a.w += u.w;
    }
  }
  a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w;
  sm[ty * BX + tx] = a;
  __syncthreads();
  for (int h = BY >> 1; h > 0; h >>= 1) {
    if (ty < h) {
      float4 o = sm[(ty + h) * BX + tx], s = sm[ty * BX + tx];
      s.x += o.x; s.y += o.y; s.z += o.z; s.w += o.w;
      sm[ty * BX + tx] = s;
    }
    __syncthreads();
  }
  if (ty == 0 && ok) {
    const float4 s = sm[tx];
    asm volatile("st.global.v4.f32 [%0], {%1,%2,%3,%4};" :: "l"(dw + (size_t)c4 * 4), "f"(s.x), "f"(s.y), "f"(s.z),
                 "f"(s.w) : "memory");
  }
}

// dw = 0 before the atomic variant's main kernel (outputs are poisoned before every launch sequence)
extern "C" __global__ void __launch_bounds__(256) bwd_dw_zero(float* __restrict__ dw, int N) {
//@launch_overlap new
  pdl_trigger();                                 // (v11) the main kernel may be scheduled now
//@launch_overlap end
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) dw[i] = 0.f;
}

#if BWD_SCHED_DYNAMIC
// before the main kernel of a dynamically scheduled clustered launch: the row-group counter (the
// int in dw_part[parts * N], past the partial rows) = 0, and dw[0 .. n_dw) = 0 (the atomic
// variant's zeroing, n_dw = 0 otherwise). Workspace and outputs are poisoned before every launch.
extern "C" __global__ void __launch_bounds__(256) bwd_sched_init(float* __restrict__ dw, int n_dw,
                                                                 float* __restrict__ dw_part, int parts, int N) {
//@launch_overlap new
  pdl_trigger();                                 // (v11) the main kernel may be scheduled now
//@launch_overlap end
  const int i0 = blockIdx.x * blockDim.x + threadIdx.x;
  if (i0 == 0) *reinterpret_cast<int*>(dw_part + (size_t)parts * (size_t)N) = 0;
  for (int i = i0; i < n_dw; i += gridDim.x * blockDim.x) dw[i] = 0.f;
}
#endif
