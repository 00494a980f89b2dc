// Kimi Delta Attention forward, first template (sm_90a): one CTA per (head, sequence), chunks of
// 16 tokens, the state in fp32 registers. Rendered by kernels/kda/family.py: a block of #defines,
// this text, then one extern "C" entry per state dtype (kda_fwd_fp32, kda_fwd_bf16).
//
// Per head, state S [K, V] (K = V = 128). Within a chunk of C = 16 tokens starting from state S0,
// with G_i = g_1 + .. + g_i (log-space decays, cumulative from the chunk's start, fp32):
//   A[i][j]   = sum_d k_i[d] k_j[d] e^(G_i - G_j)[d]           j < i     (as kp km^T, midpoint m)
//   T         = (I + diag(beta) A)^-1 diag(beta)                          (forward substitution)
//   u = T V,  w = T (e^G * K),  U = u - w S0                              (the chunk's writes)
//   o         = (scale e^G * Q) S0 + Aqk U,   Aqk[i][j] = scale q_i . (e^(G_i - G_j) k_j), j <= i
//   S_next    = e^(G_C) * S0 + (e^(G_C - G) * K)^T U
// (kernels/kda/reference.py, `chunked`, is the float64 specification.) The pair decays are split
// around the chunk's middle row m as e^(G_i - G_m) e^(G_m - G_j), so no factor exceeds
// e^(8 |g|max): fine for |g| up to ~10 per token (the lower-bound gate gives |g| <= 5).
//
// Warp w (8 warps) owns the rows v in [16w, 16w + 16) of S^T [V, K] as m16n8 fp32 accumulator
// tiles (16 n-tiles over K: 64 registers). Every product of the recurrence is then an
// mma.sync.m16n8k16 (bf16 in, fp32 accumulate) whose A operand is in that warp's registers
// (S^T converted to bf16 pairs, or U^T) and whose B operand comes from shared memory through
// ldmatrix: U^T = u^T - S^T w^T, o^T = S^T (e^G Q)^T + U^T Aqk^T, S^T <- e^(G_C) S^T + U^T kr.
// The chunk's own work (gate, L2 norms, decayed operands, A, Aqk, T, w) is done by the CTA in
// shared memory first; q, k, v, g of the next chunk are prefetched with cp.async meanwhile.
//
// Precision (#defines, 0 or 1; kernels/kda/kernel_model.py models each): a product whose operand
// is "split" multiplies its hi and lo bf16 halves (x = hi + lo to ~2^-17), two or three mma.sync
// instead of one. KDA_SPLIT_S: the state S^T (A operand of U^T and o^T); KDA_SPLIT_U: U^T (A
// operand of o^T += U^T Aqk^T and of the state update); KDA_SPLIT_W: w and qd (B operands against
// the state); KDA_SPLIT_INTRA: kp, km, qp (so A and Aqk), Aqk and T.
//
// flags: bit 0 beta is a logit (sigmoid in the kernel), bit 1 L2-normalise q and k, bit 2 state
// layout [K, V] (else [V, K]). A_log != NULL: g is the raw bf16 gate input and the gate is
// lower_bound * sigmoid(exp(A_log[h]) * (g + dt_bias[h])); A_log == NULL: g is the fp32 log decay.
// initial_state == NULL: S0 = 0; final_state == NULL: not written.
//
// Kernels (gene `kernels`, v3): fused (KDA_ENTRY: kda_fwd_<state>, all of the above in one CTA per
// (head, sequence)) or split (KDA_PREP_ENTRY + KDA_REC_ENTRY: kda_prep does P2-P7 of every
// (chunk, head) at once into a workspace, kda_rec_<state> only P8 per chunk: see "the split pair").
//
// Prep (KDA_PREP_LEAN, 0, 1, 2 or 3; gene prep, v5 and v8): kda_prep as in v3 (0), or lean (1): w shares
// kp/km's shared memory (dead once A and Aqk are made), so the all-bf16 tiles fit 4 CTAs per SM
// (KDA_PREP_MIN_BLOCKS, family.prep_min_blocks); every global load of the CTA (q, k, g, beta,
// dt_bias, A_log) is issued before any is waited for; the slot's sequence comes from one parallel
// pass over cu_seqlens (kda_slot_owner) instead of log2 N dependent reads; the gate (P2) and the
// decayed operands (P4) two channels a thread (kda_chunk_prep<.., LEAN>). Or compact (2, one tile
// each of qd, kp, km): lean, and qd, kd, kr written over the raw q, k, g: 5 CTAs per SM. Or tight
// (3, v8): compact with G (fp32) written over the raw g instead of kr (a barrier between P2's
// reads of g and its writes of G: the raw gate's bf16 and G's fp32 elements sit at different
// offsets), kr in its own tile and dt_bias read from global into registers (no shared copy):
// 37,648 B, 6 CTAs per SM at 40 registers. Same arithmetic in all four.
//
// Rec occupancy (KDA_REC_MIN_BLOCKS, gene rec_min_blocks, v9): kda_rec's __launch_bounds__ minimum
// CTAs per SM. 1 leaves ptxas its registers (140-159: one 8-warp CTA an SM at rec_v_split 1, three
// 4-warp ones at 2); 2 at rec_v_split 1 and 4 at 2 cap it at 128 (no spills for the one-tile
// kernels, nvcc 13.0), so 2 / 4 CTAs share an SM: a chunk's fixed latency (SPLIT_FIT's a) paid for
// more chains at once. Same code, same arithmetic: outputs equal the twin's bit for bit.
//
//@ Regions (fitness/template_regions.py; kernels/kda/family.py `template_text`): code of a gene value
//@ added after v9 sits between `//@<region> new` and `//@<region> end` marker lines, rendered only for
//@ the genomes that hold it, so every earlier genome's source (its compile key, the recorded runs, the
//@ exported package) stays byte for byte what v9 rendered. Lines starting `//@ ` are never rendered.
//@ prep_tail (v10, gene prep_overlap = tail): the ordinary kda_prep executes
//@ griddepcontrol.launch_dependents first and kda_rec, launched with Launch.overlap, executes
//@ griddepcontrol.wait after its workspace-free prologue (see the block before kda_prep_body).
//@ prep_solve (v11, gene prep_solve = columns): P6's forward substitution in column order (once
//@ x[l] is final it is taken out of every later row's sum; each row's sum keeps its order, so the
//@ same FFMAs on the same values) with every T store after the solve. The legacy rows order stores
//@ row i's T before it loads row i + 1 of L, which ptxas cannot move past the store (it may alias):
//@ one LDS round trip and an i-long dependent FFMA chain per row, 7 warps of 8 waiting at S6.
// Order (KDA_ORDER_LONGEST, 0 or 1): which sequence the CTAs of grid row blockIdx.y run. 0: the
// blockIdx.y-th; 1: the blockIdx.y-th longest (ties: the lower index first), so the longest
// chains start in the first wave (list scheduling, longest first: kernel_model.wave_makespan
// puts mixed/H64 from 5597 to 4152 token-steps per SM, mixed/H96 from 6682 to 6144). Blocks are
// dispatched roughly in linear order (x = head fastest), and one CTA fills an SM (188 registers x
// 256 threads). Above KDA_ORDER_MAX_N sequences the rank search (N^2 / 256 reads of cu_seqlens
// per CTA) costs more than it saves: the launch order is kept.

#include <stdint.h>

#if !defined(KDA_CHUNK) || !defined(KDA_SPLIT_S) || !defined(KDA_SPLIT_U) || !defined(KDA_SPLIT_W) || \
    !defined(KDA_SPLIT_INTRA) || !defined(KDA_SMEM_BYTES) || !defined(KDA_ORDER_LONGEST) ||              \
    !defined(KDA_PREP_SMEM_BYTES) || !defined(KDA_REC_SMEM_BYTES) || !defined(KDA_REC_BYTES_HOST) ||          \
    !defined(KDA_REC_V_SPLIT) || !defined(KDA_PREP_LEAN) || !defined(KDA_PREP_MIN_BLOCKS) ||                 \
    !defined(KDA_REC_WGMMA) || !defined(KDA_PREP_PDL) || !defined(KDA_REC_MAX_BYTES) ||                 \
    !defined(KDA_REC_MIN_BLOCKS)
#error "render the template through kernels/kda/family.py (settings are #defines)"
#endif

#define KDA_D 128                       // K = V
#define KDA_WARPS 8
#define KDA_THREADS (KDA_WARPS * 32)
#define KDA_ROW 136                     // bf16 elements per padded 128-wide smem row (272 B)
#define KDA_ROW16 24                    // bf16 elements per padded 16-wide smem row (48 B)
#define KDA_MID (KDA_CHUNK / 2)         // the chunk row the pair decays are split around
#define KDA_NW (KDA_SPLIT_W ? 2 : 1)     // tiles (hi, lo) of w and qd
#define KDA_NI (KDA_SPLIT_INTRA ? 2 : 1) // tiles (hi, lo) of kp, km, qp, Aqk, T
#define KDA_LOG2E 1.4426950408889634f
#define KDA_ORDER_MAX_N 1024             // more sequences: launch order (see Order above)

static_assert(KDA_CHUNK == 16, "this template is written for chunks of 16 tokens");

typedef unsigned short bf16_bits;

