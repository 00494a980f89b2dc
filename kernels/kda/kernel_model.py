"""The arithmetic of template.cu in numpy: where it rounds to bf16, what it keeps in fp32.

Not a reference (reference.py is, in float64): a model of the kernel's precision, so the CPU
tests can tell whether the template's design (chunks of 16, bf16 tensor-core operands including
the state's bf16 copy, an fp32 state, a bf16 T) meets the family's tolerances on both input
distributions before a GPU runs it. It does not model the index mappings of mma / ldmatrix
fragments (only the device checks those) nor the order of fp32 sums (fp32 either way).

Same inputs as `reference.chunked` (one sequence, all heads, float64 activations) plus the
storage dtype of the final state; returns (o rounded to bf16, final state rounded to storage).

And the template's schedule: `sequence_order` is the order its CTAs take the sequences in (the
specification of template.cu's kda_sequence_of), `wave_makespan` the token-steps the busiest SM
runs when one CTA per (sequence, head) is dispatched in that order to the first free SM: a
model of the `order` gene's effect, to be checked against the H200's times. `workspace_slots`
is where the split pair (gene `kernels`, v3) keeps each chunk's record. `split_time_ms` is session
12's prediction for the V split (kept: the README's measured-vs-predicted table quotes it);
`SPLIT_FIT` / `split_fit_ms` is session 13's model fitted to what the H200 measured.
"""

from __future__ import annotations

import numpy as np

from fitness import dtypes

CHUNK = 16
MID = CHUNK // 2
LOG2E = 1.4426950408889634


def _bf(x: np.ndarray) -> np.ndarray:
    return dtypes.round_trip(np.asarray(x, dtype=np.float64), "bf16").astype(np.float32)


def _split(x: np.ndarray) -> np.ndarray:
    """hi + lo, both bf16: what a product of split operands sees (relative error ~2^-17)."""
    hi = _bf(x)
    return hi + _bf(np.asarray(x, dtype=np.float32) - hi)


