"""The KDA template on the GPU, outside the judge, with a diagnosis when it is wrong.

    python experiments/device/kda_kernel_check.py [--genomes default,all-split,all-bf16] [--out PREFIX]

Lab tooling (the judge is `pytest -m gpu tests/test_kda_gpu.py`): each genome is rendered,
compiled (fitness.compile), and launched on every CHECK case and the smoke scenarios, both input
distributions, with the outputs poisoned first. Per output it prints the relative RMS error vs
float64 and, when that is over tolerance or elements are unwritten, where the error sits: by
token position in the chunk (0..15), by block of 16 value rows (the warp owning them) and by block
of 16 key columns, the first token and head that are off, so a fragment-mapping bug shows its
shape at once. Writes PREFIX.json (default $OUT/kda_kernel_check).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fitness import dtypes  # noqa: E402
from fitness.family import load_family  # noqa: E402
from genomes.kda import NAMED as GENOMES  # noqa: E402


def where_wrong(out: np.ndarray, ref: np.ndarray, name: str, case: Any) -> dict[str, Any]:
    """Relative RMS error by chunk position, value block and key block (host arrays, float64)."""
    err = (out - ref) ** 2
    scale = float(np.mean(ref ** 2)) or 1.0
    info: dict[str, Any] = {}
    if name == "o":                                              # [T, H, V]
        lens = case.params["lens"]
        pos = np.concatenate([np.arange(n) % 16 for n in lens]) if sum(lens) else np.zeros(0, int)
        info["by_chunk_position"] = [float(np.sqrt(err[pos == p].mean() / scale)) if (pos == p).any() else None
                                     for p in range(16)]
        info["by_value_block"] = [float(np.sqrt(err[:, :, b * 16:(b + 1) * 16].mean() / scale)) for b in range(8)]
        bad = np.argwhere(np.abs(out - ref) > 0.05 * np.sqrt(scale) + 0.02 * np.abs(ref))
        info["first_bad_token_head_col"] = bad[0].tolist() if len(bad) else None
    else:                                                        # [N, H, a, b]
        info["by_row_block"] = [float(np.sqrt(err[:, :, b * 16:(b + 1) * 16].mean() / scale)) for b in range(8)]
        info["by_col_block"] = [float(np.sqrt(err[..., b * 16:(b + 1) * 16].mean() / scale)) for b in range(8)]
        info["by_sequence"] = [float(np.sqrt(err[i].mean() / scale)) for i in range(err.shape[0])]
    return info


def run_case(backend: Any, family: Any, kernel: Any, genome: Any, case: Any, seed: int) -> list[dict[str, Any]]:
    import cupy as cp  # noqa: PLC0415
    from fitness.device import resolve_args  # noqa: PLC0415

    launch = family.launch(genome, case)
    backend.prepare_kernel(kernel, launch)
    ins, outs = family.io(case)
    rows = []
    for i, dist in enumerate(family.distributions):
        host = family.make_inputs(case, np.random.default_rng(seed + i), dist)
        dev = {n: cp.asarray(a) for n, a in host.items()}
        out = {n: cp.empty(s.shape, dtype=dtypes.storage_dtype(s.dtype)) for n, s in outs.items()}
        for n, s in outs.items():
            dtypes.poison(out[n], dtypes.canonical(s.dtype))
        backend.launch(kernel, launch, resolve_args(launch, {**dev, **out}))
        backend.synchronize(60.0)
        ref = family.reference(case, host)
        tols = family.tolerances(case)
        for n, s in outs.items():
            dt = dtypes.canonical(s.dtype)
            got = cp.asnumpy(out[n])
            unwritten = int(dtypes.is_poison(got, dt).sum())
            val = dtypes.to_float64(got, dt)
            rel = float(np.linalg.norm(np.nan_to_num(val - ref[n])) / (np.linalg.norm(ref[n]) or 1.0))
            ok = unwritten == 0 and np.isfinite(val).all() and rel <= tols[n].rel_l2
            row = {"case": case.id, "distribution": dist, "output": n, "rel_rms": rel, "unwritten": unwritten,
                   "nonfinite": int((~np.isfinite(val)).sum()) - unwritten, "ok": bool(ok)}
            if not ok:
                row["where"] = where_wrong(np.nan_to_num(val), ref[n], n, case)
            rows.append(row)
            print(("ok  " if ok else "BAD ") + json.dumps({k: v for k, v in row.items() if k != "where"}), flush=True)
            if not ok:
                print("     " + json.dumps(row["where"]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--genomes", default="default,all-split,all-bf16")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "results/device"), "kda_kernel_check"))
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)

    from fitness.compile import Compiler  # noqa: PLC0415
    from fitness.cuda_backend import CupyBackend  # noqa: PLC0415

    family = load_family("kda")
    backend = CupyBackend()
    compiler = Compiler(ROOT / ".cache" / "evo-compile")
    report: dict[str, Any] = {"device": backend.describe(), "genomes": {}}
    for label in [g for g in args.genomes.split(",") if g]:
        genome = GENOMES[label]
        res = compiler.compile(family.render(genome), family.compile_flags(genome))
        entry: dict[str, Any] = {"genome": dict(genome), "compiled": res.ok,
                                 "registers": {k: r.registers for k, r in res.kernels.items()}, "rows": []}
        report["genomes"][label] = entry
        if not res.ok:
            print(label, "does not compile:", res.log[-2000:])
            continue
        module = backend.load(res.cubin())
        for j, case in enumerate(family.check_cases() + family.benchmark_cases("smoke")):
            try:
                kernel = backend.get_kernel(module, family.launch(genome, case).kernel)
                entry["rows"] += run_case(backend, family, kernel, genome, case, args.seed + 10 * j)
            except Exception as exc:  # noqa: BLE001 - recorded; a sticky CUDA error ends the run below
                traceback.print_exc()
                entry["rows"].append({"case": case.id, "error": f"{type(exc).__name__}: {exc}"})
                if not backend.context_alive():
                    break
        entry["all_ok"] = all(r.get("ok") for r in entry["rows"])
        print(label, "ALL OK" if entry["all_ok"] else "FAILURES", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