// ---- PTX helpers -------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
// d += a * b, m16n8k16, bf16 inputs, fp32 accumulators (in place)
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {     // lo in bits 0..15
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// hi = bf16 pair of (lo_x, hi_x); lo = bf16 pair of what hi leaves out
__device__ __forceinline__ void split_pack(float x0, float x1, uint32_t& hi, uint32_t& lo) {
    hi = pack_bf16(x0, x1);
    lo = pack_bf16(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));
}
// d += a b with a and/or b split: hi hi (+ hi lo) (+ lo hi); the lo lo term is below fp32's reach
template <bool SA, bool SB>
__device__ __forceinline__ void mma_split(float (&d)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                          uint32_t bh0, uint32_t bh1, uint32_t bl0, uint32_t bl1) {
    mma16816(d, ah, bh0, bh1);
    if (SB) mma16816(d, ah, bl0, bl1);
    if (SA) mma16816(d, al, bh0, bh1);
}
#if KDA_REC_WGMMA
// ---- wgmma (sm_90a; gene rec_mma = wgmma, kda_rec's P8 only) ---------------------------------------
// >>> kda_gmma_desc (tests/test_kda_template.py compiles this function for the host)
// A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the start
// address, 16-29 the leading dimension byte offset, 32-45 the stride dimension byte offset, each
// (x & 0x3FFFF) >> 4; base offset (49-51) 0 and swizzle (62-63) 0: the no-swizzle layout, whose
// core matrices are 8 rows of 16 contiguous bytes (kda_gmma_piece places them).
__device__ __forceinline__ unsigned long long kda_gmma_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (unsigned long long)((saddr & 0x3FFFFu) >> 4) | ((unsigned long long)((lbo & 0x3FFFFu) >> 4) << 16) |
           ((unsigned long long)((sbo & 0x3FFFFu) >> 4) << 32);
}
// The byte offset, within a 16-row tile in kda_rec's shared memory, of the 16-byte piece holding
// stored row r, elements [8 p, 8 p + 8) (the record's rows are 16 x 128 or 16 x 16 bf16): pieces in
// column-major order, so core matrix (row block r / 8, piece column p) is 128 contiguous bytes at
// (2 p + r / 8) x 128. As B of a wgmma that tile is K-major when its rows are N (w, qd, T, Aqk:
// LBO 256 between K neighbours, SBO 128 between 8-row N blocks) and MN-major when its rows are K
// (kr: LBO 128 between K blocks, SBO 256 between N neighbours); kernel_model.gmma_canonical_offset
// is the PTX canonical layout these strides are checked against.
__device__ __forceinline__ int kda_gmma_piece(int r, int p) { return 16 * (16 * p + r); }
// the descriptor of start address + `bytes` from one of start address: the start field is addr >> 4
// of a shared-memory address below 2^18 (228 KB on sm_90), so the add never carries out of it
__device__ __forceinline__ unsigned long long kda_gmma_desc_at(unsigned long long desc, int bytes) {
    return desc + (unsigned long long)(bytes >> 4);
}
#define KDA_GMMA_K_LBO 256     // K-major tiles (rows are N): K neighbours' core matrices (pieces p, p + 1)
#define KDA_GMMA_K_SBO 128     // ... and the next 8 rows (N)
#define KDA_GMMA_MN_LBO 128    // MN-major kr (rows are K): the next 8 rows (K)
#define KDA_GMMA_MN_SBO 256    // ... and the next 8 columns (N)
#define KDA_GMMA_K16_STEP 512  // start of k16 step kk of a K-major 16 x 128 tile: kk x 2 piece columns
// <<< kda_gmma_desc
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
// keeps the compiler from moving accesses of an accumulator across the asynchronous wgmma
__device__ __forceinline__ void wgmma_hold(float& x) { asm volatile("" : "+f"(x) :: "memory"); }
// d (m64n16, fp32: this thread's 8 as mma.sync's two m16n8 C tiles) = (ACC ? d : 0) + a b, a
// (m64k16 bf16, this warp's 16 rows as mma.sync's A fragment) from registers, b (k16n16) K-major
template <bool ACC>
__device__ __forceinline__ void wgmma_n16(float (&d)[2][4], const uint32_t (&a)[4], unsigned long long desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
                   "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(int(ACC)));
}
// S (m64n128, fp32: S[j][e] is mma.sync's C tile j) += a b, b (k16n128) MN-major (imm-trans-b 1)
__device__ __forceinline__ void wgmma_n128_tb(float (&S)[16][4], const uint32_t (&a)[4], unsigned long long desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
                 : "+f"(S[0][0]), "+f"(S[0][1]), "+f"(S[0][2]), "+f"(S[0][3]), "+f"(S[1][0]), "+f"(S[1][1]),
                   "+f"(S[1][2]), "+f"(S[1][3]), "+f"(S[2][0]), "+f"(S[2][1]), "+f"(S[2][2]), "+f"(S[2][3]),
                   "+f"(S[3][0]), "+f"(S[3][1]), "+f"(S[3][2]), "+f"(S[3][3]), "+f"(S[4][0]), "+f"(S[4][1]),
                   "+f"(S[4][2]), "+f"(S[4][3]), "+f"(S[5][0]), "+f"(S[5][1]), "+f"(S[5][2]), "+f"(S[5][3]),
                   "+f"(S[6][0]), "+f"(S[6][1]), "+f"(S[6][2]), "+f"(S[6][3]), "+f"(S[7][0]), "+f"(S[7][1]),
                   "+f"(S[7][2]), "+f"(S[7][3]), "+f"(S[8][0]), "+f"(S[8][1]), "+f"(S[8][2]), "+f"(S[8][3]),
                   "+f"(S[9][0]), "+f"(S[9][1]), "+f"(S[9][2]), "+f"(S[9][3]), "+f"(S[10][0]), "+f"(S[10][1]),
                   "+f"(S[10][2]), "+f"(S[10][3]), "+f"(S[11][0]), "+f"(S[11][1]), "+f"(S[11][2]), "+f"(S[11][3]),
                   "+f"(S[12][0]), "+f"(S[12][1]), "+f"(S[12][2]), "+f"(S[12][3]), "+f"(S[13][0]), "+f"(S[13][1]),
                   "+f"(S[13][2]), "+f"(S[13][3]), "+f"(S[14][0]), "+f"(S[14][1]), "+f"(S[14][2]), "+f"(S[14][3]),
                   "+f"(S[15][0]), "+f"(S[15][1]), "+f"(S[15][2]), "+f"(S[15][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}
#endif
__device__ __forceinline__ bf16_bits to_bf16(float x) {
    bf16_bits r;
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float from_bf16(bf16_bits b) { return __uint_as_float(((uint32_t)b) << 16); }
__device__ __forceinline__ float ex2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + ex2(-x * KDA_LOG2E)); }

// state element conversions (fp32 or bf16 storage)
__device__ __forceinline__ float load_state(const float* p) { return *p; }
__device__ __forceinline__ float load_state(const bf16_bits* p) { return from_bf16(*p); }
__device__ __forceinline__ void store_state(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_state(bf16_bits* p, float x) { *p = to_bf16(x); }

// ---- shared memory -----------------------------------------------------------------------------
struct KdaStage {                        // one chunk's raw inputs (cp.async targets)
    bf16_bits q[KDA_CHUNK][KDA_ROW];
    bf16_bits k[KDA_CHUNK][KDA_ROW];
    bf16_bits v[KDA_CHUNK][KDA_ROW];
    float g[KDA_CHUNK][KDA_D];           // raw bf16 gate (first half of each row) or fp32 log decay
};
struct KdaSmem {
    KdaStage stage[2];
    float G[KDA_CHUNK][KDA_D];                  // log2-space decays, then their cumulative sums
    bf16_bits qd[KDA_NW][KDA_CHUNK][KDA_ROW];   // scale q e^G
    bf16_bits kd[KDA_CHUNK][KDA_ROW];           // k e^G
    bf16_bits qp[KDA_NI][KDA_CHUNK][KDA_ROW];   // scale q e^(G - G_m)
    bf16_bits kp[KDA_NI][KDA_CHUNK][KDA_ROW];   // k e^(G - G_m)
    bf16_bits km[KDA_NI][KDA_CHUNK][KDA_ROW];   // k e^(G_m - G)
    bf16_bits kr[KDA_CHUNK][KDA_ROW];           // k e^(G_C - G)
    bf16_bits w[KDA_NW][KDA_CHUNK][KDA_ROW];    // T kd
    bf16_bits o[KDA_CHUNK][KDA_ROW];            // output staging
    float L[KDA_CHUNK][KDA_CHUNK + 1];          // diag(beta) A, strictly lower
    bf16_bits T[KDA_NI][KDA_CHUNK][KDA_ROW16];  // (I + diag(beta) A)^-1 diag(beta)
    bf16_bits Aqk[KDA_NI][KDA_CHUNK][KDA_ROW16];// scale q_i . e^(G_i - G_j) k_j, j <= i
    float decay[KDA_D];                         // e^(G_C) per channel
    float dt_bias[KDA_D];
    float rq[KDA_CHUNK], rk[KDA_CHUNK], beta[KDA_CHUNK];
};
static_assert(sizeof(KdaSmem) == KDA_SMEM_BYTES, "kernels/kda/family.py's shared-memory size disagrees");

// x as bf16 hi (and lo when split) at p[0] (p[1]): p points to tiles [hi, lo]
template <bool SPLIT, int R>
__device__ __forceinline__ void store_split(bf16_bits (*p)[KDA_CHUNK][R], int r, int c, float x) {
    const bf16_bits hi = to_bf16(x);
    p[0][r][c] = hi;
    if (SPLIT) p[1][r][c] = to_bf16(x - from_bf16(hi));
}

// x0, x1 (adjacent columns c, c + 1; c even) as a bf16 pair, hi (and lo when split) as store_split
template <bool SPLIT, int R>
__device__ __forceinline__ void store_split2(bf16_bits (*p)[KDA_CHUNK][R], int r, int c, float x0, float x1) {
    uint32_t hi, lo;
    if (SPLIT) split_pack(x0, x1, hi, lo);
    else hi = pack_bf16(x0, x1);
    *reinterpret_cast<uint32_t*>(&p[0][r][c]) = hi;
    if (SPLIT) *reinterpret_cast<uint32_t*>(&p[1][r][c]) = lo;
}

// ---- which sequence a CTA runs ------------------------------------------------------------------
// >>> kda_sequence_of (tests/test_kda_template.py compiles this function for the host)
// The sequence of rank `rank` in the order of KDA_ORDER_LONGEST (see Order above): thread `tid`
// of `nthreads` ranks candidates tid, tid + nthreads, ...; the one of rank `rank` (exactly one:
// ranks are a permutation) writes *slot (shared memory); everyone reads it after the barrier.
__device__ __forceinline__ int kda_sequence_of(const int* __restrict__ cu_seqlens, int N, int rank, int tid,
                                               int nthreads, int* slot) {
    if (!KDA_ORDER_LONGEST || N > KDA_ORDER_MAX_N) return rank;
    for (int i = tid; i < N; i += nthreads) {
        const int li = cu_seqlens[i + 1] - cu_seqlens[i];
        int r = 0;
        for (int j = 0; j < N; ++j) {
            const int lj = cu_seqlens[j + 1] - cu_seqlens[j];
            r += (lj > li || (lj == li && j < i)) ? 1 : 0;
        }
        if (r == rank) *slot = i;
    }
    __syncthreads();
    return *slot;
}
// <<< kda_sequence_of

// ---- one chunk: its own work (P2-P7) and its state-dependent products (P8) --------------------
// The fused kernel runs both in one CTA per (sequence, head); the split pair (gene kernels = split)
// runs kda_chunk_prep in kda_prep, one CTA per (chunk, head), all chunks at once, and only
// kda_chunk_state on the recurrence's chain (kda_rec). Same code, so the same roundings.

// P2-P7 on one chunk's raw inputs `st` (q, k, g) into `sm`'s operands (qd, kd, qp, kp, km, kr, w,
// L, T, Aqk, decay), barriers S2-S7 included: every thread of the CTA calls it.
// LEAN (the lean and compact kda_prep): thread tid < valid passes its token's raw beta as `beta_pre`
// (loaded with the chunk's inputs) instead of reading it here, and the gate (P2) and the decayed
// operands (P4) go two adjacent channels a thread (64-bit G, 32-bit bf16 pairs: cvt.rn.bf16x2,
// half the conversions, loads and stores): the same operations on every element.
// TIGHT (the tight kda_prep, v8; LEAN too): sm.G is st.g's memory, so P2 computes its four pairs
// of G into registers, waits for every thread (the raw bf16 gate of another thread's channels may
// sit where this thread's G goes), then stores them; the gate's dt_bias pair comes in `dtb2`
// (this thread's channels 2 (tid % 64), + 1) instead of from shared memory.
template <class Stage, class Sm, bool LEAN = false, bool TIGHT = false>
__device__ __forceinline__ void kda_chunk_prep(const Stage& st, Sm& sm, const bf16_bits* __restrict__ beta,
                                               int tid, int lane, int warp, int valid, int t0, int h, int H,
                                               bool gate_in_kernel, bool beta_logit, bool l2norm, float eA,
                                               float lb2, float scale, float beta_pre = 0.0f,
                                               float2 dtb2 = make_float2(0.0f, 0.0f)) {
    // P2: row norms of q and k, the gate (log2 units), beta
    {
        const int r0 = 2 * warp;
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            const int r = r0 + rr;
            float sq = 0.0f, sk = 0.0f;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float a = from_bf16(st.q[r][lane * 4 + e]), b = from_bf16(st.k[r][lane * 4 + e]);
                sq += a * a;
                sk += b * b;
            }
#pragma unroll
            for (int m = 16; m > 0; m >>= 1) {
                sq += __shfl_xor_sync(0xffffffffu, sq, m);
                sk += __shfl_xor_sync(0xffffffffu, sk, m);
            }
            if (lane == 0) {
                sm.rq[r] = l2norm ? rsqrtf(sq + 1e-6f) : 1.0f;
                sm.rk[r] = l2norm ? rsqrtf(sk + 1e-6f) : 1.0f;
            }
        }
    }
    if constexpr (TIGHT) {
        constexpr int PAIRS = KDA_CHUNK * KDA_D / (2 * KDA_THREADS);
        static_assert((2 * KDA_THREADS) % KDA_D == 0, "a thread's pairs are the same two channels in every row");
        float2 xs[PAIRS];
#pragma unroll
        for (int i = 0; i < PAIRS; ++i) {
            const int e = 2 * (tid + i * KDA_THREADS), r = e / KDA_D, col = e % KDA_D;   // col = 2 (tid % 64)
            float2 x = make_float2(0.0f, 0.0f);
            if (r < valid) {
                if (gate_in_kernel) {
                    const uint32_t raw = *reinterpret_cast<const uint32_t*>(reinterpret_cast<const bf16_bits*>(&st.g[r][0]) + col);
                    x.x = lb2 * sigmoid(eA * (from_bf16((bf16_bits)(raw & 0xffffu)) + dtb2.x));
                    x.y = lb2 * sigmoid(eA * (from_bf16((bf16_bits)(raw >> 16)) + dtb2.y));
                } else {
                    const float2 gg = *reinterpret_cast<const float2*>(&st.g[r][col]);
                    x.x = gg.x * KDA_LOG2E;
                    x.y = gg.y * KDA_LOG2E;
                }
            }
            xs[i] = x;
        }
        __syncthreads();                                                     // S2a: every raw g read
#pragma unroll
        for (int i = 0; i < PAIRS; ++i) {
            const int e = 2 * (tid + i * KDA_THREADS), r = e / KDA_D, col = e % KDA_D;
            *reinterpret_cast<float2*>(&sm.G[r][col]) = xs[i];
        }
    } else if (LEAN) {
#pragma unroll
        for (int i = 0; i < KDA_CHUNK * KDA_D / (2 * KDA_THREADS); ++i) {
            const int e = 2 * (tid + i * KDA_THREADS), r = e / KDA_D, col = e % KDA_D;   // col even
            float2 x = make_float2(0.0f, 0.0f);
            if (r < valid) {
                if (gate_in_kernel) {
                    const uint32_t raw = *reinterpret_cast<const uint32_t*>(reinterpret_cast<const bf16_bits*>(&st.g[r][0]) + col);
                    const float2 db = *reinterpret_cast<const float2*>(&sm.dt_bias[col]);
                    x.x = lb2 * sigmoid(eA * (from_bf16((bf16_bits)(raw & 0xffffu)) + db.x));
                    x.y = lb2 * sigmoid(eA * (from_bf16((bf16_bits)(raw >> 16)) + db.y));
                } else {
                    const float2 gg = *reinterpret_cast<const float2*>(&st.g[r][col]);
                    x.x = gg.x * KDA_LOG2E;
                    x.y = gg.y * KDA_LOG2E;
                }
            }
            *reinterpret_cast<float2*>(&sm.G[r][col]) = x;
        }
    } else {
#pragma unroll
        for (int i = 0; i < KDA_CHUNK * KDA_D / KDA_THREADS; ++i) {
            const int e = tid + i * KDA_THREADS, r = e / KDA_D, col = e % KDA_D;
            float x = 0.0f;
            if (r < valid) {
                if (gate_in_kernel) {
                    const float raw = from_bf16(reinterpret_cast<const bf16_bits*>(&st.g[r][0])[col]);
                    x = lb2 * sigmoid(eA * (raw + sm.dt_bias[col]));
                } else {
                    x = st.g[r][col] * KDA_LOG2E;
                }
            }
            sm.G[r][col] = x;
        }
    }
    if (tid < KDA_CHUNK) {
        float b = 0.0f;
        if (tid < valid) {
            b = TIGHT ? sm.beta[tid] : LEAN ? beta_pre : from_bf16(beta[(size_t)(t0 + tid) * H + h]);
            if (beta_logit) b = sigmoid(b);
        }
        sm.beta[tid] = b;
    }
    __syncthreads();                                                         // S2

    // P3: cumulative decays per channel, the chunk's total decay
    if (tid < KDA_D) {
        float acc = 0.0f;
#pragma unroll
        for (int r = 0; r < KDA_CHUNK; ++r) {
            acc += sm.G[r][tid];
            sm.G[r][tid] = acc;
        }
        sm.decay[tid] = ex2(acc);
    }
    __syncthreads();                                                         // S3

    // P4: the decayed bf16 operands
    if (LEAN) {
#pragma unroll
        for (int i = 0; i < KDA_CHUNK * KDA_D / (2 * KDA_THREADS); ++i) {
            const int e = 2 * (tid + i * KDA_THREADS), r = e / KDA_D, col = e % KDA_D;   // col even
            const float2 Gc = *reinterpret_cast<const float2*>(&sm.G[r][col]);
            const float2 Gm = *reinterpret_cast<const float2*>(&sm.G[KDA_MID][col]);
            const float2 Gl = *reinterpret_cast<const float2*>(&sm.G[KDA_CHUNK - 1][col]);
            const uint32_t qq = *reinterpret_cast<const uint32_t*>(&st.q[r][col]);
            const uint32_t kq = *reinterpret_cast<const uint32_t*>(&st.k[r][col]);
            const float rq = sm.rq[r], rk = sm.rk[r];
            const float qn0 = from_bf16((bf16_bits)(qq & 0xffffu)) * rq * scale, qn1 = from_bf16((bf16_bits)(qq >> 16)) * rq * scale;
            const float kn0 = from_bf16((bf16_bits)(kq & 0xffffu)) * rk, kn1 = from_bf16((bf16_bits)(kq >> 16)) * rk;
            const float e10 = ex2(Gc.x), e20 = ex2(Gc.x - Gm.x), e30 = ex2(Gm.x - Gc.x), e40 = ex2(Gl.x - Gc.x);
            const float e11 = ex2(Gc.y), e21 = ex2(Gc.y - Gm.y), e31 = ex2(Gm.y - Gc.y), e41 = ex2(Gl.y - Gc.y);
            store_split2<KDA_SPLIT_W>(sm.qd, r, col, qn0 * e10, qn1 * e11);
            *reinterpret_cast<uint32_t*>(&sm.kd[r][col]) = pack_bf16(kn0 * e10, kn1 * e11);
            store_split2<KDA_SPLIT_INTRA>(sm.qp, r, col, qn0 * e20, qn1 * e21);
            store_split2<KDA_SPLIT_INTRA>(sm.kp, r, col, kn0 * e20, kn1 * e21);
            store_split2<KDA_SPLIT_INTRA>(sm.km, r, col, kn0 * e30, kn1 * e31);
            *reinterpret_cast<uint32_t*>(&sm.kr[r][col]) = pack_bf16(kn0 * e40, kn1 * e41);
        }
        __syncthreads();                                                     // S4
    } else {
#pragma unroll
    for (int i = 0; i < KDA_CHUNK * KDA_D / KDA_THREADS; ++i) {
        const int e = tid + i * KDA_THREADS, r = e / KDA_D, col = e % KDA_D;
        const float Gc = sm.G[r][col], Gm = sm.G[KDA_MID][col], Gl = sm.G[KDA_CHUNK - 1][col];
        const float qn = from_bf16(st.q[r][col]) * sm.rq[r] * scale;
        const float kn = from_bf16(st.k[r][col]) * sm.rk[r];
        const float e1 = ex2(Gc), e2 = ex2(Gc - Gm), e3 = ex2(Gm - Gc), e4 = ex2(Gl - Gc);
        store_split<KDA_SPLIT_W>(sm.qd, r, col, qn * e1);
        sm.kd[r][col] = to_bf16(kn * e1);
        store_split<KDA_SPLIT_INTRA>(sm.qp, r, col, qn * e2);
        store_split<KDA_SPLIT_INTRA>(sm.kp, r, col, kn * e2);
        store_split<KDA_SPLIT_INTRA>(sm.km, r, col, kn * e3);
        sm.kr[r][col] = to_bf16(kn * e4);
    }
    __syncthreads();                                                         // S4
    }

    // P5: warp 0: L = diag(beta) (kp km^T) strictly lower; warp 1: Aqk = qp km^T, j <= i
    if (warp < 2) {
        const bf16_bits(*Am)[KDA_CHUNK][KDA_ROW] = warp == 0 ? sm.kp : sm.qp;
        float acc[2][4] = {};
#pragma unroll
        for (int kk = 0; kk < KDA_D / 16; ++kk) {
            uint32_t ah[4], al[4] = {}, bh[4], bl[4] = {};
            const int ar = lane & 15, ac = 16 * kk + (lane >> 4) * 8;
            const int br = (lane >> 4) * 8 + (lane & 7), bc = 16 * kk + ((lane >> 3) & 1) * 8;
            ldsm_x4(ah, &Am[0][ar][ac]);
            ldsm_x4(bh, &sm.km[0][br][bc]);
            if (KDA_SPLIT_INTRA) {
                ldsm_x4(al, &Am[KDA_NI - 1][ar][ac]);
                ldsm_x4(bl, &sm.km[KDA_NI - 1][br][bc]);
            }
            mma_split<KDA_SPLIT_INTRA, KDA_SPLIT_INTRA>(acc[0], ah, al, bh[0], bh[1], bl[0], bl[1]);
            mma_split<KDA_SPLIT_INTRA, KDA_SPLIT_INTRA>(acc[1], ah, al, bh[2], bh[3], bl[2], bl[3]);
        }
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = (lane >> 2) + (e >> 1) * 8, j = 8 * nt + 2 * (lane & 3) + (e & 1);
                if (warp == 0) sm.L[i][j] = j < i ? sm.beta[i] * acc[nt][e] : 0.0f;
                else store_split<KDA_SPLIT_INTRA>(sm.Aqk, i, j, j <= i ? acc[nt][e] : 0.0f);
            }
        }
    }
    __syncthreads();                                                         // S5

