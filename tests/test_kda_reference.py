"""The KDA float64 references (kernels/kda/reference.py): the recurrence against a literal
one-head transcription and closed forms, the chunked (WY/UT) form against the recurrence."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.family import import_sibling
from fitness.family import KERNELS_DIR

ref = import_sibling(str(KERNELS_DIR / "kda" / "family.py"), "reference")


def _inputs(rng, L, H, K, V, *, decay="strong"):
    q = ref.l2_normalize(rng.standard_normal((L, H, K)))
    k = ref.l2_normalize(rng.standard_normal((L, H, K)))
    v = rng.standard_normal((L, H, V))
    if decay == "strong":
        g = ref.lower_bound_gate(rng.standard_normal((L, H, K)), rng.uniform(0, 1, H), rng.uniform(0, 1, (H, K)), -5.0)
    else:
        g = -rng.uniform(1e-4, 0.05, (L, H, K))
    beta = ref.sigmoid(rng.standard_normal((L, H)) + 1.0)
    h0 = rng.standard_normal((H, K, V))
    return q, k, v, g, beta, h0


def _rel(a, b):
    return float(np.sqrt(((a - b) ** 2).sum() / (b ** 2).sum()))


def literal(q, k, v, g, beta, scale, h0):
    """The definition for one head with explicit matrices and loops (no einsum, no batching)."""
    L, K = q.shape
    S = h0.copy()
    o = np.zeros((L, v.shape[1]))
    for t in range(L):
        S = np.diag(np.exp(g[t])) @ S
        S = S + beta[t] * np.outer(k[t], v[t] - S.T @ k[t])
        o[t] = scale * S.T @ q[t]
    return o, S


def test_recurrent_is_the_definition_head_by_head():
    rng = np.random.default_rng(1)
    q, k, v, g, beta, h0 = _inputs(rng, 23, 3, 8, 5)
    o, S = ref.recurrent(q, k, v, g, beta, 0.3, h0)
    for h in range(3):
        o_h, S_h = literal(q[:, h], k[:, h], v[:, h], g[:, h], beta[:, h], 0.3, h0[h])
        np.testing.assert_allclose(o[:, h], o_h, rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(S[h], S_h, rtol=1e-13, atol=1e-14)


def test_delta_rule_stores_values_at_orthonormal_keys():
    """No decay, beta = 1, orthonormal keys, S0 = 0: each write makes S^T k_i = v_i exactly, so a
    query equal to an earlier key reads back that key's value (times scale)."""
    rng = np.random.default_rng(2)
    K, V, L = 8, 3, 6
    basis, _ = np.linalg.qr(rng.standard_normal((K, K)))
    k = basis[:L].reshape(L, 1, K)
    v = rng.standard_normal((L, 1, V))
    q = np.stack([k[max(t - 2, 0)] for t in range(L)])           # reads the key written 2 steps earlier
    o, S = ref.recurrent(q, k, v, np.zeros((L, 1, K)), np.ones((L, 1)), 0.5, np.zeros((1, K, V)))
    for t in range(L):
        np.testing.assert_allclose(o[t, 0], 0.5 * v[max(t - 2, 0), 0], atol=1e-13)
    np.testing.assert_allclose(S[0].T @ k[:, 0].T, v[:, 0].T, atol=1e-13)


