"""KDA's baselines in the judge: FlashKDA (CUTLASS, built from a checkout) and fla's chunk_kda (Triton).

Both run on the judge's device inputs (cupy arrays, viewed as torch tensors without a copy) and
return results the judge checks against the float64 reference in every job (`BaselineRun`).
What each adapter does outside the timed call: views, the int64 cu_seqlens both libraries want
(the case's cu_seqlens buffer decoded once), FlashKDA's workspace and the output buffers. The
timed call is the library's own entry point, nothing else.

- "flashkda": `fwd` of FlashKDA's extension (kernels/kda/peers.py builds it), i.e. what its
  Python `flash_kda.fwd` calls, with the workspace allocated once here instead of at every call.
  FlashKDA always L2-normalises q and k, computes the lower-bound gate and beta's sigmoid in its
  kernel and stores the state as [V, K] with equal initial and final dtypes; other cases are
  unsupported (None). A single sequence is run without cu_seqlens (its batched path, as its
  benchmark does).
- "fla": `fla.ops.kda.chunk_kda` (pip fla-core), its Triton path: fla would dispatch to an
  installed flash_kda package under no_grad, so FLA_FLASH_KDA=0 (fla's documented opt-out) is set
  in this process when the baseline is prepared. fla wants an fp32 initial state and returns an
  fp32 final state: bf16-state cases are unsupported.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

import numpy as np

from fitness.family import Baseline, BaselineRun, Case, import_sibling
from fitness.family import importable as _has

_PEERS = import_sibling(__file__, "peers")


def baselines() -> list[Baseline]:
    return [
        Baseline("flashkda", _PEERS.flashkda_available, prepare_flashkda,
                 needs="FlashKDA built from a checkout with its CUTLASS (kernels/kda/peers.py says where)"),
        Baseline("fla", lambda: _has("torch") and _has("triton") and _has("fla"), prepare_fla,
                 needs="pip install fla-core"),
    ]


def flashkda_supports(case: Case) -> str:
    """'' when FlashKDA runs the case as it is, else why not."""
    p = case.params
    if (int(p.get("K", 128)), int(p.get("V", 128))) != (128, 128):
        return "FlashKDA needs K = V = 128"
    for flag, what in (("qk_l2norm", "q/k L2 norm"), ("gate_in_kernel", "gate"), ("beta_sigmoid", "beta sigmoid")):
        if not p[flag]:
            return f"FlashKDA always computes the {what} in its kernel"
    if p["layout"] != "vk":
        return "FlashKDA stores the state as [V, K]"
    if not -5.0 <= float(p["lower_bound"]) <= 0.0:
        return "FlashKDA needs lower_bound in [-5, 0]"
    return ""


def fla_supports(case: Case) -> str:
    p = case.params
    if p["state"] != "fp32" and (p["initial"] or p["final"]):
        return "fla's chunk_kda takes and returns fp32 states only"
    if p["gate_in_kernel"] and not -5.0 <= float(p["lower_bound"]) < 0.0:
        return "fla's safe gate needs lower_bound in [-5, 0)"
    return ""


# -- adapters ----------------------------------------------------------------------------------
def _torch():
    import torch  # noqa: PLC0415 - lazy: this module imports without torch
    return torch


def _view(arr: Any, dtype: str):
    """A zero-copy torch view of a device array; bf16 bits become a bfloat16 tensor."""
    torch = _torch()
    if dtype == "bf16":
        return torch.from_dlpack(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_dlpack(arr)


def _storage(t: Any) -> Any:
    """A result tensor in the judge's storage form (bf16 as 16-bit integers)."""
    torch = _torch()
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