//@prep_solve legacy
    // P6: T = (I + L)^-1 diag(beta), column j by lane j (forward substitution in fp32)
    if (warp == 0 && lane < KDA_CHUNK) {
        float x[KDA_CHUNK];
#pragma unroll
        for (int i = 0; i < KDA_CHUNK; ++i) {
            float xi = i == lane ? sm.beta[i] : 0.0f;
#pragma unroll
            for (int l = 0; l < i; ++l) xi -= sm.L[i][l] * x[l];
            x[i] = xi;
            store_split<KDA_SPLIT_INTRA>(sm.T, i, lane, xi);
        }
    }
//@prep_solve new
    // P6 (v11, gene prep_solve = columns): T = (I + L)^-1 diag(beta), column j by lane j, forward
    // substitution in fp32 in column order: once x[l] is final it leaves every later row's sum (row
    // i's sum still runs over l = 0, 1, .., i - 1 in that order: the rows order's FFMAs on the same
    // values, the same roundings), and T is stored only after the solve, so no L load waits behind
    // a T store (ptxas keeps loads after a store they may alias): the chain is the 15 FFMAs from x[0]
    // to x[15] with up to 15 independent ones beside each, not a load round trip and an i-long chain
    // per row.
    if (warp == 0 && lane < KDA_CHUNK) {
        const float bl = sm.beta[lane];
        float x[KDA_CHUNK];
#pragma unroll
        for (int i = 0; i < KDA_CHUNK; ++i) x[i] = i == lane ? bl : 0.0f;
#pragma unroll
        for (int l = 0; l < KDA_CHUNK; ++l) {
#pragma unroll
            for (int i = l + 1; i < KDA_CHUNK; ++i) x[i] -= sm.L[i][l] * x[l];
        }
#pragma unroll
        for (int i = 0; i < KDA_CHUNK; ++i) store_split<KDA_SPLIT_INTRA>(sm.T, i, lane, x[i]);
    }
