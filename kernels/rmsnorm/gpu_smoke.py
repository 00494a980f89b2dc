#!/usr/bin/env python3
"""GPU smoke test of the RMSNorm forward template: standalone (cupy + numpy; no torch, no judge).

Renders the default genome, the hand-picked extremes and N seeded random genomes (plus the plain
baseline kernel), compiles each with nvcc for sm_90a, runs them on awkward shapes
(M in {1, 7, 199} x N in {256, 1000, 4104, 8200, 131072}) for every (x, weight) dtype pair
(bf16/fp16/fp32 x, fp32 or same-dtype weight), with and without rstd, and compares with a float64
numpy reference under the DESIGN.md tolerances. Outputs are poisoned with NaN first (every element
must be written) and inputs must be unchanged. Each genome runs in its own process with a timeout,
so a fault or a hang (a cluster/mbarrier deadlock) fails that genome only.

    python kernels/rmsnorm/gpu_smoke.py                 # default + extremes + 16 random genomes
    python kernels/rmsnorm/gpu_smoke.py --genomes 64 --seed 3 --big
    python kernels/rmsnorm/gpu_smoke.py --only default  # one genome (default | plain | extreme3 | <n>)

One line per genome: PASS/FAIL, cases run / invalid, the worst error relative to tolerance, and
the first failing case; then a summary. Exit status 1 when any genome fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fitness import dtypes  # noqa: E402
from fitness.family import Case, load_family  # noqa: E402
from genomes.rmsnorm import SPACE  # noqa: E402

ROWS = (1, 7, 199)
WIDTHS = (256, 1000, 4104, 8200, 131072)
BIG = ((64, 262144), (4096, 14336), (3, 65544))
PAIRS = (("bf16", "fp32"), ("bf16", "bf16"), ("fp16", "fp32"), ("fp16", "fp16"), ("fp32", "fp32"))
EPS = 1e-6


def family_module():
    load_family("rmsnorm")
    return sys.modules["_kernels_rmsnorm_family"]


def all_pairs_family():
    fam = family_module()

    class AllPairs(fam.RMSNormFamily):
        def dtype_pairs(self):
            return list(PAIRS)

    return AllPairs()


def cases(big: bool) -> list[Case]:
    shapes = [(m, n) for m in ROWS for n in WIDTHS] + (list(BIG) if big else [])
    out = []
    for i, (xd, wd) in enumerate(PAIRS):
        for j, (m, n) in enumerate(shapes):
            with_rstd = (i + j) % 2 == 0
            cid = f"{xd}/{m}x{n}/w{wd}" + ("/rstd" if with_rstd else "")
            out.append(Case(cid, {"M": m, "N": n, "dtype": xd, "weight_dtype": wd, "eps": EPS,
                                  "with_rstd": with_rstd}))
    return out


# -- parent: render, compile, dispatch ------------------------------------------------------
def compile_source(src: str, path: Path, flags: list[str]) -> tuple[bool, str]:
    path.write_text(src)
    cmd = ["nvcc", "-cubin", "-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-std=c++17",
           "-Xptxas", "-v", *flags, str(path), "-o", str(path.with_suffix(".cubin"))]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode == 0, r.stdout + r.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--genomes", type=int, default=16, help="random genomes besides default+extremes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--big", action="store_true", help="also run a few benchmark-size shapes")
    ap.add_argument("--only", default=None, help="default | plain | extreme<i> | <index in the list>")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per genome")
    ap.add_argument("--keep", default=None, help="folder to keep sources and cubins in")
    ap.add_argument("--run-one", nargs=3, metavar=("CUBIN", "GENOME_JSON", "BIG"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run_one:
        return run_one(*args.run_one)

    fam_mod = family_module()
    fam = all_pairs_family()
    genomes = fam_mod.sample_genomes(args.genomes, args.seed)
    names = ["default"] + [f"extreme{i}" for i in range(len(fam_mod.EXTREMES))] + \
        [f"random{i}" for i in range(len(genomes) - 1 - len(fam_mod.EXTREMES))]
    items = [("plain", None)] + list(zip(names, genomes))
    if args.only is not None:
        sel = args.only
        items = [it for k, it in enumerate(items) if it[0] == sel or str(k) == sel]
        if not items:
            print(f"no genome named {sel!r}", file=sys.stderr)
            return 2

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="rmsnorm_smoke_"))
    work.mkdir(parents=True, exist_ok=True)

    def build(item):
        name, g = item
        src = fam.render_plain() if g is None else fam.render(g)
        flags = [] if g is None else fam.compile_flags(g)
        ok, log = compile_source(src, work / f"{name}.cu", flags)
        return name, g, ok, log

    t0 = time.time()
    with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as ex:
        built = list(ex.map(build, items))
    print(f"compiled {len(built)} sources in {time.time() - t0:.1f}s into {work}")

    failed = 0
    for name, g, ok, log in built:
        if not ok:
            failed += 1
            print(f"FAIL {name:10s} compile error: {log.strip().splitlines()[-1] if log.strip() else '?'}")
            continue
        gjson = "plain" if g is None else g.to_json()
        cmd = [sys.executable, __file__, "--run-one", str(work / f"{name}.cubin"), gjson, str(int(args.big))]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
            res = json.loads(lines[-1]) if lines else {"ok": False, "first": f"no result (rc {r.returncode}): "
                                                        f"{(r.stderr.strip().splitlines() or ['?'])[-1]}"}
        except subprocess.TimeoutExpired:
            res = {"ok": False, "first": f"timeout after {args.timeout:.0f}s (hang?)"}
        failed += not res["ok"]
        desc = "" if g is None else " " + ",".join(f"{k}={g[k]}" for k in g)
        print(f"{'PASS' if res['ok'] else 'FAIL'} {name:10s} ran={res.get('ran', 0)} invalid={res.get('invalid', 0)} "
              f"worst={res.get('worst', float('nan')):.3g}x tol"
              + (f" first failure: {res['first']}" if not res["ok"] else "") + desc, flush=True)
    total = len(built)
    print(f"SUMMARY: {total - failed}/{total} passed" + ("" if failed == 0 else f", {failed} FAILED"))
    return 1 if failed else 0


# -- child: load, run every case, verify ------------------------------------------------------
def run_one(cubin: str, genome_json: str, big: str) -> int:
    import cupy as cp  # noqa: PLC0415

    fam_mod = family_module()
    fam = all_pairs_family()
    op = sys.modules["_kernels_rmsnorm_operation"]
    plain = genome_json == "plain"
    g = None if plain else SPACE.from_json(genome_json)
    mod = cp.RawModule(path=cubin)
    rng = np.random.default_rng(1234)
    result = {"ok": True, "ran": 0, "invalid": 0, "worst": 0.0, "first": ""}

    def fail(msg: str) -> None:
        if result["ok"]:
            result["first"] = msg
        result["ok"] = False

    for k, case in enumerate(cases(big == "1")):
        try:
            launch = fam.launch_plain(case) if plain else fam.launch(g, case)
        except Exception as exc:  # noqa: BLE001
            fail(f"{case.id}: launch() raised {exc!r}")
            continue
        if launch is None:
            result["invalid"] += 1
            if g is not None and g == fam_mod.DEFAULT:
                fail(f"{case.id}: the default genome must handle every case (launch None)")
            continue
        p = case.params
        dist = "normal" if k % 2 == 0 else "wide"
        host = fam.make_inputs(case, rng, dist)
        ref = fam.reference(case, host)
        dev = {name: cp.asarray(a) for name, a in host.items()}
        xd = p["dtype"]
        y = cp.empty(host["x"].shape, dtype=dtypes.storage_dtype(xd))
        y.view(_bits(xd))[...] = dtypes.POISON_BITS[xd]
        dev["y"] = y
        if p["with_rstd"]:
            rs = cp.empty((p["M"],), dtype=np.float32)
            rs.view(np.uint32)[...] = dtypes.POISON_BITS["fp32"]
            dev["rstd"] = rs
        args = tuple(dev[a] if isinstance(a, str) else (np.uint64(0) if a is None else a) for a in launch.args)
        fn = mod.get_function(launch.kernel)
        if launch.shared_bytes > 0:       # static + dynamic over 48 KiB needs the opt-in
            fn.max_dynamic_shared_size_bytes = launch.shared_bytes
        try:
            fn(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)
            cp.cuda.Device().synchronize()
        except Exception as exc:  # noqa: BLE001 - a sticky CUDA error ends this genome
            fail(f"{case.id}: launch {launch.kernel} grid={launch.grid} block={launch.block} "
                 f"smem={launch.shared_bytes}: {exc}")
            break
        result["ran"] += 1
        for name in ("x", "w"):
            if not np.array_equal(cp.asnumpy(dev[name]).view(np.uint8), host[name].view(np.uint8)):
                fail(f"{case.id}: input {name} changed")
        tols = op.TOLERANCES[xd], op.RSTD_TOLERANCE
        outs = [("y", dtypes.to_float64(cp.asnumpy(dev["y"]), xd), ref["y"], tols[0])]
        if p["with_rstd"]:
            outs.append(("rstd", cp.asnumpy(dev["rstd"]).astype(np.float64), ref["rstd"], tols[1]))
        for name, out, rf, tol in outs:
            bad_nan = ~np.isfinite(out)
            if bad_nan.any():
                idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad_nan)), out.shape))
                fail(f"{case.id}: {name}{list(idx)} = {out[idx]} (unwritten or NaN)")
                continue
            err = np.abs(out - rf)
            allowed = tol.atol + tol.rtol * np.abs(rf)
            ratio = float((err / allowed).max())
            result["worst"] = max(result["worst"], ratio)
            if ratio > 1.0:
                idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(err / allowed)), out.shape))
                fail(f"{case.id}: {name}{list(idx)} = {out[idx]:.6g} vs {rf[idx]:.6g} "
                     f"(err {err[idx]:.3g} > {allowed[idx]:.3g})")
            if tol.rel_l2 is not None:
                rel = float(np.linalg.norm(out - rf) / max(np.linalg.norm(rf), 1e-300))
                if rel > tol.rel_l2:
                    fail(f"{case.id}: {name} relative L2 error {rel:.3g} > {tol.rel_l2}")
        del dev
    print(json.dumps(result))
    return 0


def _bits(dtype: str):
    return {"bf16": np.uint16, "fp16": np.uint16, "fp32": np.uint32}[dtype]


if __name__ == "__main__":
    sys.exit(main())
