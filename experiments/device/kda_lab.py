"""Shared pieces of the KDA device scripts (kda_baselines.py, kda_fwd_table.py): lab tooling.

What both need and must do the same way: the versions a report records, the error figures of
an implementation's outputs (relative RMS vs float64 per output, the worst group of the
family's group test, within tolerance or not), float64 references made once per (scenario,
distribution) and shared by everything checked on those inputs, the interleaved timing of
callables outside the judge, and writing a report after every scenario (a call that runs out of
time still leaves its finished scenarios).
"""

from __future__ import annotations

import json
import platform
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from fitness import dtypes, verify
from fitness.family import import_sibling
from fitness.timing import LaunchShield, rotated

ROOT = Path(__file__).resolve().parents[2]
FAMILY_FILE = ROOT / "kernels" / "kda" / "family.py"
ERROR_KEYS = {"o": ("o_rel_rms", "o_row_rms"), "final_state": ("state_rel_rms", "state_group_rms")}


def versions() -> dict[str, Any]:
    """Python and package versions, FlashKDA's commit and whether its build was carried in."""
    out: dict[str, Any] = {"python": platform.python_version()}
    for dist in ("torch", "triton", "fla-core", "cupy-cuda13x", "cupy-cuda12x", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    peers = import_sibling(str(FAMILY_FILE), "peers")
    out["flashkda_commit"] = peers.commit()
    try:
        out["flashkda_prebuilt"] = str(peers.prebuilt()) if peers.prebuilt() else None
    except FileNotFoundError as exc:
        out["flashkda_prebuilt"] = f"missing: {exc}"
    cutlass = peers.cutlass_root()
    marker = Path(cutlass) / ".commit" if cutlass else None
    out["cutlass_commit"] = marker.read_text().strip() if marker and marker.is_file() else None
    return out


def check(xp: Any, case: Any, family: Any, outputs: Mapping[str, Any], refs: Mapping[str, Any]) -> dict[str, Any]:
    """Error figures of one implementation's outputs (storage form, any shape of the right size)
    against the float64 references: o_rel_rms / state_rel_rms (the judge's relative L2 test),
    o_row_rms / state_group_rms (the worst group of the family's group test), ok (every output
    within every tolerance) and the judge's messages for what is not."""
    _, outs = family.io(case)
    tols = family.tolerances(case)
    got: dict[str, Any] = {"ok": True}
    for name, value in outputs.items():
        if name not in outs or name not in refs:
            continue
        spec = outs[name]
        arr = xp.asarray(value)
        want = dtypes.storage_dtype(spec.dtype)
        arr = arr.view(want) if arr.dtype != want and arr.dtype.itemsize == want.itemsize else arr
        res = verify.check_output(arr.reshape(spec.shape), refs[name], tols[name], dtypes.canonical(spec.dtype),
                                  name=name)
        rel_key, group_key = ERROR_KEYS.get(name, (f"{name}_rel_rms", f"{name}_group_rms"))
        got[rel_key] = res.rel_l2
        got[group_key] = res.group_rel_l2
        got["ok"] = got["ok"] and bool(res.ok)
        if not res.ok:
            got.setdefault("messages", []).append(res.message)
    return got


def worst(checks: Mapping[str, Mapping[str, Any]], key: str) -> float | None:
    """The largest figure `key` over the distributions' checks (None when none has it)."""
    vals = [c.get(key) for c in checks.values() if c.get(key) is not None]
    return max(vals) if vals else None


class References:
    """Fresh inputs and their float64 references per (case, distribution), made once in a process
    and shared by every implementation checked on them (the chunked reference of fixed/H96 takes
    ~0.2 s on the H200 once cupy has compiled its kernels, ~2.8 s the first time)."""

    def __init__(self, backend: Any, family: Any, seed: int):
        self.backend, self.family, self.seed = backend, family, int(seed)
        self._made: dict[tuple[str, str], tuple[Any, Any]] = {}
        self.seconds: dict[tuple[str, str], float] = {}

    def get(self, case: Any, distribution: str) -> tuple[Any, Any]:
        """(device inputs, float64 references) of the case on that distribution."""
        key = (case.id, distribution)
        if key not in self._made:
            i = list(self.family.distributions).index(distribution)
            inputs = self.family.make_inputs(case, self.backend.device_rng(self.seed + 7919 * i + _crc(case.id)),
                                             distribution, xp=self.backend.xp)
            t0 = time.perf_counter()
            refs = self.family.reference(case, inputs)
            self.backend.synchronize(600.0)
            self.seconds[key] = round(time.perf_counter() - t0, 3)
            self._made[key] = (inputs, refs)
        return self._made[key]

    def drop(self, case: Any) -> None:
        """Forget a case's inputs and references (their device memory goes back to the pool)."""
        for key in [k for k in self._made if k[0] == case.id]:
            del self._made[key]


def _crc(text: str) -> int:
    import zlib  # noqa: PLC0415

    return zlib.crc32(text.encode()) % 100003


def head_slice(family: Any, case: Any, inputs: Mapping[str, Any], heads: int) -> tuple[Any, dict[str, Any]]:
    """The case restricted to its first `heads` heads, and those heads' inputs (views): what the
    recurrent cross-check runs, so it costs a few heads, not all of them."""
    p = dict(case.params)
    h = max(1, min(int(heads), int(p["H"])))
    sub = family.make_case(p["lens"], h, name=f"{case.id.split('/')[0]}-heads", state=p["state"], initial=p["initial"],
                           final=p["final"], gate_in_kernel=p["gate_in_kernel"], beta_sigmoid=p["beta_sigmoid"],
                           qk_l2norm=p["qk_l2norm"], lower_bound=p["lower_bound"], scale=p["scale"], layout=p["layout"],
                           K=p["K"], V=p["V"])
    out: dict[str, Any] = {}
    for name, a in inputs.items():
        if name in ("q", "k", "v", "g", "beta"):
            out[name] = a[:, :h]
        elif name in ("A_log", "dt_bias"):
            out[name] = a[:h]
        elif name == "initial_state":
            out[name] = a[:, :h]
        else:
            out[name] = a
    return sub, out


def cross_check(backend: Any, family: Any, case: Any, inputs: Mapping[str, Any], refs: Mapping[str, Any],
                heads: int) -> dict[str, Any]:
    """The recurrent (token by token) reference against the chunked one on the first `heads`
    heads: seconds and the relative difference per output."""
    xp = backend.xp
    sub, sub_in = head_slice(family, case, inputs, heads)
    t0 = time.perf_counter()
    rec = family.reference(sub, sub_in, method="recurrent")
    backend.synchronize(600.0)
    out: dict[str, Any] = {"heads": int(sub.params["H"]), "seconds": round(time.perf_counter() - t0, 3)}
    h = int(sub.params["H"])
    for k, r in rec.items():
        mine = refs[k][:, :h]
        out[f"{k}_rel_diff"] = float(xp.linalg.norm(mine - r) / xp.linalg.norm(r))
    return out


def time_runs(backend: Any, runs: Mapping[str, Callable[[], Any]], reps: int,
              warmup: int) -> tuple[dict[str, list[float]], dict[str, Any], str]:
    """Interleaved rotating rounds, L2 flushed before every launch, one event pair per launch, a
    launch shield for callables whose host side is slower than their kernels (fitness.timing)."""
    names = list(runs)
    shield = LaunchShield()
    samples: dict[str, list[float]] = {n: [] for n in names}
    last: dict[str, Any] = {}
    for r in range(warmup + reps):
        pending = []
        for name in rotated(names, r):
            backend.flush_l2()
            if shield.ns.get(name):
                backend.spin(shield.ns[name])
            start = backend.record()
            t0 = time.perf_counter()
            last[name] = runs[name]()
            shield.record(name, time.perf_counter() - t0)
            pending.append((name, start, backend.record()))
        backend.wait(pending[-1][2], 120.0)
        if r >= warmup:
            for name, start, end in pending:
                samples[name].append(backend.elapsed_ms(start, end))
        shield.update()
    return samples, last, shield.note()


def do_bench_ms(fn: Callable[[], Any]) -> float | None:
    """Triton's do_bench median (the measure of DESIGN.md's 2026-11-29 peer figures), or None."""
    try:
        from triton.testing import do_bench  # noqa: PLC0415
    except ImportError:
        return None
    return float(do_bench(fn, warmup=25, rep=200, return_mode="median"))


def write(prefix: str | Path, report: Mapping[str, Any], markdown: Callable[[Mapping[str, Any]], str]) -> None:
    """PREFIX.json and PREFIX.md, rewritten whole (called after every scenario)."""
    prefix = str(prefix)
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    Path(prefix + ".json").write_text(json.dumps(report, indent=1, default=_json_default) + "\n")
    Path(prefix + ".md").write_text(markdown(report))


def _json_default(v: Any) -> Any:
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, tuple):
        return list(v)
    return float(v)


def fmt(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


__all__ = ["ERROR_KEYS", "FAMILY_FILE", "ROOT", "References", "check", "cross_check", "do_bench_ms", "fmt",
           "head_slice", "time_runs", "versions", "worst", "write"]