//@prep_solve end
    __syncthreads();                                                         // S6

    // P7: w = T kd, warp w computes columns [16 w, 16 w + 16)
    {
        uint32_t ah[4], al[4] = {}, b[4];
        float acc[2][4] = {};
        ldsm_x4(ah, &sm.T[0][lane & 15][(lane >> 4) * 8]);
        if (KDA_SPLIT_INTRA) ldsm_x4(al, &sm.T[KDA_NI - 1][lane & 15][(lane >> 4) * 8]);
        ldsm_x4_t(b, &sm.kd[(lane & 7) + ((lane >> 3) & 1) * 8][16 * warp + (lane >> 4) * 8]);
        mma_split<KDA_SPLIT_INTRA, false>(acc[0], ah, al, b[0], b[1], 0u, 0u);
        mma_split<KDA_SPLIT_INTRA, false>(acc[1], ah, al, b[2], b[3], 0u, 0u);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = (lane >> 2) + (e >> 1) * 8, j = 16 * warp + 8 * nt + 2 * (lane & 3) + (e & 1);
                store_split<KDA_SPLIT_W>(sm.w, i, j, acc[nt][e]);
            }
        }
    }
    __syncthreads();                                                         // S7
}

// S^T <- diag(e^(G_C)) S^T: each thread's 16 column pairs of the state scaled by the chunk's decay
// (both P8 paths of kda_rec: their accumulators share one layout)
__device__ __forceinline__ void kda_decay_state(float (&S)[16][4], const float* decay, int kc) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const float d0 = decay[8 * j + kc], d1 = decay[8 * j + kc + 1];
        S[j][0] *= d0;
        S[j][1] *= d1;
        S[j][2] *= d0;
        S[j][3] *= d1;
    }
}

// P8: warp `warp`'s rows of U^T, o^T (staged in `ot`) and the state S^T, from the chunk's v tile `vt`
// and `sm`'s T, w, qd, Aqk, kr, decay (no barrier inside).
// `warp` and `vr` count within the tiles vt and ot (VROW elements a row: the fused kernel's whole V,
// or kda_rec's slice of it); the state's own V rows are the caller's business.
template <int VROW, class Ops>
__device__ __forceinline__ void kda_chunk_state(const bf16_bits (*vt)[VROW], const Ops& sm, bf16_bits (*ot)[VROW],
                                                float (&S)[16][4], int lane, int warp, int vr, int kc) {
    const int br = (lane >> 4) * 8 + (lane & 7), bk = ((lane >> 3) & 1) * 8;   // B from [n][k]
    // u^T = V^T T^T  (A = v^T: ldmatrix.trans of v [j][v]; B = T [c][j])
    float U[2][4] = {};
    {
        uint32_t a[4], bh[4], bl[4] = {};
        ldsm_x4_t(a, &vt[(lane & 7) + (lane >> 4) * 8][16 * warp + ((lane >> 3) & 1) * 8]);
        ldsm_x4(bh, &sm.T[0][br][bk]);
        if (KDA_SPLIT_INTRA) ldsm_x4(bl, &sm.T[KDA_NI - 1][br][bk]);
        mma_split<false, KDA_SPLIT_INTRA>(U[0], a, a, bh[0], bh[1], bl[0], bl[1]);
        mma_split<false, KDA_SPLIT_INTRA>(U[1], a, a, bh[2], bh[3], bl[2], bl[3]);
    }
    // U^T = u^T - S^T w^T  and  o^T = S^T qd^T  (A = S^T in bf16, B = w, qd [c][k])
    float WS[2][4] = {}, O[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < KDA_D / 16; ++kk) {
        uint32_t ah[4], al[4] = {}, bw[4], bwl[4] = {}, bq[4], bql[4] = {};
#pragma unroll
        for (int r = 0; r < 4; ++r) {        // a[r]: tile 2 kk + r / 2, registers 2 (r % 2) ..
            const float* x = &S[2 * kk + (r >> 1)][2 * (r & 1)];
            if (KDA_SPLIT_S) split_pack(x[0], x[1], ah[r], al[r]);
            else ah[r] = pack_bf16(x[0], x[1]);
        }
        ldsm_x4(bw, &sm.w[0][br][16 * kk + bk]);
        ldsm_x4(bq, &sm.qd[0][br][16 * kk + bk]);
        if (KDA_SPLIT_W) {
            ldsm_x4(bwl, &sm.w[KDA_NW - 1][br][16 * kk + bk]);
            ldsm_x4(bql, &sm.qd[KDA_NW - 1][br][16 * kk + bk]);
        }
        mma_split<KDA_SPLIT_S, KDA_SPLIT_W>(WS[0], ah, al, bw[0], bw[1], bwl[0], bwl[1]);
        mma_split<KDA_SPLIT_S, KDA_SPLIT_W>(WS[1], ah, al, bw[2], bw[3], bwl[2], bwl[3]);
        mma_split<KDA_SPLIT_S, KDA_SPLIT_W>(O[0], ah, al, bq[0], bq[1], bql[0], bql[1]);
        mma_split<KDA_SPLIT_S, KDA_SPLIT_W>(O[1], ah, al, bq[2], bq[3], bql[2], bql[3]);
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) U[nt][e] -= WS[nt][e];
    uint32_t uh[4], ul[4] = {};                           // U^T [v][c] as an A operand (k = c)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const float* x = &U[r >> 1][2 * (r & 1)];
        if (KDA_SPLIT_U) split_pack(x[0], x[1], uh[r], ul[r]);
        else uh[r] = pack_bf16(x[0], x[1]);
    }
    {                                                // o^T += U^T Aqk^T
        uint32_t bh[4], bl[4] = {};
        ldsm_x4(bh, &sm.Aqk[0][br][bk]);
        if (KDA_SPLIT_INTRA) ldsm_x4(bl, &sm.Aqk[KDA_NI - 1][br][bk]);
        mma_split<KDA_SPLIT_U, KDA_SPLIT_INTRA>(O[0], uh, ul, bh[0], bh[1], bl[0], bl[1]);
        mma_split<KDA_SPLIT_U, KDA_SPLIT_INTRA>(O[1], uh, ul, bh[2], bh[3], bl[2], bl[3]);
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int vv = vr + (e >> 1) * 8, cc = 8 * nt + kc + (e & 1);
            ot[cc][vv] = to_bf16(O[nt][e]);
        }
    }
    // S^T <- e^(G_C) S^T + U^T kr   (B = kr [c][k]: ldmatrix.trans)
    kda_decay_state(S, sm.decay, kc);
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
        uint32_t b[4];
        ldsm_x4_t(b, &sm.kr[(lane & 7) + ((lane >> 3) & 1) * 8][16 * jj + (lane >> 4) * 8]);
        mma_split<KDA_SPLIT_U, false>(S[2 * jj], uh, ul, b[0], b[1], 0u, 0u);
        mma_split<KDA_SPLIT_U, false>(S[2 * jj + 1], uh, ul, b[2], b[3], 0u, 0u);
    }
}

// ---- the kernel ------------------------------------------------------------------------------
template <typename ST>
__device__ __forceinline__ void kda_fwd_body(
    const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k, const bf16_bits* __restrict__ v,
    const void* __restrict__ g, const bf16_bits* __restrict__ beta, const float* __restrict__ A_log,
    const float* __restrict__ dt_bias, const int* __restrict__ cu_seqlens, const ST* __restrict__ h0,
    bf16_bits* __restrict__ o, ST* __restrict__ ht, int T, int H, int N, float scale, float lower_bound,
    int flags) {
    extern __shared__ __align__(128) unsigned char kda_smem_raw[];
    KdaSmem& sm = *reinterpret_cast<KdaSmem*>(kda_smem_raw);
    __shared__ int kda_seq_slot;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int h = blockIdx.x, n = kda_sequence_of(cu_seqlens, N, blockIdx.y, tid, KDA_THREADS, &kda_seq_slot);
    const int bos = cu_seqlens[n], eos = cu_seqlens[n + 1];
    const bool gate_in_kernel = A_log != nullptr;
    const bool beta_logit = flags & 1, l2norm = flags & 2, layout_kv = flags & 4;
    const float eA = gate_in_kernel ? ex2(A_log[h] * KDA_LOG2E) : 0.0f;
    const float lb2 = lower_bound * KDA_LOG2E;               // gate in log2 units
    const float* gf = static_cast<const float*>(g);
    const bf16_bits* gb = static_cast<const bf16_bits*>(g);
    if (gate_in_kernel && tid < KDA_D) sm.dt_bias[tid] = dt_bias[h * KDA_D + tid];

    // S^T rows v = 16 warp + lane/4 (+8), columns k = 8 j + 2 (lane % 4) (+1): acc[j][0..3]
    const int vr = 16 * warp + (lane >> 2), kc = 2 * (lane & 3);
    float S[16][4];
    const size_t sbase = ((size_t)n * H + h) * KDA_D * KDA_D;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int vv = vr + (e >> 1) * 8, kk = 8 * j + kc + (e & 1);
            const size_t off = layout_kv ? (size_t)kk * KDA_D + vv : (size_t)vv * KDA_D + kk;
            S[j][e] = h0 ? load_state(h0 + sbase + off) : 0.0f;
        }
    }

    const int nchunks = (eos - bos + KDA_CHUNK - 1) / KDA_CHUNK;
    const size_t row_stride = (size_t)H * KDA_D;             // elements between tokens of q, k, v, g

    auto prefetch = [&](int c, int s) {
        const int t0 = bos + c * KDA_CHUNK;
        const int r = tid >> 4, part = tid & 15;             // 16 rows x 16 parts of 16 bytes
        const bool ok = t0 + r < eos;                        // rows past the sequence: zero-filled
        const size_t row = ok ? (size_t)(t0 + r) * row_stride + (size_t)h * KDA_D : 0;
        const int bytes = ok ? 16 : 0;
        KdaStage& st = sm.stage[s];
        cp_async16(&st.q[r][part * 8], q + row + part * 8, bytes);
        cp_async16(&st.k[r][part * 8], k + row + part * 8, bytes);
        cp_async16(&st.v[r][part * 8], v + row + part * 8, bytes);
        if (gate_in_kernel) {
            cp_async16(reinterpret_cast<bf16_bits*>(&st.g[r][0]) + part * 8, gb + row + part * 8, bytes);
        } else {
            cp_async16(&st.g[r][part * 4], gf + row + part * 4, bytes);
            cp_async16(&st.g[r][64 + part * 4], gf + row + 64 + part * 4, bytes);
        }
        cp_async_commit();
    };

    if (nchunks > 0) prefetch(0, 0);
    for (int c = 0; c < nchunks; ++c) {
        const int s = c & 1, t0 = bos + c * KDA_CHUNK, valid = min(KDA_CHUNK, eos - t0);
        cp_async_wait<0>();
        __syncthreads();                                                         // S1
        if (c + 1 < nchunks) prefetch(c + 1, s ^ 1);
        KdaStage& st = sm.stage[s];

        kda_chunk_prep(st, sm, beta, tid, lane, warp, valid, t0, h, H, gate_in_kernel, beta_logit, l2norm, eA, lb2,
                       scale);                                           // P2-P7, S2-S7

        // P8: this warp's rows of U^T, o^T and the state
        kda_chunk_state(st.v, sm, sm.o, S, lane, warp, vr, kc);                     // P8
        __syncthreads();                                                         // S8

        // the chunk's output rows, 16 bytes per thread
        {
            const int r = tid >> 4, part = tid & 15;
            if (r < valid) {
                const uint4 val = *reinterpret_cast<const uint4*>(&sm.o[r][part * 8]);
                *reinterpret_cast<uint4*>(o + (size_t)(t0 + r) * row_stride + (size_t)h * KDA_D + part * 8) = val;
            }
        }
    }

    if (ht) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int vv = vr + (e >> 1) * 8, kk = 8 * j + kc + (e & 1);
                const size_t off = layout_kv ? (size_t)kk * KDA_D + vv : (size_t)vv * KDA_D + kk;
                store_state(ht + sbase + off, S[j][e]);
            }
        }
    }
}