class _Views:
    """The case's device inputs as torch tensors, in the [1, T, H, D] shapes both libraries take."""

    def __init__(self, case: Case, dev: Mapping[str, Any]):
        torch = _torch()
        p = case.params
        self.lens = tuple(int(n) for n in p["lens"])
        self.T, self.H, self.N = sum(self.lens), int(p["H"]), len(self.lens)
        self.K, self.V = int(p.get("K", 128)), int(p.get("V", 128))
        torch.set_grad_enabled(False)
        q = _view(dev["q"], "bf16")
        if q.is_cuda:
            torch.cuda.set_device(q.device)
        T, H = self.T, self.H
        self.q = q.view(1, T, H, self.K)
        self.k = _view(dev["k"], "bf16").view(1, T, H, self.K)
        self.v = _view(dev["v"], "bf16").view(1, T, H, self.V)
        self.g = _view(dev["g"], "bf16" if p["gate_in_kernel"] else "fp32").view(1, T, H, self.K)
        self.beta = _view(dev["beta"], "bf16").view(1, T, H)
        self.A_log = _view(dev["A_log"], "fp32") if "A_log" in dev else None
        self.dt_bias = _view(dev["dt_bias"], "fp32") if "dt_bias" in dev else None
        self.h0 = _view(dev["initial_state"], p["state"]) if "initial_state" in dev else None
        cu = np.concatenate([[0], np.cumsum(self.lens)]).astype(np.int64)
        self.cu_seqlens = torch.tensor(cu, dtype=torch.int64, device=q.device)
        self.device = q.device


def _outputs(case: Case) -> Callable[[Any], dict[str, Any]]:
    p = case.params
    T, H, V = sum(int(n) for n in p["lens"]), int(p["H"]), int(p.get("V", 128))

    def outputs(result: Any) -> dict[str, Any]:
        o, ht = result
        out = {"o": _storage(o.reshape(T, H, V))}
        if p["final"] and ht is not None:
            out["final_state"] = _storage(ht)
        return out

    return outputs


def prepare_flashkda(case: Case, dev: Mapping[str, Any]) -> BaselineRun | None:
    if flashkda_supports(case):
        return None
    torch = _torch()
    mod = _PEERS.flashkda()                       # builds at the first call in a process (minutes)
    x = _Views(case, dev)
    p = case.params
    state_dtype = torch.float32 if p["state"] == "fp32" else torch.bfloat16
    out = torch.empty_like(x.v)
    ht = torch.empty((x.N, x.H, x.V, x.K), dtype=state_dtype, device=x.device) if p["final"] else None
    cu = x.cu_seqlens if x.N > 1 else None
    workspace = torch.empty(int(mod.get_workspace_size(x.T, x.H, x.N)), dtype=torch.uint8, device=x.device)
    scale, lb = float(p["scale"]), float(p["lower_bound"])
    dt_bias = x.dt_bias.view(x.H, x.K)

    def run():
        mod.fwd(x.q, x.k, x.v, x.g, x.beta, scale, out, workspace, x.A_log, dt_bias, lb,
                initial_state=x.h0, final_state=ht, cu_seqlens=cu)
        return out, ht

    return BaselineRun(run, _outputs(case))


def prepare_fla(case: Case, dev: Mapping[str, Any]) -> BaselineRun | None:
    if fla_supports(case):
        return None
    os.environ["FLA_FLASH_KDA"] = "0"            # the Triton path, never fla's FlashKDA dispatch
    from fla.ops.kda import chunk_kda  # noqa: PLC0415
    torch = _torch()
    x = _Views(case, dev)
    p = case.params
    kwargs: dict[str, Any] = dict(
        scale=float(p["scale"]), initial_state=x.h0, output_final_state=bool(p["final"]),
        use_qk_l2norm_in_kernel=bool(p["qk_l2norm"]), use_beta_sigmoid_in_kernel=bool(p["beta_sigmoid"]),
        state_v_first=p["layout"] == "vk", cu_seqlens=x.cu_seqlens if x.N > 1 else None)
    if p["gate_in_kernel"]:
        kwargs.update(use_gate_in_kernel=True, safe_gate=True, lower_bound=float(p["lower_bound"]),
                      A_log=x.A_log, dt_bias=x.dt_bias.reshape(-1))

    def run():
        with torch.no_grad():
            o, ht = chunk_kda(x.q, x.k, x.v, x.g, x.beta, **kwargs)
        return o, ht

    return BaselineRun(run, _outputs(case))


__all__ = ["baselines", "fla_supports", "flashkda_supports", "prepare_fla", "prepare_flashkda"]
