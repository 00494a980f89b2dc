"""Kimi Delta Attention forward in float64: the recurrence and its chunked (WY/UT) form.

Per head, with the state S in [K, V] layout (fla's default; FlashKDA stores S^T, [V, K]):

    S <- diag(exp g_t) S                         g_t: [K], log-space decay (<= 0)
    S <- S + beta_t k_t (v_t - S^T k_t)^T        the delta rule: beta_t in (0, 1) writes v_t at k_t
    o_t = scale * S^T q_t                        the state after step t's write

`recurrent` is that loop, token by token: the definition. `chunked` computes the same numbers in
chunks of C tokens, the way fast kernels do (fla's chunk_kda, FlashKDA): within a chunk the
writes form a unit lower-triangular system (the UT transform), solved here by forward
substitution in float64, and only the chunk-to-chunk state recurrence is sequential. The two
agree to ~1e-13 relative (tests/test_kda_reference.py); the chunked form is the one fast enough
for the benchmark scenarios (batched over heads and chunks; on the device through cupy).

Every function takes numpy or cupy float64 arrays (the array module is read off the inputs) and
works on ONE sequence, all heads at once: q, k [L, H, K], v [L, H, V], g [L, H, K],
beta [L, H], h0 [H, K, V]; it returns (o [L, H, V], final state [H, K, V]).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fitness.dtypes import array_module

#: the chunked form's factored decays exp(G_i - G_m) and exp(G_m - G_j) stay below e^MAX_SPAN, so
#: even the products it masks out (the j > i half) stay below e^700, inside float64 (e^709 ~ 8e307)
MAX_SPAN = 350.0
L2NORM_EPS = 1e-6          # fla's l2norm_fwd and FlashKDA: x / sqrt(sum x^2 + 1e-6)


def l2_normalize(x: Any, eps: float = L2NORM_EPS) -> Any:
    """x / sqrt(sum(x^2) + eps) over the last axis (use_qk_l2norm_in_kernel)."""
    xp = array_module(x)
    return x / xp.sqrt((x * x).sum(axis=-1, keepdims=True) + eps)


def sigmoid(x: Any) -> Any:
    """1 / (1 + exp(-x)) without overflow for large |x| (float64)."""
    xp = array_module(x)
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def lower_bound_gate(g_raw: Any, A_log: Any, dt_bias: Any, lower_bound: float) -> Any:
    """The in-kernel gate of FlashKDA and fla (use_gate_in_kernel with lower_bound, safe_gate):
    g = lower_bound * sigmoid(exp(A_log[h]) * (g_raw + dt_bias[h, :])), in [lower_bound, 0).
    g_raw [L, H, K], A_log [H], dt_bias [H, K]."""
    xp = array_module(g_raw)
    return float(lower_bound) * sigmoid(xp.exp(A_log)[None, :, None] * (g_raw + dt_bias[None, :, :]))


def recurrent(q: Any, k: Any, v: Any, g: Any, beta: Any, scale: float, h0: Any) -> tuple[Any, Any]:
    """The definition, one token at a time (all heads at once)."""
    xp = array_module(q)
    L, H, _ = q.shape
    S = xp.array(h0, dtype=xp.float64, copy=True)                 # [H, K, V]
    o = xp.empty((L, H, v.shape[-1]), dtype=xp.float64)
    for t in range(L):
        S *= xp.exp(g[t])[:, :, None]
        kt = k[t]                                                 # [H, K]
        pred = xp.einsum("hk,hkv->hv", kt, S)                     # S^T k_t
        S += (beta[t][:, None] * kt)[:, :, None] * (v[t] - pred)[:, None, :]
        o[t] = scale * xp.einsum("hk,hkv->hv", q[t], S)
    return o, S


def chunked(q: Any, k: Any, v: Any, g: Any, beta: Any, scale: float, h0: Any,
            chunk: int = 64) -> tuple[Any, Any]:
    """The chunked form. Within a chunk (cumulative decays G_i = g_1 + .. + g_i from its start,
    state S at its start):

        A[i, j]  = sum_d k_i[d] k_j[d] exp(G_i[d] - G_j[d])            j < i
        (I + diag(beta) A) U = diag(beta) (V - (exp(G) * K) S)          U: the writes (pseudo-values)
        o_i      = scale (exp(G_i) * q_i) S + scale sum_{j<=i} (q_i . k_j exp(G_i - G_j)) U_j
        S_next   = exp(G_C) * S + (exp(G_C - G) * K)^T U

    U = u - w S with u = T V and w = T (exp(G) * K), T = (I + diag(beta) A)^-1 diag(beta): both
    depend only on the chunk's own tokens, so they are computed for every chunk at once; only
    the state recurrence runs chunk after chunk. Padding to whole chunks uses k = v = q = 0,
    g = 0, beta = 0 (no write, no decay), so it changes nothing.

    The pair factors exp(G_i - G_j) are computed as exp(G_i - G_m) exp(G_m - G_j) around the
    chunk's middle row m (so the pairs are two matrix products); ValueError if a factor would
    overflow float64 (log decays summing to more than MAX_SPAN over half a chunk: use a smaller
    chunk or `recurrent`)."""
    xp = array_module(q)
    L, H, K = q.shape
    V = v.shape[-1]
    C = int(chunk)
    if C < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    n = -(-L // C)
    S = xp.array(h0, dtype=xp.float64, copy=True)
    if L == 0:
        return xp.empty((0, H, V), dtype=xp.float64), S

    def blocks(x: Any, width: int) -> Any:     # [L, H, width] -> [H, n, C, width], zero-padded
        pad = xp.zeros((n * C, H, width), dtype=xp.float64)
        pad[:L] = x
        return pad.reshape(n, C, H, width).transpose(2, 0, 1, 3)

    qb, kb, vb = blocks(q, K), blocks(k, K), blocks(v, V)
    G = xp.cumsum(blocks(g, K), axis=2)                          # [H, n, C, K]
    bb = blocks(beta.reshape(L, H, 1), 1)[..., 0]                # [H, n, C]
    ref = G[:, :, C // 2:C // 2 + 1, :]
    span = float(xp.abs(G - ref).max())
    if span > MAX_SPAN:
        raise ValueError(f"chunked KDA reference: decays span {span:.0f} > {MAX_SPAN:g} in log space within "
                         f"a chunk of {C}: use a smaller chunk or the recurrent reference")
    up, down = xp.exp(G - ref), xp.exp(ref - G)
    strict = xp.tril(xp.ones((C, C), dtype=bool), -1)
    incl = xp.tril(xp.ones((C, C), dtype=bool), 0)
    A = xp.where(strict, (kb * up) @ (kb * down).transpose(0, 1, 3, 2), 0.0)          # [H, n, C, C]
    Aqk = xp.where(incl, (qb * up) @ (kb * down).transpose(0, 1, 3, 2), 0.0) * scale
    eG = xp.exp(G)
    rhs = bb[..., None] * xp.concatenate([vb, eG * kb], axis=-1)                     # diag(beta) [V | e^G K]
    L_ = bb[..., None] * A                                                           # diag(beta) A, strictly lower
    X = forward_substitution(L_, rhs)
    u, w = X[..., :V], X[..., V:]
    qe = scale * eG * qb
    last = G[:, :, C - 1:C, :]                                                       # G_C per chunk [H, n, 1, K]
    kr = xp.exp(last - G) * kb
    decay = xp.exp(last[:, :, 0, :])                                                 # [H, n, K]
    o = xp.empty((H, n, C, V), dtype=xp.float64)
    for c in range(n):
        U = u[:, c] - w[:, c] @ S                                                    # [H, C, V]
        o[:, c] = qe[:, c] @ S + Aqk[:, c] @ U
        S = decay[:, c, :, None] * S + kr[:, c].transpose(0, 2, 1) @ U
    return o.transpose(1, 2, 0, 3).reshape(n * C, H, V)[:L], S


def forward_substitution(Lm: Any, rhs: Any) -> Any:
    """X with (I + Lm) X = rhs for strictly lower-triangular Lm [..., C, C] (the UT transform's
    inverse applied to rhs [..., C, W]), row by row: row i needs only rows < i."""
    xp = array_module(Lm)
    X = xp.array(rhs, dtype=xp.float64, copy=True)
    for i in range(1, Lm.shape[-1]):
        X[..., i:i + 1, :] -= Lm[..., i:i + 1, :i] @ X[..., :i, :]
    return X


def forward(q: Any, k: Any, v: Any, g: Any, beta: Any, scale: float, h0: Any, *, method: str = "chunked",
            chunk: int = 64) -> tuple[Any, Any]:
    """One sequence through `chunked` (default) or `recurrent`."""
    if method == "chunked":
        return chunked(q, k, v, g, beta, scale, h0, chunk=chunk)
    if method == "recurrent":
        return recurrent(q, k, v, g, beta, scale, h0)
    raise ValueError(f"unknown KDA reference method {method!r}; use 'chunked' or 'recurrent'")


def varlen(q: Any, k: Any, v: Any, g: Any, beta: Any, scale: float, h0: Any, cu_seqlens: Any, *,
           method: str = "chunked", chunk: int = 64) -> tuple[Any, Any]:
    """Every sequence of a packed batch: tokens cu_seqlens[i] .. cu_seqlens[i+1] are sequence i,
    which starts from h0[i] ([N, H, K, V]). Returns (o [T, H, V], final states [N, H, K, V]).

    Sequences of the same padded length (whole chunks; the exact length for `recurrent`) run as
    one batch, side by side as extra heads, each zero-padded at its end (no write, no decay: the
    padding changes nothing); a sequence of no tokens keeps its initial state."""
    xp = array_module(q)
    cu = [int(c) for c in np.asarray(cu_seqlens.get() if hasattr(cu_seqlens, "get") else cu_seqlens)]
    T, H, K = q.shape
    V = v.shape[-1]
    o = xp.empty((T, H, V), dtype=xp.float64)
    finals = xp.array(h0, dtype=xp.float64, copy=True)
    step = int(chunk) if method == "chunked" else 1
    groups: dict[int, list[int]] = {}
    for i, (a, b) in enumerate(zip(cu, cu[1:])):
        if b > a:
            groups.setdefault(-(-(b - a) // step) * step, []).append(i)
    for padded, members in groups.items():
        n = len(members)

        def stack(x: Any) -> Any:       # [padded, n * H, ...]: sequence j's heads at j*H .. j*H + H
            out = xp.zeros((padded, n) + tuple(x.shape[1:]), dtype=xp.float64)
            for j, i in enumerate(members):
                out[:cu[i + 1] - cu[i], j] = x[cu[i]:cu[i + 1]]
            return out.reshape((padded, n * H) + tuple(x.shape[2:]))

        og, sg = forward(stack(q), stack(k), stack(v), stack(g), stack(beta), scale,
                         finals[members].reshape(n * H, K, V), method=method, chunk=chunk)
        og = og.reshape(padded, n, H, V)
        sg = sg.reshape(n, H, K, V)
        for j, i in enumerate(members):
            o[cu[i]:cu[i + 1]] = og[:cu[i + 1] - cu[i], j]
            finals[i] = sg[j]
    return o, finals


__all__ = ["L2NORM_EPS", "MAX_SPAN", "chunked", "forward", "forward_substitution", "l2_normalize",
           "lower_bound_gate", "recurrent", "sigmoid", "varlen"]