// ---- the split pair (gene kernels = split: family.py renders these entries instead) ------
// kda_prep: one CTA per (workspace slot, head), grid (T / 16 + N, H): P2-P7 on one chunk, its
// operands written to that slot's record. kda_rec: one CTA per (head, sequence) like the fused
// kernel, P8 only, each chunk's record and v tile loaded KDA_REC_STAGES - 1 chunks ahead by
// cp.async, one barrier per chunk.
//
// V split (gene rec_v_split, v4: KDA_REC_V_SPLIT = s in {1, 2, 4}): the recurrence is independent
// per column of V (S <- diag(e^g) S + k (beta (v - S^T k))^T and o = scale S^T q column by column;
// the record's qd, w, kr, T, Aqk, decay are shared by every column), so kda_rec runs one CTA per
// (head, sequence, V slice), grid (H s, N), blockIdx.x = h s + slice: V columns [v0, v0 + V / s),
// V / (16 s) warps, each with the same 16 rows of S^T and the same P8 code as with s = 1 (the
// m16n8k16 tiles along V are one warp's 16 rows: V / s must be a multiple of 16). Each CTA loads
// the whole record and its slice of v, writes its slice of o and of the final state. s = 1 is the
// kernel before the gene (same layout, same SASS).
//
// Slots: chunk c of sequence n is slot cu[n] / 16 + n + c. Distinct and below T / 16 + N:
// with cu[n] = 16 p + r and len = 16 q + s (r, s < 16), sequence n's last slot + 1 is
// p + n + q + (s > 0) <= (cu[n] + len) / 16 + n + 1, sequence n + 1's first. Gap slots (at most
// one per sequence) are never written nor read. A record is the head's slot's operands, head-major
// (record h * (T / 16 + N) + slot), rows unpadded:
//   qd [NW][16][128] bf16 | w [NW][16][128] bf16 | kr [16][128] bf16 | T [NI][16][16] bf16 |
//   Aqk [NI][16][16] bf16 | decay [128] fp32                      (KDA_REC_BYTES; family.rec_bytes)
#define KDA_TILE_BYTES (KDA_CHUNK * KDA_D * 2)
#define KDA_SMALL_BYTES (KDA_CHUNK * KDA_CHUNK * 2)
#define KDA_OFF_W (KDA_NW * KDA_TILE_BYTES)
#define KDA_OFF_KR (2 * KDA_NW * KDA_TILE_BYTES)
#define KDA_OFF_T ((2 * KDA_NW + 1) * KDA_TILE_BYTES)
#define KDA_OFF_AQK (KDA_OFF_T + KDA_NI * KDA_SMALL_BYTES)
#define KDA_OFF_DECAY (KDA_OFF_AQK + KDA_NI * KDA_SMALL_BYTES)
#define KDA_REC_BYTES (KDA_OFF_DECAY + KDA_D * 4)
#define KDA_REC_STAGES 3
#define KDA_REC_VS (KDA_D / KDA_REC_V_SPLIT)   // V columns of one kda_rec CTA
#define KDA_REC_VROW (KDA_REC_VS + 8)          // its padded v and o rows (KDA_ROW when s = 1)
#define KDA_REC_WARPS (KDA_REC_VS / 16)        // one warp per 16 V rows of S^T
#define KDA_REC_THREADS (KDA_REC_WARPS * 32)
#define KDA_REC_PARTS (KDA_REC_VS / 8)         // 16-byte pieces of a v or o slice row
#define KDA_REC_PARTS_LOG2 (KDA_REC_V_SPLIT == 1 ? 4 : KDA_REC_V_SPLIT == 2 ? 3 : 2)
static_assert((1 << KDA_REC_PARTS_LOG2) == KDA_REC_PARTS, "rec_v_split is 1, 2 or 4");
static_assert(KDA_D % KDA_REC_V_SPLIT == 0 && KDA_REC_VS % 16 == 0,
              "kda_rec's V slice must be whole m16 tiles (16 V rows per warp)");
static_assert(KDA_CHUNK * KDA_REC_PARTS == KDA_REC_THREADS, "one 16-byte piece of the v / o slice per thread");

struct KdaPrepStage {                    // kda_prep's raw inputs (no v)
    bf16_bits q[KDA_CHUNK][KDA_ROW];
    bf16_bits k[KDA_CHUNK][KDA_ROW];
    float g[KDA_CHUNK][KDA_D];
};
struct KdaPrepSmem {                     // KdaSmem less the second stage, v and o
#if KDA_PREP_LEAN == 3
    union {                              // tight (NW = NI = 1): P4 writes qd, kd over the q, k it reads
        KdaPrepStage stage;              // (each thread its own elements); P2 writes G over g (after a
        struct {                         // barrier: every thread's raw gate read first)
            bf16_bits qd[KDA_NW][KDA_CHUNK][KDA_ROW];
            bf16_bits kd[KDA_CHUNK][KDA_ROW];
            float G[KDA_CHUNK][KDA_D];
        };
    };
    bf16_bits kr[KDA_CHUNK][KDA_ROW];
#elif KDA_PREP_LEAN == 2
    union {                              // compact (NW = NI = 1): P4 writes qd, kd over the q, k it reads
        KdaPrepStage stage;              // (each thread its own elements) and kr over g (dead after P2)
        struct {
            bf16_bits qd[KDA_NW][KDA_CHUNK][KDA_ROW];
            bf16_bits kd[KDA_CHUNK][KDA_ROW];
            bf16_bits kr[KDA_CHUNK][KDA_ROW];
        };
    };
    float G[KDA_CHUNK][KDA_D];
#else
    KdaPrepStage stage;
    float G[KDA_CHUNK][KDA_D];
    bf16_bits qd[KDA_NW][KDA_CHUNK][KDA_ROW];
    bf16_bits kd[KDA_CHUNK][KDA_ROW];
#endif
    bf16_bits qp[KDA_NI][KDA_CHUNK][KDA_ROW];
#if KDA_PREP_LEAN
    union {                              // kp, km: read by P5 only; w: written by P7 (after S5, S6)
        struct {
            bf16_bits kp[KDA_NI][KDA_CHUNK][KDA_ROW];
            bf16_bits km[KDA_NI][KDA_CHUNK][KDA_ROW];
        };
        bf16_bits w[KDA_NW][KDA_CHUNK][KDA_ROW];   // NW <= 2 <= 2 NI tiles
    };
#else
    bf16_bits kp[KDA_NI][KDA_CHUNK][KDA_ROW];
    bf16_bits km[KDA_NI][KDA_CHUNK][KDA_ROW];
#endif
#if KDA_PREP_LEAN < 2
    bf16_bits kr[KDA_CHUNK][KDA_ROW];
#endif
#if !KDA_PREP_LEAN
    bf16_bits w[KDA_NW][KDA_CHUNK][KDA_ROW];
#endif
    float L[KDA_CHUNK][KDA_CHUNK + 1];
    bf16_bits T[KDA_NI][KDA_CHUNK][KDA_ROW16];
    bf16_bits Aqk[KDA_NI][KDA_CHUNK][KDA_ROW16];
    float decay[KDA_D];
#if KDA_PREP_LEAN != 3
    float dt_bias[KDA_D];
#endif
    float rq[KDA_CHUNK], rk[KDA_CHUNK], beta[KDA_CHUNK];
#if KDA_PREP_LEAN
    int seq[4];                          // the slot's sequence, its bos and eos (kda_slot_owner's pass)
#endif
};
#if KDA_REC_WGMMA
// wgmma's B operands (one tile each: the all-bf16 precision only) in kda_gmma_piece's order, the
// 4 KB tiles first (16-byte aligned starts, as descriptors need)
struct KdaRecStage {
    bf16_bits qd[KDA_CHUNK * KDA_D];
    bf16_bits w[KDA_CHUNK * KDA_D];
    bf16_bits kr[KDA_CHUNK * KDA_D];
    bf16_bits T[KDA_CHUNK * KDA_CHUNK];
    bf16_bits Aqk[KDA_CHUNK * KDA_CHUNK];
    bf16_bits v[KDA_CHUNK][KDA_REC_VROW];
    float decay[KDA_D];
};
static_assert(KDA_NW == 1 && KDA_NI == 1 && !KDA_SPLIT_S && !KDA_SPLIT_U, "wgmma's P8 is written for one bf16 tile per operand");
static_assert(KDA_REC_WARPS % 4 == 0, "wgmma's P8 needs whole warpgroups (rec_v_split 1 or 2)");
#else
struct KdaRecStage {                     // one chunk's record and v slice, as P8 reads them
    bf16_bits v[KDA_CHUNK][KDA_REC_VROW];
    bf16_bits qd[KDA_NW][KDA_CHUNK][KDA_ROW];
    bf16_bits w[KDA_NW][KDA_CHUNK][KDA_ROW];
    bf16_bits kr[KDA_CHUNK][KDA_ROW];
    bf16_bits T[KDA_NI][KDA_CHUNK][KDA_ROW16];
    bf16_bits Aqk[KDA_NI][KDA_CHUNK][KDA_ROW16];
    float decay[KDA_D];
};
#endif
struct KdaRecSmem {
    KdaRecStage stage[KDA_REC_STAGES];
    bf16_bits o[2][KDA_CHUNK][KDA_REC_VROW];  // output staging (this CTA's V slice), alternating chunks
};
static_assert(KDA_PREP_LEAN < 2 || (KDA_NW == 1 && KDA_NI == 1), "the compact and tight kda_preps hold one tile of qd, kp, km");
static_assert(sizeof(KdaPrepSmem) == KDA_PREP_SMEM_BYTES, "kernels/kda/family.py's kda_prep shared-memory size disagrees");
#if KDA_PREP_LEAN == 3   // tight: G is g's memory, element for element; qd, kd are q's and k's
static_assert(__builtin_offsetof(KdaPrepSmem, G) == __builtin_offsetof(KdaPrepSmem, stage) + __builtin_offsetof(KdaPrepStage, g) &&
              __builtin_offsetof(KdaPrepSmem, kd) == __builtin_offsetof(KdaPrepSmem, stage) + __builtin_offsetof(KdaPrepStage, k) &&
              sizeof(KdaPrepSmem::G) == sizeof(KdaPrepStage::g), "the tight kda_prep writes G over g");