def test_without_writes_the_state_only_decays():
    rng = np.random.default_rng(3)
    q, k, v, g, _, h0 = _inputs(rng, 17, 2, 6, 4)
    o, S = ref.recurrent(q, k, v, g, np.zeros((17, 2)), 0.7, h0)
    G = np.cumsum(g, axis=0)                                     # [L, H, K]
    np.testing.assert_allclose(S, np.exp(G[-1])[:, :, None] * h0, rtol=1e-13)
    want = 0.7 * np.einsum("thk,hkv->thv", np.exp(G) * q, h0)
    np.testing.assert_allclose(o, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("chunk", [1, 5, 16, 32, 64])
@pytest.mark.parametrize("decay", ["strong", "weak"])
def test_chunked_equals_recurrent(chunk, decay):
    rng = np.random.default_rng(4)
    q, k, v, g, beta, h0 = _inputs(rng, 101, 2, 16, 8, decay=decay)       # 101: no multiple of any chunk
    o1, S1 = ref.recurrent(q, k, v, g, beta, 0.25, h0)
    o2, S2 = ref.chunked(q, k, v, g, beta, 0.25, h0, chunk=chunk)
    assert _rel(o2, o1) < 1e-12
    assert _rel(S2, S1) < 1e-12


def test_chunked_single_token_and_a_chunk_longer_than_the_sequence():
    rng = np.random.default_rng(5)
    q, k, v, g, beta, h0 = _inputs(rng, 1, 3, 8, 8)
    o1, S1 = ref.recurrent(q, k, v, g, beta, 0.1, h0)
    o2, S2 = ref.chunked(q, k, v, g, beta, 0.1, h0, chunk=64)
    assert _rel(o2, o1) < 1e-13 and _rel(S2, S1) < 1e-13


def test_chunked_refuses_decays_that_would_overflow():
    rng = np.random.default_rng(6)
    q, k, v, _, beta, h0 = _inputs(rng, 64, 1, 4, 4)
    g = np.full((64, 1, 4), -20.0)                   # 20 per token over half a chunk of 64: e^640
    with pytest.raises(ValueError, match="smaller chunk"):
        ref.chunked(q, k, v, g, beta, 0.5, h0, chunk=64)
    o1, _ = ref.recurrent(q, k, v, g, beta, 0.5, h0)
    o2, _ = ref.chunked(q, k, v, g, beta, 0.5, h0, chunk=16)   # a chunk of 16 spans 160: fine
    assert _rel(o2, o1) < 1e-12


def test_forward_substitution_solves_the_unit_lower_system():
    rng = np.random.default_rng(7)
    Lm = np.tril(rng.uniform(-1, 1, (3, 4, 9, 9)), -1)
    R = rng.standard_normal((3, 4, 9, 5))
    X = ref.forward_substitution(Lm, R)
    np.testing.assert_allclose(X + Lm @ X, R, atol=1e-12)


@pytest.mark.parametrize("method", ["chunked", "recurrent"])
def test_varlen_equals_sequences_run_one_by_one(method):
    rng = np.random.default_rng(8)
    lens = [7, 0, 33, 1, 33, 20]
    cu = np.concatenate([[0], np.cumsum(lens)])
    q, k, v, g, beta, _ = _inputs(rng, int(cu[-1]), 2, 8, 4)
    h0 = rng.standard_normal((len(lens), 2, 8, 4))
    o, S = ref.varlen(q, k, v, g, beta, 0.4, h0, cu, method=method, chunk=16)
    for i, (a, b) in enumerate(zip(cu, cu[1:])):
        oi, Si = ref.recurrent(q[a:b], k[a:b], v[a:b], g[a:b], beta[a:b], 0.4, h0[i])
        np.testing.assert_allclose(o[a:b], oi, rtol=1e-11, atol=1e-13)
        np.testing.assert_allclose(S[i], Si, rtol=1e-11, atol=1e-13)
    np.testing.assert_array_equal(S[1], h0[1])                  # the empty sequence keeps its state


def test_gate_and_activations():
    g = ref.lower_bound_gate(np.zeros((1, 2, 3)), np.zeros(2), np.zeros((2, 3)), -5.0)
    np.testing.assert_allclose(g, -2.5)                          # lower_bound * sigmoid(0)
    big = ref.lower_bound_gate(np.full((1, 1, 2), 800.0), np.zeros(1), np.zeros((1, 2)), -5.0)
    np.testing.assert_allclose(big, -5.0)
    assert ref.sigmoid(np.array([-800.0]))[0] == 0.0 and ref.sigmoid(np.array([800.0]))[0] == 1.0
    x = np.random.default_rng(9).standard_normal((4, 16))
    n = ref.l2_normalize(x)
    np.testing.assert_allclose((n * n).sum(-1), (x * x).sum(-1) / ((x * x).sum(-1) + 1e-6), rtol=1e-14)
