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
is where the split pair (gene `kernels`, v3) keeps each chunk's record.
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


def wave_makespan(lens, H: int, order: str = "index", sms: int = 132) -> int:
    """Token-steps on the busiest SM when the CTAs of grid (H, N) start in linear order (head
    fastest) on whichever of `sms` SMs frees first, one CTA per SM, each costing its sequence's
    length: list scheduling. Its lower bound is max(longest sequence, total tokens x H / sms)."""
    import heapq  # noqa: PLC0415

    free = [0] * int(sms)
    for n in sequence_order(lens, order):
        for _ in range(int(H)):
            t = heapq.heappop(free)
            heapq.heappush(free, t + int(lens[n]))
    return max(free)


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


__all__ = ["CHUNK", "chunk_model", "sequence_order", "wave_makespan", "workspace_slots"]