#endif
static_assert(sizeof(KdaRecSmem) == KDA_REC_SMEM_BYTES, "kernels/kda/family.py's kda_rec shared-memory size disagrees");
static_assert(KDA_REC_BYTES % 16 == 0 && KDA_REC_BYTES == KDA_REC_BYTES_HOST, "kernels/kda/family.py's record size disagrees");

#if KDA_REC_WGMMA
// P8 on wgmma (gene rec_mma = wgmma): kda_chunk_state's products, each warpgroup (4 warps, 64 rows
// of S^T) at once: A from the registers as mma.sync's (wgmma's m64nNk16 A fragment is mma.sync's
// m16n8k16 A per warp, its fp32 D mma.sync's m16n8 C tiles along N), B by descriptors of `st`.
// u^T = V^T T^T, WS = S^T w^T, o^T = S^T qd^T (8 k16 steps), one commit group; then U = u - WS,
// o^T += U^T Aqk^T (its own group, waited first so o is staged while the state's update runs),
// S^T <- e^(G_C) S^T + U^T kr (m64n128k16, kr MN-major). Same operations in the same order as
// kda_chunk_state's all-bf16 path (tests/test_kda_gpu.py compares the two).
template <int VROW>
__device__ __forceinline__ void kda_rec_state_wgmma(const KdaRecStage& st, bf16_bits (*ot)[VROW], float (&S)[16][4],
                                                    int lane, int warp, int vr, int kc) {
    uint32_t a[4], sa[KDA_D / 16][4], uh[4];
    ldsm_x4_t(a, &st.v[(lane & 7) + (lane >> 4) * 8][16 * warp + ((lane >> 3) & 1) * 8]);
#pragma unroll
    for (int kk = 0; kk < KDA_D / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) sa[kk][r] = pack_bf16(S[2 * kk + (r >> 1)][2 * (r & 1)], S[2 * kk + (r >> 1)][2 * (r & 1) + 1]);
    // two descriptors of the stage's start (K-major and MN-major strides), the tiles' by offsets
    const uint32_t base = smem_addr(&st);
    const unsigned long long dk = kda_gmma_desc(base, KDA_GMMA_K_LBO, KDA_GMMA_K_SBO);
    const unsigned long long dmn = kda_gmma_desc(base, KDA_GMMA_MN_LBO, KDA_GMMA_MN_SBO);
    constexpr int oqd = __builtin_offsetof(KdaRecStage, qd), ow = __builtin_offsetof(KdaRecStage, w), okr = __builtin_offsetof(KdaRecStage, kr);
    constexpr int oT = __builtin_offsetof(KdaRecStage, T), oAqk = __builtin_offsetof(KdaRecStage, Aqk);
    float U[2][4] = {}, WS[2][4] = {}, O[2][4] = {};
    wgmma_fence();
    wgmma_n16<false>(U, a, kda_gmma_desc_at(dk, oT));
#pragma unroll
    for (int kk = 0; kk < KDA_D / 16; ++kk) {         // k16 step kk: piece columns 2 kk, 2 kk + 1
        if (kk == 0) {
            wgmma_n16<false>(WS, sa[0], kda_gmma_desc_at(dk, ow));
            wgmma_n16<false>(O, sa[0], kda_gmma_desc_at(dk, oqd));
        } else {
            wgmma_n16<true>(WS, sa[kk], kda_gmma_desc_at(dk, ow + kk * KDA_GMMA_K16_STEP));
            wgmma_n16<true>(O, sa[kk], kda_gmma_desc_at(dk, oqd + kk * KDA_GMMA_K16_STEP));
        }
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            wgmma_hold(U[nt][e]);
            wgmma_hold(WS[nt][e]);
            wgmma_hold(O[nt][e]);
            U[nt][e] -= WS[nt][e];
        }
#pragma unroll
    for (int r = 0; r < 4; ++r) uh[r] = pack_bf16(U[r >> 1][2 * (r & 1)], U[r >> 1][2 * (r & 1) + 1]);
    kda_decay_state(S, st.decay, kc);
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) wgmma_hold(S[j][e]);
    wgmma_fence();
    wgmma_n16<true>(O, uh, kda_gmma_desc_at(dk, oAqk));
    wgmma_commit();
    wgmma_n128_tb(S, uh, kda_gmma_desc_at(dmn, okr));
    wgmma_commit();
    wgmma_wait<1>();                                  // o^T's group (the older one) is done
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            wgmma_hold(O[nt][e]);
            const int vv = vr + (e >> 1) * 8, cc = 8 * nt + kc + (e & 1);
            ot[cc][vv] = to_bf16(O[nt][e]);
        }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) wgmma_hold(S[j][e]);
}
#endif

// >>> kda_slot_sequence (tests/test_kda_template.py compiles this function for the host)
// The sequence owning workspace slot `slot`: the largest n < N with cu[n] / 16 + n <= slot (that
// base is strictly increasing in n; sequence 0's is 0). Binary search, log2 N reads of cu_seqlens.
__device__ __forceinline__ int kda_slot_sequence(const int* __restrict__ cu_seqlens, int N, int slot) {
    int lo = 0, hi = N - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (cu_seqlens[mid] / KDA_CHUNK + mid <= slot) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
// <<< kda_slot_sequence

// >>> kda_slot_owner (tests/test_kda_template.py compiles this function for the host)
// Whether sequence i (c0 = cu[i], c1 = cu[i + 1]) owns workspace slot `slot`: its base c0 / 16 + i
// is <= slot and sequence i + 1's base c1 / 16 + i + 1 (none past N - 1) is above it. Exactly one
// i < N does (the bases strictly increase from 0): kda_slot_sequence's answer, in one pass.
__device__ __forceinline__ bool kda_slot_owner(int c0, int c1, int i, int N, int slot) {
    return c0 / KDA_CHUNK + i <= slot && (i + 1 >= N || c1 / KDA_CHUNK + i + 1 > slot);
}
// <<< kda_slot_owner

// >>> kda_rec_slice (tests/test_kda_template.py compiles this function for the host)
// kda_rec's head and first V column for grid column x = h s + slice (s = KDA_REC_V_SPLIT, the
// slices of one head adjacent; kernel_model.rec_grid is its specification).
__device__ __forceinline__ int kda_rec_head(unsigned x) { return (int)(x / KDA_REC_V_SPLIT); }
__device__ __forceinline__ int kda_rec_v0(unsigned x) { return (int)(x % KDA_REC_V_SPLIT) * (KDA_D / KDA_REC_V_SPLIT); }
// <<< kda_rec_slice

// the 16-byte pieces of a record's small parts (T, Aqk, decay): piece i < KDA_SMALL_PIECES is at
// record offset small_off(i) and at *small_smem(i) in a stage or prep buffer
#define KDA_TA_PIECES (2 * KDA_NI * KDA_SMALL_BYTES / 16)   // T and Aqk: 32 pieces a tile
#define KDA_SMALL_PIECES (KDA_TA_PIECES + KDA_D * 4 / 16)
static_assert(KDA_SMALL_PIECES <= KDA_THREADS, "one small piece per thread");
__device__ __forceinline__ int kda_small_off(int i) {
    if (i < KDA_TA_PIECES) return KDA_OFF_T + i * 16;          // T then Aqk: rows of 32 B
    return KDA_OFF_DECAY + (i - KDA_TA_PIECES) * 16;
}
template <class Sm>
__device__ __forceinline__ void* kda_small_smem(Sm& sm, int i) {
    if (i < KDA_TA_PIECES) {
        const int tile = i >> 5, rr = (i >> 1) & 15, pp = i & 1;      // tile: T hi, (T lo), Aqk hi, (Aqk lo)
        bf16_bits(*t)[KDA_CHUNK][KDA_ROW16] = tile < KDA_NI ? sm.T : sm.Aqk;
        return &t[tile % KDA_NI][rr][pp * 8];
    }
    return &sm.decay[(i - KDA_TA_PIECES) * 4];
}

#if KDA_PREP_PDL
// ---- v7: kda_prep and kda_rec overlapped (gene prep_overlap = pdl) -----------------------------
// Launches (family.launch): kda_flags_zero, an ordinary launch, zeroes one flag per (head, slot),
// H x (T / 16 + N) u32 after the records (the workspace is poisoned before every launch sequence:
// nothing in it survives from an earlier call, and stream order makes the zeros visible to both
// kernels after it). kda_prep, persistent: grid P = min(items, prep_ctas_per_sm x 132), items
// slot-major (item i: slot i / H, head i % H: chunk c of every head before chunk c + 1, sequence by
// sequence), CTA b doing items b, b + P, ...; it executes griddepcontrol.launch_dependents first,
// so kda_rec's CTAs may be scheduled beside it at once (Launch.overlap: programmatic dependent
// launch). After an item's record: a barrier (every thread's stores are done, and the shared
// memory is free for the next item), then thread 0: a release store of 1 to the item's flag. A gap slot writes nothing and sets no flag (kda_rec never reads one).
// kda_rec: thread 0 spins (ld.acquire.gpu, __nanosleep backoff) on the flag of the chunk whose
// record the CTA is about to cp.async, before the barrier all threads pass before issuing it (the
// chunk loop's one barrier; the prologue's two chunks get one more); kda_rec never writes a flag.
// Memory order: prep's record stores -> bar.sync -> thread 0's st.release (cumulative:
// the barrier orders the other threads' stores before it) -> rec's ld.acquire of 1 -> bar.sync ->
// every rec thread's cp.async of the record: the record is read after it was written.
// Deadlock freedom: kda_prep never waits on anything (no flag, no other CTA), so each of its CTAs
// finishes its items once it runs, and all of them run before any kda_rec CTA can (PDL schedules
// the dependent grid only after every prep CTA has executed launch_dependents or exited); each
// flag kda_rec spins on belongs to a non-gap chunk of its own sequence, which some prep CTA's
// list holds, so every spin ends. Without the overlap (a runner that launches kda_rec after
// kda_prep has finished) every flag is already 1. kda_rec reads no flag it could wait on forever.
__device__ __forceinline__ unsigned* kda_ready_flags(unsigned char* ws, int T, int H, int N) {
    return reinterpret_cast<unsigned*>(ws + (size_t)H * (T / KDA_CHUNK + N) * KDA_REC_MAX_BYTES);
}
// the release store alone (MEMBAR.ALL.GPU + STG.E.STRONG.GPU): after the CTA's barrier it orders
// every thread's record stores before the flag (release is cumulative), as CUTLASS's
// GenericBarrier does; a __threadfence before it added MEMBAR.SC.GPU + CCTL.IVALL per item
__device__ __forceinline__ void kda_set_ready(unsigned* f) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" :: "l"(f), "r"(1u) : "memory");
}
__device__ __forceinline__ void kda_wait_ready(const unsigned* f) {
    unsigned v, ns = 32;
    for (;;) {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(f) : "memory");
        if (v == 1u) return;
        __nanosleep(ns);
        ns = ns < 1024 ? 2 * ns : ns;
    }
}
#endif