def chunk_model(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray, scale: float,
                h0: np.ndarray, state_dtype: str = "fp32", *, split_s: bool = False, split_u: bool = False,
                split_w: bool = False, split_intra: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """q, k [L, H, K] (normalised, fp32 in the kernel), v [L, H, V] (bf16 values), g [L, H, K]
    (natural log decays), beta [L, H], h0 [H, K, V] (the stored initial state's values).

    The template's precision options (#defines of the same names, upper case with KDA_): the
    state's bf16 copy as hi + lo halves (`split_s`), U likewise (`split_u`), w and the decayed q
    (the B operands multiplying the state) likewise (`split_w`), and the intra-chunk products
    (A, Aqk from split operands, a split T) (`split_intra`). A split product is two or three
    mma.sync instead of one."""
    f32 = np.float32
    L, H, K = q.shape
    V = v.shape[-1]
    S = h0.astype(f32)                                                   # [H, K, V]
    o = np.zeros((L, H, V), dtype=np.float64)
    strict = np.tril(np.ones((CHUNK, CHUNK), dtype=bool), -1)
    incl = np.tril(np.ones((CHUNK, CHUNK), dtype=bool), 0)
    for t0 in range(0, L, CHUNK):
        n = min(CHUNK, L - t0)

        def block(x, width):                                            # [H, 16, width], zero past the end
            out = np.zeros((H, CHUNK, width), dtype=f32)
            out[:, :n] = x[t0:t0 + n].transpose(1, 0, 2)
            return out

        qn = block(q, K) * f32(scale)
        kn = block(k, K)
        vb = _bf(block(v, V))
        G = np.cumsum(block(g * LOG2E, K), axis=1, dtype=f32)           # log2 units, fp32 sums
        bb = np.zeros((H, CHUNK), dtype=f32)
        bb[:, :n] = beta[t0:t0 + n].T
        Gm, Gl = G[:, MID:MID + 1], G[:, CHUNK - 1:CHUNK]
        sw = _split if split_w else _bf
        si = _split if split_intra else _bf
        qd, kd = sw(qn * np.exp2(G)), _bf(kn * np.exp2(G))
        qp, kp, km = si(qn * np.exp2(G - Gm)), si(kn * np.exp2(G - Gm)), si(kn * np.exp2(Gm - G))
        kr = _bf(kn * np.exp2(Gl - G))
        A = np.where(strict, bb[:, :, None] * (kp @ km.transpose(0, 2, 1)), f32(0))
        Aqk = si(np.where(incl, qp @ km.transpose(0, 2, 1), f32(0)))
        X = np.zeros((H, CHUNK, CHUNK), dtype=f32)
        for i in range(CHUNK):
            X[:, i] = -(A[:, i, :i, None] * X[:, :i]).sum(axis=1)
            X[:, i, i] += bb[:, i]
        T = si(X)
        w = sw(T @ kd)
        Sb = (_split if split_s else _bf)(S)
        U = (T @ vb) - w @ Sb
        Ub = (_split if split_u else _bf)(U)
        o[t0:t0 + n] = _bf(qd @ Sb + Aqk @ Ub)[:, :n].transpose(1, 0, 2)
        S = np.exp2(Gl[:, 0, :])[:, :, None] * S + kr.transpose(0, 2, 1) @ Ub
    return o, dtypes.round_trip(S.astype(np.float64), state_dtype)


def sequence_order(lens, order: str = "index", max_n: int = 1024) -> list[int]:
    """The sequence grid row y runs, for every y: the index order, or the longest first (ties:
    the lower index first); above `max_n` sequences always the index order."""
    lens = [int(n) for n in lens]
    if order == "index" or len(lens) > max_n:
        return list(range(len(lens)))
    if order != "longest_first":
        raise ValueError(f"unknown sequence order {order!r}; use 'index' or 'longest_first'")
    return sorted(range(len(lens)), key=lambda i: (-lens[i], i))


def wave_makespan(lens, H: int, order: str = "index", sms: int = 132, split_v: int = 1, per_sm: int = 1) -> int:
    """Token-steps on the busiest slot when the CTAs of grid (H x split_v, N) start in linear order
    (head and V slice fastest) on whichever of `sms` x `per_sm` slots frees first (`per_sm` CTAs
    resident per SM), each costing its sequence's length: list scheduling. Every V slice of a
    (head, sequence) walks all of the sequence's chunks, so split_v multiplies the CTAs, not
    shortens them. Its lower bound is max(longest sequence, total tokens x H x split_v / slots)."""
    import heapq  # noqa: PLC0415

    free = [0] * (int(sms) * int(per_sm))
    for n in sequence_order(lens, order):
        for _ in range(int(H) * int(split_v)):
            t = heapq.heappop(free)
            heapq.heappush(free, t + int(lens[n]))
    return max(free)


def rec_grid(lens, H: int, split_v: int = 1, order: str = "index") -> list[tuple[int, int, int]]:
    """(head, V slice, sequence) of every kda_rec CTA in linear launch order (blockIdx.x = h s +
    slice fastest, then blockIdx.y's sequence in `order`): the specification of template.cu's
    kda_rec_body (h = blockIdx.x / s, slice = blockIdx.x % s, sequence = kda_sequence_of(y))."""
    seqs = sequence_order(lens, order)
    return [(x // split_v, x % split_v, seqs[y]) for y in range(len(lens)) for x in range(int(H) * int(split_v))]


#: the H200's per-SM limits (sm_90): registers, shared memory (228 KB, 1 KB reserved per CTA), warps
SM_REGISTERS, SM_SHARED_BYTES, SM_CTA_RESERVED_BYTES, SM_WARPS, SMS = 65536, 233472, 1024, 64, 132


def resident_ctas(threads: int, registers: int, shared_bytes: int) -> int:
    """CTAs of one kernel an SM holds at once: registers (per warp, in units of 256 = 8 a thread),
    shared memory (plus the 1 KB the runtime reserves per CTA) and warps, whichever binds first."""
    warps = -(-int(threads) // 32)
    regs_per_warp = -(-int(registers) // 8) * 8 * 32
    by_regs = SM_REGISTERS // (regs_per_warp * warps)
    by_smem = SM_SHARED_BYTES // (int(shared_bytes) + SM_CTA_RESERVED_BYTES)
    return max(0, min(by_regs, by_smem, SM_WARPS // warps))


#: kda_rec_bf16's chunk loop per warp (nvcc 13.0, sm_90a SASS, every branch taken; kernels/kda/README.md
#: "The V split"): instructions and HMMA.16816 for rec_v_split = 1, 2, 4. The P8 part is the same
#: code for every s (221-233 instructions, 52 HMMA); the loads grow with s (5, 8, 15 LDGSTS a thread:
#: every CTA loads the whole record with 256 / s threads).
REC_LOOP_SASS = {1: (347, 52), 2: (350, 52), 4: (393, 52)}
#: cycles of an SM sub-partition per HMMA.16816.F32.BF16 at mma.sync's rate on Hopper (~500 dense
#: TFLOP/s at 132 SMs x 4 SMSPs x ~1.8 GHz: ~8 cycles)
HMMA_CYCLES = 8
CLOCK_GHZ = 1.98


def rec_chunk_us(t_lat_us: float, warps_per_sm: int, split_v: int = 1) -> float:
    """kda_rec's time per chunk on an SM holding `warps_per_sm` of its warps: the larger of the
    latency floor `t_lat_us` (one warp's dependent chain through P8 and the barrier: the same
    code for every s, so the same floor) and the busiest SM sub-partition's issue time, its warps
    (warps_per_sm / 4, rounded up) times max(loop instructions, HMMA x HMMA_CYCLES) each."""
    ins, hmma = REC_LOOP_SASS[int(split_v)]
    issue_us = -(-int(warps_per_sm) // 4) * max(ins, hmma * HMMA_CYCLES) / (CLOCK_GHZ * 1000.0)
    return max(float(t_lat_us), issue_us)


def split_time_ms(lens, H: int, t_lat_us: float, k1_ms: float, *, split_v: int = 1, resident: int = 1,
                  order: str = "index") -> float:
    """The split pair's modelled time: kda_prep (`k1_ms`, the same for every split_v) + the busiest
    slot's chunks x kda_rec's time per chunk (rec_chunk_us). `resident`: kda_rec CTAs an SM holds
    (resident_ctas of its registers and shared memory); a launch with fewer CTAs than that many
    slots spreads them, min(resident, CTAs / SMs rounded up) per SM."""
    ctas = int(H) * int(split_v) * len(lens)
    per_sm = max(1, min(int(resident), -(-ctas // SMS)))
    steps = wave_makespan(lens, H, order, SMS, split_v, per_sm)
    t_chunk = rec_chunk_us(t_lat_us, per_sm * (8 // int(split_v)), split_v)
    return k1_ms + steps / CHUNK * t_chunk / 1000.0


def slot_schedule(lens, H: int, order: str = "index", sms: int = SMS, split_v: int = 1, per_sm: int = 1) -> tuple[int, int]:
    """wave_makespan's list schedule, and how many CTAs the busiest slot ran: (token-steps, CTAs) of
    the slot with the most token-steps (of those, the most CTAs)."""
    import heapq

    free = [(0, 0)] * (int(sms) * int(per_sm))
    for n in sequence_order(lens, order):
        for _ in range(int(H) * int(split_v)):
            t, c = heapq.heappop(free)
            heapq.heappush(free, (t + int(lens[n]), c + 1))
    return max(free)


#: kda_rec CTAs an SM holds per rec_v_split (resident_ctas of REC_REGISTERS and family.rec_smem_bytes,
#: all-bf16: 140 / 156 / 159 registers, 67,072 / 56,832 / 51,712 bytes)
REC_RESIDENT = {1: 1, 2: 3, 4: 4}
#: the fitted model of the split pair (session 13; `fit_split_model` on results/archive/session13/kda_fwd_h200.json's
#: split-bf16 and split-bf16-v2 times, 12 of them, 4 parameters, every residual within 2.5 %):
#: kda_prep costs `prep_us` per (slot, head) CTA of the whole GPU (x 513 slots = 9.0 us a head; 3
#: CTAs per SM each living ~6.9 us); a kda_rec chunk takes `a_us + b_us w` on an SM whose busiest
#: sub-partition holds w of kda_rec's warps (w = resident CTAs x warps per CTA / 4: one warp's P8
#: issue and pipe time b: 683 cycles, 52 HMMA.16816 at 13.1 cycles each, about mma.sync's rate on
#: Hopper; a floor a that no w hides); each kda_rec CTA costs `cta_us` once (state
#: in and out, the pipeline's fill and drain, the wave's tail).
SPLIT_FIT = {"prep_us": 0.0175, "a_us": 0.327, "b_us": 0.345, "cta_us": 14.9}
#: what SPLIT_FIT was fitted on: results/archive/session13/kda_fwd_h200.json (session 13, seed 1181474535), ms per
#: scenario for split-bf16 (rec_v_split 1) and split-bf16-v2 (2), the six scenarios in the table's order
SESSION13_MS = {
    "fixed/H96": (1.394, 1.397), "mixed/H96": (1.380, 1.401), "uniform/H96": (1.348, 1.289),
    "fixed/H64": (1.116, 0.926), "mixed/H64": (0.994, 1.015), "uniform/H64": (0.904, 0.869),
}


#: PREDICTIONS (session 13, before any device run): kda_prep's cost per CTA relative to v3's for gene
#: prep (v5), as (low, central, high). Model: v3's prep CTA lives 3 x 132 x prep_us = 6.9 us at 3
#: per SM; the lean prep takes ~1 DRAM round trip (beta, ~0.7 us) and ~0.3-0.6 us of L2 trips
#: (dt_bias / A_log before the loads; the binary search, 3 reads at N = 6-8) off it: 0.80-0.87x as
#: long. Its issue time (SASS, nvcc 13.0: ~7.9k warp instructions a CTA with P2 and P4 in bf16
#: pairs, against v3's ~10.1k; / 4 sub-partitions: ~1.0 us of an SM, 0.43x of v3's 2.31 us per CTA
#: per SM; estimates) floors it. lean: 4 per SM, life-bound 0.75 x (0.80-0.87) = 0.60-0.65, with
#: the issue contention that more CTAs bring: 0.60-0.78; compact: 5 per SM, life-bound 0.48-0.52,
#: issue floor 0.43: 0.48-0.68.
#: tight (v8, session 15, before any device run): compact's measured scale, 0.66-0.67 of v3's
#: (kda_prep_probe, sessions 14 and 15: 0.574-0.576 / 0.859-0.889 ms at H96), times its CTA's life
#: at 6 per SM over 5: latency-bound (v7's persistent prep at 3 and 2 per SM, totals 1.6-2.2x
#: compact's prep: the life about constant) 5 / 6 = 0.83, the L(p) model's 0.94 at the other end
#: (README "v8"); central 0.88 (P2's extra barrier, ~1 % of the life, counted there): 0.56-0.63.
PREP_SCALE_PREDICTED = {"v3": (1.0, 1.0, 1.0), "lean": (0.60, 0.68, 0.78), "compact": (0.48, 0.56, 0.68),
                        "tight": (0.56, 0.59, 0.63)}


def split_fit_terms(lens, H: int, split_v: int = 1, order: str = "index",
                    rec_resident: int | None = None) -> tuple[float, float, float, float]:
    """The fitted model's regressors for one (scenario, split_v): (kda_prep CTAs / 1000, the busiest
    slot's chunks / 1000, the same times w, its kda_rec CTAs / 1000); time in ms = their dot
    product with (prep_us, a_us, b_us, cta_us). `rec_resident`: kda_rec CTAs an SM (default
    REC_RESIDENT[split_v]; v9's rec_min_blocks raises it)."""
    ctas = int(H) * int(split_v) * len(lens)
    resident = REC_RESIDENT[int(split_v)] if rec_resident is None else int(rec_resident)
    per_sm = max(1, min(resident, -(-ctas // SMS)))
    steps, busiest = slot_schedule(lens, H, order, SMS, split_v, per_sm)
    w = -(-per_sm * (8 // int(split_v)) // 4)
    slots = sum(int(x) for x in lens) // CHUNK + len(lens)
    chunks = steps / CHUNK
    return int(H) * slots / 1000.0, chunks / 1000.0, chunks * w / 1000.0, busiest / 1000.0


def split_fit_ms(lens, H: int, split_v: int = 1, *, prep_scale: float = 1.0, order: str = "index",
                 fit: dict | None = None, rec_resident: int | None = None) -> tuple[float, float]:
    """(kda_prep ms, kda_rec ms) by the fitted model; `prep_scale` multiplies kda_prep's cost per
    CTA (a prediction for a different kda_prep); `rec_resident` as split_fit_terms'."""
    f = SPLIT_FIT if fit is None else fit
    x = split_fit_terms(lens, H, split_v, order, rec_resident)
    return prep_scale * f["prep_us"] * x[0], f["a_us"] * x[1] + f["b_us"] * x[2] + f["cta_us"] * x[3]


def fit_split_model(rows) -> dict:
    """Least squares of SPLIT_FIT's four parameters on rows (lens, H, split_v, measured ms)."""
    X = np.array([split_fit_terms(lens, H, s) for lens, H, s, _ in rows])
    y = np.array([float(t) for *_, t in rows])
    p = np.linalg.lstsq(X, y, rcond=None)[0]
    return dict(zip(("prep_us", "a_us", "b_us", "cta_us"), (float(v) for v in p)))


def gmma_canonical_offset(major: str, n: int, k: int, lbo: int, sbo: int) -> int:
    """Byte offset from a wgmma descriptor's start address of element (n, k) of a bf16 B operand in
    the no-swizzle canonical layout (PTX ISA, "Canonical Layouts", T = 8 bf16 per 16 bytes):
    K-major ((8, m), (T, 2k)) : ((T, SBO), (1, LBO)), a core matrix being 8 rows n of 16 bytes along k;
    MN-major ((T, 1, m), (8, k)) : ((1, T, SBO), (T, LBO)), 8 rows k of 16 bytes along n. The
    specification template.cu's record placement (kda_gmma_piece) and its strides are tested against."""
    if major == "K":
        return (n % 8) * 16 + (n // 8) * sbo + (k % 8) * 2 + (k // 8) * lbo
    if major == "MN":
        return (n % 8) * 2 + (n // 8) * sbo + (k % 8) * 16 + (k // 8) * lbo
    raise ValueError(f"major must be 'K' or 'MN', got {major!r}")


def _cute(shape, stride, i: int) -> int:
    """A CuTe layout (nested shape : stride tuples) at flat index i (colexicographic)."""
    if isinstance(shape, int):
        return (i % shape) * stride
    out = 0
    for sh, st in zip(shape, stride):
        size = int(np.prod([sh] if isinstance(sh, int) else _flat(sh)))
        out += _cute(sh, st, i % size)
        i //= size
    return out


def _flat(t):
    return [t] if isinstance(t, int) else [x for y in t for x in _flat(y)]


def wgmma_fragment(operand: str, thread: int, value: int, n: int = 16) -> tuple[int, int]:
    """(row, column) of register value `value` of warpgroup thread `thread` (0..127) for a bf16
    wgmma.m64nNk16: operand "A" (m64k16 from registers: 8 values, 4 registers) or "D" (m64nN fp32:
    N / 2 values), by CuTe's ALayout_64x16 and CLayout_64xN (thread (4, 8, 4) : (128, 1, 16), values
    (2, 2, N / 8) : (64, 8, 512) over the column-major (64, K or N) index m + 64 col)."""
    vals = (2, 2, 2) if operand == "A" else (2, 2, n // 8)
    off = _cute(((4, 8, 4), vals), ((128, 1, 16), (64, 8, 512)), int(thread) + 128 * int(value))
    return off % 64, off // 64


def mma_sync_fragment(operand: str, lane: int, value: int) -> tuple[int, int]:
    """(row, column) of value `value` of lane `lane` for mma.sync.m16n8k16 (PTX ISA): "A" (m16k16 bf16,
    8 values in 4 registers: row g + 8 (register & 1), column 2 t + (value & 1) + 8 (register >> 1)) or
    "C" (m16n8 fp32, 4 values: row g + 8 (value >> 1), column 2 t + (value & 1)), g = lane / 4, t = lane % 4."""
    g, t = int(lane) >> 2, int(lane) & 3
    if operand == "A":
        r = int(value) >> 1
        return g + 8 * (r & 1), 2 * t + (int(value) & 1) + 8 * (r >> 1)
    return g + 8 * (int(value) >> 1), 2 * t + (int(value) & 1)


#: PREDICTIONS (session 14, before any device run) for rec_mma = wgmma (v6): the fitted model with
#: b = kda_rec's cost a warp-chunk on the busiest sub-partition at wgmma's rate instead of mma.sync's:
#: 52 m16n8k16-equivalents (18 m64n16k16 + 1 m64n128k16 a warpgroup, per warp) at 8-10 cycles
#: (the tensor cores' peak is ~4.3 cycles an m16n8k16 per sub-partition at 1.98 GHz; N = 16 tiles
#: and A from registers are assumed to reach half of it or less), 1.98 GHz: 0.21-0.26 us (0.345
#: fitted for mma.sync at 13.1 cycles). a, cta_us and the residency (150 registers: 1 CTA per SM at
#: rec_v_split 1, 3 at 2, as mma.sync's) unchanged; kda_prep by PREP_SCALE_PREDICTED.
WGMMA_B_US_PREDICTED = (0.21, 0.235, 0.26)


def wgmma_predicted_ms(lens, H: int, split_v: int, prep: str = "compact") -> tuple[float, float, float]:
    """(low, central, high) ms of a wgmma genome by split_fit_ms: b from WGMMA_B_US_PREDICTED, kda_prep
    at PREP_SCALE_PREDICTED[prep] (low with low, central with central, high with high)."""
    out = []
    for b, scale in zip(WGMMA_B_US_PREDICTED, PREP_SCALE_PREDICTED[prep]):
        out.append(sum(split_fit_ms(lens, H, split_v, prep_scale=scale, fit=dict(SPLIT_FIT, b_us=b))))
    return tuple(out)


def workspace_slots(lens) -> list[list[int]]:
    """The split pair's workspace slot of every chunk, per sequence (the specification of
    template.cu's slot map, which kda_slot_sequence inverts): chunk c of sequence n is slot
    cu[n] // 16 + n + c, all distinct and below T // 16 + N (family.workspace_slots)."""
    out, start = [], 0
    for n, length in enumerate(int(x) for x in lens):
        base = start // CHUNK + n
        out.append(list(range(base, base + -(-length // CHUNK))))
        start += length
    return out


#: the compact kda_prep's time alone (ms), measured on the H200 in session 14 (results/archive/session14/
#: callD/kda_prep_probe.json, split-bf16-v2-compact's kda_prep, 5 CTAs per SM, L2 flushed, median of 25):
#: what the v7 prediction scales to prep_ctas_per_sm
PREP_COMPACT_MS = {"fixed/H96": 0.574, "mixed/H96": 0.571, "uniform/H96": 0.561,
                   "fixed/H64": 0.378, "mixed/H64": 0.391, "uniform/H64": 0.395}
#: PREDICTIONS (session 14, before any device run) for prep_overlap = pdl (v7): a kda_prep item's time
#: per SM at p CTAs per SM relative to 5 (the compact prep as measured), (low, central, high). A CTA's
#: item lives L(p) = L0 + p c; fitted to the lean prep at 4 per SM (0.621-0.643 ms, 1.64 us an item per
#: SM) and the compact at 5 (0.561-0.574 ms, 1.50 us): L0 = 2.8 us of latency, c = 0.94 us of issue
#: per item (the README's SASS estimate of ~1.0 us): central (L0 / p + c) / (L0 / 5 + c). Low: the
#: per-SM rate of 5 CTAs held at p (issue-bound: the persistent loop also drops the CTA launches);
#: high: latency-bound, 5 / p.
PREP_ISSUE_US, PREP_LATENCY_US = 0.94, 2.8


def prep_item_factor(p: int) -> tuple[float, float, float]:
    """(low, central, high) kda_prep time per item per SM at p CTAs per SM over the measured 5's."""
    central = (PREP_LATENCY_US / p + PREP_ISSUE_US) / (PREP_LATENCY_US / 5 + PREP_ISSUE_US)
    return 1.0, central, 5.0 / p


def overlap_time_ms(lens, H: int, split_v: int, prep_ctas: int, prep_ms: float, beside: int, *,
                    order: str = "index", fit: dict | None = None, launch_us: float = 5.0) -> dict:
    """The v7 launch sequence by a fluid model of one SM type (132 of them):

    * kda_prep: P = min(items, prep_ctas x 132) persistent CTAs, items slot-major in rounds of P, an
      item's round ending at (round + 1) x life; life = prep_ctas x the per-SM item time (prep_ms
      measured or scaled, x 132 / items) x sigma, sigma = max(1, f_prep + f_rec): the issue the two
      kernels ask of a sub-partition (f_prep = PREP_ISSUE_US / the per-SM item time; f_rec = b w /
      (a + b w), w the kda_rec warps per sub-partition beside it); when they ask more than it has,
      both stretch.
    * kda_rec: CTAs in launch order (rec_grid) list-scheduled on 132 x `beside` slots while kda_prep
      runs and 132 x min(REC_RESIDENT, what is left / 132) after; each pays cta_us once, then chunk c
      starts when chunk c - 1 is done and chunk c + 2's flag is set (template.cu's wait), taking
      (a + b w) sigma while kda_prep runs and a + b w' after (SPLIT_FIT).

    Returns {"total_ms", "prep_ms", "rec_alone_ms"} (rec_alone_ms: the same schedule with kda_prep
    finished before: the non-overlapped kda_rec, which checks the model against the measured one)."""
    import heapq  # noqa: PLC0415

    f = SPLIT_FIT if fit is None else fit
    a, b, cta = f["a_us"], f["b_us"], f["cta_us"]
    lens = [int(x) for x in lens]
    H, s = int(H), int(split_v)
    slots = sum(lens) // CHUNK + len(lens)
    items = slots * H
    P = min(items, int(prep_ctas) * SMS)
    per_sm_item = float(prep_ms) * 1000.0 * SMS / items
    warps = 8 // s
    w_dur = -(-int(beside) * warps // 4)
    f_rec = b * w_dur / (a + b * w_dur)
    sigma = max(1.0, min(1.0, PREP_ISSUE_US / per_sm_item) + f_rec)
    life = per_sm_item * P / SMS * sigma
    prep_end = -(-items // P) * life
    seq_slots = workspace_slots(lens)
    grid = rec_grid(lens, H, s, order)

    def run(t_end: float) -> float:
        ctas = len(grid)
        after = max(1, min(REC_RESIDENT[s], -(-ctas // SMS)))
        t_after = a + b * -(-after * warps // 4)
        running: list[float] = []
        t, last = 0.0, 0.0
        for i, (h, _, n) in enumerate(grid):
            cap = lambda x: SMS * (int(beside) if x < t_end else max(after, 1))    # noqa: E731
            t = last
            while True:
                while running and running[0] <= t:
                    heapq.heappop(running)
                if len(running) < cap(t):
                    break
                nxt = running[0]
                t = min(nxt, t_end) if t < t_end < nxt else nxt
            last = t
            sl = seq_slots[n]
            done = t + cta
            for c in range(len(sl)):
                flag = (((sl[min(c + 2, len(sl) - 1)] * H + h) // P) + 1) * life if t_end > 0 else 0.0
                start = max(done, flag)
                done = start + ((a + b * w_dur) * sigma if start < t_end else t_after)
            heapq.heappush(running, done)
        return max(running) if running else 0.0

    total = run(prep_end)
    return {"total_ms": (max(total, prep_end) + launch_us) / 1000.0, "prep_ms": prep_end / 1000.0,
            "rec_alone_ms": run(0.0) / 1000.0}


__all__ = ["CHUNK", "REC_LOOP_SASS", "PREP_SCALE_PREDICTED", "WGMMA_B_US_PREDICTED", "gmma_canonical_offset",
           "mma_sync_fragment", "wgmma_fragment", "wgmma_predicted_ms", "REC_RESIDENT", "SESSION13_MS", "SPLIT_FIT", "chunk_model", "fit_split_model", "rec_chunk_us", "rec_grid",
           "resident_ctas", "sequence_order", "slot_schedule", "split_fit_ms", "split_fit_terms", "split_time_ms",
           "wave_makespan", "workspace_slots", "PREP_COMPACT_MS", "overlap_time_ms", "prep_item_factor"]