//@prep_tail new
// ---- v10: kda_rec launched over kda_prep's last wave (gene prep_overlap = tail) -----------------
// Launches (family.launch): kda_prep, the ordinary grid (one CTA per (slot, head), not persistent,
// no flags), then kda_rec with Launch.overlap (programmatic dependent launch). Each kda_prep CTA
// executes griddepcontrol.launch_dependents first; kda_rec runs the prologue that reads nothing
// kda_prep writes (its sequence from cu_seqlens, the initial state h0 into the registers S), then
// griddepcontrol.wait, which returns once kda_prep has completed and its memory operations are
// performed and visible to kda_rec, then the first cp.async of a record. So what can overlap is
// kda_rec's launch and that prologue with kda_prep's last partial wave.
// Memory order: every record store of kda_prep precedes its grid's completion; the wait orders that
// completion before every kda_rec load of the workspace (the loads before the wait are of inputs
// only: cu_seqlens, h0, none of which kda_prep writes; kda_rec's writes, o and the final state, come
// after it and kda_prep reads neither).
// Deadlock freedom: kda_prep never waits on anything. The dependent grid is scheduled only after
// every kda_prep CTA has executed launch_dependents (or exited), i.e. has started: a kda_rec CTA
// waiting in griddepcontrol.wait holds only SM room that no unstarted kda_prep CTA needs, and every
// running kda_prep CTA finishes. A runner that declines the overlap launches kda_rec after kda_prep
// has completed: the wait returns at once. No flags, no zero kernel, the workspace unchanged.
//@prep_tail end
// P2-P7 of workspace slot `slot`, head h, into its record; false (nothing written, by the whole
// CTA) for a gap slot. The grid's CTA (blockIdx.x, blockIdx.y), or one item of the persistent
// kda_prep's list (v7, prep_overlap = pdl: the caller's barrier follows, before the CTA's next item).
__device__ __forceinline__ bool kda_prep_body(
    const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k, const void* __restrict__ g,
    const bf16_bits* __restrict__ beta, const float* __restrict__ A_log, const float* __restrict__ dt_bias,
    const int* __restrict__ cu_seqlens, int T, int H, int N, float scale, float lower_bound, int flags,
    unsigned char* __restrict__ ws, const int slot, const int h) {
    extern __shared__ __align__(128) unsigned char kda_smem_raw[];
    KdaPrepSmem& sm = *reinterpret_cast<KdaPrepSmem*>(kda_smem_raw);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int nslots = T / KDA_CHUNK + N;
#if KDA_PREP_LEAN
    int n, bos, eos;
    if (N <= KDA_THREADS) {                                  // one round trip: thread i tests sequence i
        if (tid < N) {
            const int c0 = cu_seqlens[tid], c1 = cu_seqlens[tid + 1];
            if (kda_slot_owner(c0, c1, tid, N, slot)) { sm.seq[0] = tid; sm.seq[1] = c0; sm.seq[2] = c1; }
        }
        __syncthreads();
        n = sm.seq[0], bos = sm.seq[1], eos = sm.seq[2];
    } else {
        n = kda_slot_sequence(cu_seqlens, N, slot);
        bos = cu_seqlens[n], eos = cu_seqlens[n + 1];
    }
#else
    const int n = kda_slot_sequence(cu_seqlens, N, slot);
    const int bos = cu_seqlens[n], eos = cu_seqlens[n + 1];
#endif
    const int t0 = bos + (slot - (bos / KDA_CHUNK + n)) * KDA_CHUNK;
    if (t0 >= eos) return false;                             // a gap slot (the whole CTA)
    const int valid = min(KDA_CHUNK, eos - t0);
    const bool gate_in_kernel = A_log != nullptr;
    const bool beta_logit = flags & 1, l2norm = flags & 2;
    const float lb2 = lower_bound * KDA_LOG2E;
    const float* gf = static_cast<const float*>(g);
    const bf16_bits* gb = static_cast<const bf16_bits*>(g);
#if !KDA_PREP_LEAN
    const float eA = gate_in_kernel ? ex2(A_log[h] * KDA_LOG2E) : 0.0f;
    if (gate_in_kernel && tid < KDA_D) sm.dt_bias[tid] = dt_bias[h * KDA_D + tid];
#endif
    {                                                        // the chunk's q, k, g (as the fused prefetch)
        const size_t row_stride = (size_t)H * KDA_D;
        const int r = tid >> 4, part = tid & 15;
        const bool ok = t0 + r < eos;
        const size_t row = ok ? (size_t)(t0 + r) * row_stride + (size_t)h * KDA_D : 0;
        const int bytes = ok ? 16 : 0;
        KdaPrepStage& st = sm.stage;
        cp_async16(&st.q[r][part * 8], q + row + part * 8, bytes);
        cp_async16(&st.k[r][part * 8], k + row + part * 8, bytes);
        if (gate_in_kernel) {
            cp_async16(reinterpret_cast<bf16_bits*>(&st.g[r][0]) + part * 8, gb + row + part * 8, bytes);
        } else {
            cp_async16(&st.g[r][part * 4], gf + row + part * 4, bytes);
            cp_async16(&st.g[r][64 + part * 4], gf + row + 64 + part * 4, bytes);
        }
        cp_async_commit();
#if KDA_PREP_LEAN
    }
    // the other global reads, issued behind the cp.async ones and waited for with them
    const float a_log = gate_in_kernel ? A_log[h] : 0.0f;
#if KDA_PREP_LEAN == 3   // tight: this thread's two channels of P2 (2 (tid % 64), + 1), from global;
    // volatile loads, so ptxas (at 40 registers) keeps them before the wait instead of after it
    // (a dt_bias view off an 8-byte boundary, which a caller may pass, takes two 4-byte loads)
    float2 dtb2 = make_float2(0.0f, 0.0f);
    const float* dtb_at = dt_bias + h * KDA_D + 2 * (tid & 63);
    if (gate_in_kernel && ((uintptr_t)dt_bias & 7u) == 0)
        asm volatile("ld.global.nc.v2.f32 {%0, %1}, [%2];\n" : "=f"(dtb2.x), "=f"(dtb2.y) : "l"(dtb_at));
    else if (gate_in_kernel) {
        asm volatile("ld.global.nc.f32 %0, [%1];\n" : "=f"(dtb2.x) : "l"(dtb_at));
        asm volatile("ld.global.nc.f32 %0, [%1];\n" : "=f"(dtb2.y) : "l"(dtb_at + 1));
    }
    unsigned short beta_raw = 0;
    if (tid < valid) asm volatile("ld.global.nc.u16 %0, [%1];\n" : "=h"(beta_raw) : "l"(beta + (size_t)(t0 + tid) * H + h));
    const float beta_pre = from_bf16(beta_raw);
    if (tid < KDA_CHUNK) sm.beta[tid] = beta_pre;          // consumed here: ptxas keeps the load before the wait
#else
    const float dtb = gate_in_kernel && tid < KDA_D ? dt_bias[h * KDA_D + tid] : 0.0f;
    const float beta_pre = tid < valid ? from_bf16(beta[(size_t)(t0 + tid) * H + h]) : 0.0f;
    if (gate_in_kernel && tid < KDA_D) sm.dt_bias[tid] = dtb;
#endif
    const float eA = gate_in_kernel ? ex2(a_log * KDA_LOG2E) : 0.0f;
    {
#endif
        cp_async_wait<0>();
    }
    __syncthreads();
#if KDA_PREP_LEAN == 3
    kda_chunk_prep<KdaPrepStage, KdaPrepSmem, true, true>(sm.stage, sm, beta, tid, lane, warp, valid, t0, h, H,
                                                          gate_in_kernel, beta_logit, l2norm, eA, lb2, scale, beta_pre,
                                                          dtb2);
#elif KDA_PREP_LEAN
    kda_chunk_prep<KdaPrepStage, KdaPrepSmem, true>(sm.stage, sm, beta, tid, lane, warp, valid, t0, h, H, gate_in_kernel,
                                                    beta_logit, l2norm, eA, lb2, scale, beta_pre);
#else
    kda_chunk_prep(sm.stage, sm, beta, tid, lane, warp, valid, t0, h, H, gate_in_kernel, beta_logit, l2norm, eA, lb2,
                   scale);                                   // ends with a barrier: every operand is in sm
#endif
    unsigned char* rec = ws + ((size_t)h * nslots + slot) * KDA_REC_BYTES;
    {
        const int r = tid >> 4, part = tid & 15, off = r * (KDA_D * 2) + part * 16;
#pragma unroll
        for (int i = 0; i < KDA_NW; ++i) {
            *reinterpret_cast<uint4*>(rec + i * KDA_TILE_BYTES + off) = *reinterpret_cast<const uint4*>(&sm.qd[i][r][part * 8]);
            *reinterpret_cast<uint4*>(rec + KDA_OFF_W + i * KDA_TILE_BYTES + off) =
                *reinterpret_cast<const uint4*>(&sm.w[i][r][part * 8]);
        }
        *reinterpret_cast<uint4*>(rec + KDA_OFF_KR + off) = *reinterpret_cast<const uint4*>(&sm.kr[r][part * 8]);
        if (tid < KDA_SMALL_PIECES)
            *reinterpret_cast<uint4*>(rec + kda_small_off(tid)) = *reinterpret_cast<const uint4*>(kda_small_smem(sm, tid));
    }
    return true;
}

template <typename ST>
__device__ __forceinline__ void kda_rec_body(
    const bf16_bits* __restrict__ v, const int* __restrict__ cu_seqlens, const ST* __restrict__ h0,
    bf16_bits* __restrict__ o, ST* __restrict__ ht, int T, int H, int N, int flags,
    const unsigned char* __restrict__ ws) {
    extern __shared__ __align__(128) unsigned char kda_smem_raw[];
    KdaRecSmem& sm = *reinterpret_cast<KdaRecSmem*>(kda_smem_raw);
    __shared__ int kda_seq_slot;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int h = kda_rec_head(blockIdx.x), v0 = kda_rec_v0(blockIdx.x);
    const int n = kda_sequence_of(cu_seqlens, N, blockIdx.y, tid, KDA_REC_THREADS, &kda_seq_slot);
    const int bos = cu_seqlens[n], eos = cu_seqlens[n + 1], nslots = T / KDA_CHUNK + N;
    const bool layout_kv = flags & 4;
    const int vr = 16 * warp + (lane >> 2), kc = 2 * (lane & 3);   // vr: within the slice (+ v0: of S^T)
    float S[16][4];
    const size_t sbase = ((size_t)n * H + h) * KDA_D * KDA_D;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int vv = v0 + vr + (e >> 1) * 8, kk = 8 * j + kc + (e & 1);
            const size_t off = layout_kv ? (size_t)kk * KDA_D + vv : (size_t)vv * KDA_D + kk;
            S[j][e] = h0 ? load_state(h0 + sbase + off) : 0.0f;
        }
    }
    const int nchunks = (eos - bos + KDA_CHUNK - 1) / KDA_CHUNK;
    const size_t row_stride = (size_t)H * KDA_D;
    const unsigned char* recs = ws + ((size_t)h * nslots + bos / KDA_CHUNK + n) * KDA_REC_BYTES;
#if KDA_PREP_PDL   // chunk c's flag (v7): set by kda_prep once its record is written
    const unsigned* ready = kda_ready_flags(const_cast<unsigned char*>(ws), T, H, N) + (size_t)h * nslots + bos / KDA_CHUNK + n;
#endif

    auto load = [&](int c, int s) {                          // chunk c's record and v slice into stage s
        const int t0 = bos + c * KDA_CHUNK, sr = tid >> KDA_REC_PARTS_LOG2, spart = tid & (KDA_REC_PARTS - 1);
        const bool ok = t0 + sr < eos;                       // v rows past the sequence: zero-filled
        const size_t row = ok ? (size_t)(t0 + sr) * row_stride + (size_t)h * KDA_D + v0 : 0;
        const unsigned char* rec = recs + (size_t)c * KDA_REC_BYTES;
        KdaRecStage& st = sm.stage[s];
        cp_async16(&st.v[sr][spart * 8], v + row + spart * 8, ok ? 16 : 0);
#pragma unroll
        for (int p = 0; p < KDA_REC_V_SPLIT; ++p) {         // the record's 16 x 16 pieces of each tile
            const int e = tid + p * KDA_REC_THREADS;
#if KDA_REC_WGMMA
            // piece e of kda_gmma_piece's order (row e % 16, column e / 16): a warp's shared-memory
            // writes are 512 contiguous bytes (no bank conflict) and its global reads whole 32-byte
            // sectors (columns 2 j and 2 j + 1 of 16 rows)
            const int wr = e & 15, wp = e >> 4;
            const int piece = kda_gmma_piece(wr, wp), woff = wr * (KDA_D * 2) + wp * 16;
            cp_async16(reinterpret_cast<unsigned char*>(st.qd) + piece, rec + woff, 16);
            cp_async16(reinterpret_cast<unsigned char*>(st.w) + piece, rec + KDA_OFF_W + woff, 16);
            cp_async16(reinterpret_cast<unsigned char*>(st.kr) + piece, rec + KDA_OFF_KR + woff, 16);
#else
            const int r = e >> 4, part = e & 15, off = r * (KDA_D * 2) + part * 16;
#pragma unroll
            for (int i = 0; i < KDA_NW; ++i) {
                cp_async16(&st.qd[i][r][part * 8], rec + i * KDA_TILE_BYTES + off, 16);
                cp_async16(&st.w[i][r][part * 8], rec + KDA_OFF_W + i * KDA_TILE_BYTES + off, 16);
            }
            cp_async16(&st.kr[r][part * 8], rec + KDA_OFF_KR + off, 16);
#endif
        }
#pragma unroll
        for (int p = 0; p < (KDA_SMALL_PIECES + KDA_REC_THREADS - 1) / KDA_REC_THREADS; ++p) {
            const int e = tid + p * KDA_REC_THREADS;
#if KDA_REC_WGMMA                                    // T then Aqk (one tile each): rows of two pieces
            if (e < KDA_TA_PIECES)
                cp_async16(reinterpret_cast<unsigned char*>(e < 32 ? st.T : st.Aqk) + kda_gmma_piece((e >> 1) & 15, e & 1),
                           rec + kda_small_off(e), 16);
            else if (e < KDA_SMALL_PIECES)
                cp_async16(&st.decay[(e - KDA_TA_PIECES) * 4], rec + kda_small_off(e), 16);
#else
            if (e < KDA_SMALL_PIECES) cp_async16(kda_small_smem(st, e), rec + kda_small_off(e), 16);
#endif
        }
    };
    auto store_o = [&](int c, int buf) {                     // chunk c's output slice, 16 bytes per thread
        const int t0 = bos + c * KDA_CHUNK, sr = tid >> KDA_REC_PARTS_LOG2, spart = tid & (KDA_REC_PARTS - 1);
        if (t0 + sr < eos) {
            const uint4 val = *reinterpret_cast<const uint4*>(&sm.o[buf][sr][spart * 8]);
            *reinterpret_cast<uint4*>(o + (size_t)(t0 + sr) * row_stride + (size_t)h * KDA_D + v0 + spart * 8) = val;
        }
    };

#if KDA_PREP_PDL
    if (tid == 0)                                            // the prologue's records are written ...
        for (int c = 0; c < KDA_REC_STAGES - 1 && c < nchunks; ++c) kda_wait_ready(ready + c);
    __syncthreads();                                         // ... and every thread may read them
#endif
//@prep_tail new
    // (v10, prep_overlap = tail) above: inputs only (cu_seqlens, h0); below: the workspace. kda_prep
    // has completed and its records are visible once this returns (at once without the overlap).
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
//@prep_tail end
#pragma unroll
    for (int c = 0; c < KDA_REC_STAGES - 1; ++c) {           // one commit group per chunk, empty past the end
        if (c < nchunks) load(c, c);
        cp_async_commit();
    }
    for (int c = 0; c < nchunks; ++c) {
        const int s = c % KDA_REC_STAGES;
        cp_async_wait<KDA_REC_STAGES - 2>();                 // chunk c's group has landed (this thread's)
#if KDA_REC_WGMMA
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // ... and is visible to wgmma's reads
#endif
#if KDA_PREP_PDL   // (v7) the record loaded after this barrier is written (thread 0 acquires its flag)
        if (tid == 0 && c + KDA_REC_STAGES - 1 < nchunks) kda_wait_ready(ready + c + KDA_REC_STAGES - 1);
#endif
        __syncthreads();   // everyone's: stage s is visible; chunk c - 1's P8 is done everywhere, so its
                           // stage may be refilled and its staged o read
        if (c + KDA_REC_STAGES - 1 < nchunks) load(c + KDA_REC_STAGES - 1, (c + KDA_REC_STAGES - 1) % KDA_REC_STAGES);
        cp_async_commit();
        if (c > 0) store_o(c - 1, (c - 1) & 1);
#if KDA_REC_WGMMA
        kda_rec_state_wgmma(sm.stage[s], sm.o[c & 1], S, lane, warp, vr, kc);                // P8 (wgmma)
#else
        kda_chunk_state(sm.stage[s].v, sm.stage[s], sm.o[c & 1], S, lane, warp, vr, kc);   // P8
#endif
    }
    __syncthreads();
    if (nchunks > 0) store_o(nchunks - 1, (nchunks - 1) & 1);

    if (ht) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int vv = v0 + vr + (e >> 1) * 8, kk = 8 * j + kc + (e & 1);
                const size_t off = layout_kv ? (size_t)kk * KDA_D + vv : (size_t)vv * KDA_D + kk;
                store_state(ht + sbase + off, S[j][e]);
            }
        }
    }
}

#define KDA_ENTRY(NAME, ST)                                                                              \
    extern "C" __global__ void __launch_bounds__(KDA_THREADS, 1) NAME(                                   \
        const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const void* g, const bf16_bits* beta, \
        const float* A_log, const float* dt_bias, const int* cu_seqlens, const ST* h0, bf16_bits* o,     \
        ST* ht, int T, int H, int N, float scale, float lower_bound, int flags) {                         \
        kda_fwd_body<ST>(q, k, v, g, beta, A_log, dt_bias, cu_seqlens, h0, o, ht, T, H, N, scale,        \
                         lower_bound, flags);                                                            \
    }

// the split pair's entries: the fused kernel's parameters, then the workspace (family.workspace)
#if KDA_PREP_PDL
// (v7) persistent: items b, b + P, ... of the slot-major list; each record's flag set once written
#define KDA_PREP_ENTRY(NAME)                                                                             \
    extern "C" __global__ void __launch_bounds__(KDA_THREADS, KDA_PREP_MIN_BLOCKS) NAME(                 \
        const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const void* g, const bf16_bits* beta, \
        const float* A_log, const float* dt_bias, const int* cu_seqlens, const void* h0, bf16_bits* o,   \
        void* ht, int T, int H, int N, float scale, float lower_bound, int flags, unsigned char* ws) {   \
        asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");                                \
        const int nslots = T / KDA_CHUNK + N, items = nslots * H;                                         \
        unsigned* ready = kda_ready_flags(ws, T, H, N);                                                   \
        for (int i = blockIdx.x; i < items; i += gridDim.x) {                                             \
            const int slot = i / H, h = i - slot * H;                                                     \
            const bool wrote = kda_prep_body(q, k, g, beta, A_log, dt_bias, cu_seqlens, T, H, N, scale,  \
                                             lower_bound, flags, ws, slot, h);                            \
            __syncthreads();                                                                              \
            if (wrote && threadIdx.x == 0) kda_set_ready(ready + (size_t)h * nslots + slot);              \
        }                                                                                                 \
    }
// (v7) one ordinary launch before kda_prep: every (head, slot) flag to 0, one thread each
#define KDA_FLAGS_ZERO_ENTRY(NAME)                                                                       \
    extern "C" __global__ void __launch_bounds__(KDA_THREADS, 1) NAME(                                   \
        const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const void* g, const bf16_bits* beta, \
        const float* A_log, const float* dt_bias, const int* cu_seqlens, const void* h0, bf16_bits* o,   \
        void* ht, int T, int H, int N, float scale, float lower_bound, int flags, unsigned char* ws) {   \
        const size_t i = (size_t)blockIdx.x * KDA_THREADS + threadIdx.x;                                  \
        if (i < (size_t)H * (T / KDA_CHUNK + N)) kda_ready_flags(ws, T, H, N)[i] = 0u;                    \
    }
#else
#define KDA_PREP_ENTRY(NAME)                                                                             \
    extern "C" __global__ void __launch_bounds__(KDA_THREADS, KDA_PREP_MIN_BLOCKS) NAME(                 \
        const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const void* g, const bf16_bits* beta, \
        const float* A_log, const float* dt_bias, const int* cu_seqlens, const void* h0, bf16_bits* o,   \
        void* ht, int T, int H, int N, float scale, float lower_bound, int flags, unsigned char* ws) {   \
//@prep_tail new
        asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");   /* (v10) kda_rec may launch */ \
//@prep_tail end
        kda_prep_body(q, k, g, beta, A_log, dt_bias, cu_seqlens, T, H, N, scale, lower_bound, flags, ws, \
                      blockIdx.x, blockIdx.y);                                                            \
    }
#endif
#define KDA_REC_ENTRY(NAME, ST)                                                                          \
    extern "C" __global__ void __launch_bounds__(KDA_REC_THREADS, KDA_REC_MIN_BLOCKS) NAME(                  \
        const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const void* g, const bf16_bits* beta, \
        const float* A_log, const float* dt_bias, const int* cu_seqlens, const ST* h0, bf16_bits* o,     \
        ST* ht, int T, int H, int N, float scale, float lower_bound, int flags, const unsigned char* ws) { \
        kda_rec_body<ST>(v, cu_seqlens, h0, o, ht, T, H, N, flags, ws);                                  \
    }
