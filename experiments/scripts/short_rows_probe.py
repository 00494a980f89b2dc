"""Launch RMSNorm implementations on a few cases for Nsight Compute (ncu_short_rows.sh runs this
under `ncu --profile-from-start off`): each implementation is warmed up (JIT, autotuning, first
launch) outside the profiled range, then called `--repeats` times per case between
cudaProfilerStart and cudaProfilerStop, so the report holds exactly those launches, in order.
The order is written to `--order` (JSON): ncu_table.py joins it with ncu's CSV.

Why: on rows of 256-1024 elements no genome of four searches came within 4 % of QuACK and
torch.compile (bf16 32768 x 256: 13.8 us against 13.0-13.3 and 12.8), and CUDA events cannot
say why; the hardware counters (DRAM bytes and throughput, achieved occupancy, instructions,
cycles) of the three kernels on the same case can.

    python3 short_rows_probe.py --impl evolved,quack,torch_compile --cases bf16/32768x256 --order order.json

`evolved` is the exported package (ptxk_rmsnorm on PYTHONPATH, as export_check.sh installs it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

IMPLS = ("evolved", "quack", "torch_compile", "torch")


def call_label(impl: str, case: str, repeat: int) -> str:
    return f"{impl}|{case}|{repeat}"


def parse_cases(text: str) -> list[tuple[str, int, int]]:
    """'bf16/32768x256,fp32/32768x1024' -> [(dtype, M, N), ...] with a clear error per bad item."""
    out = []
    for item in (t for t in text.split(",") if t):
        try:
            dtype, shape = item.split("/")
            m, n = (int(v) for v in shape.split("x"))
        except ValueError:
            raise SystemExit(f"--cases: {item!r} is not DTYPE/MxN (e.g. bf16/32768x256)") from None
        if dtype not in ("bf16", "fp16", "fp32"):
            raise SystemExit(f"--cases: {item!r}: dtype must be bf16, fp16 or fp32")
        out.append((dtype, m, n))
    if not out:
        raise SystemExit("--cases: no case given")
    return out


def parse_impls(text: str) -> list[str]:
    impls = [t for t in text.split(",") if t]
    bad = [t for t in impls if t not in IMPLS]
    if bad or not impls:
        raise SystemExit(f"--impl: {bad or text!r} not among {IMPLS}")
    return impls


def make_callable(impl: str, x, w, eps: float):
    import torch

    if impl == "evolved":
        import ptxk_rmsnorm   # noqa: PLC0415 - the exported package, installed by export_check.sh

        y = torch.empty_like(x)
        return lambda: ptxk_rmsnorm.rmsnorm_into(x, w, y, eps)
    if impl == "quack":
        import importlib

        qr = importlib.import_module("quack.rmsnorm")
        return lambda: qr.rmsnorm(x, w, eps=eps)
    if impl == "torch_compile":
        def ref(x, w):
            xf = x.float()
            return (xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + eps) * w.float()).to(x.dtype)
        fn = torch.compile(ref, dynamic=False)
        return lambda: fn(x, w)
    wx = w.to(x.dtype)
    N = x.shape[-1]
    return lambda: torch.nn.functional.rms_norm(x, (N,), wx, eps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impl", default="evolved,quack,torch_compile")
    ap.add_argument("--cases", default="bf16/32768x256")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--order", required=True, help="JSON file: the profiled calls in launch order")
    args = ap.parse_args(argv)
    impls, cases = parse_impls(args.impl), parse_cases(args.cases)
    if args.repeats < 1:
        raise SystemExit("--repeats must be at least 1")
    import torch

    torch.set_grad_enabled(False)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    gen = torch.Generator(device="cuda").manual_seed(0)
    calls = []
    for dtype, m, n in cases:
        x = torch.randn(m, n, device="cuda", dtype=torch.float32, generator=gen).to(dt[dtype])
        w = torch.rand(n, device="cuda", dtype=torch.float32, generator=gen) + 0.5
        for impl in impls:
            fn = make_callable(impl, x, w, 1e-6)
            for _ in range(3):       # JIT, autotuning, first-launch costs: outside the profiled range
                fn()
            torch.cuda.synchronize()
            calls.append({"impl": impl, "case": f"{dtype}/{m}x{n}", "fn": fn})
    order = []
    torch.cuda.synchronize()
    torch.cuda.profiler.start()               # cudaProfilerStart: ncu --profile-from-start off begins here
    for c in calls:
        for r in range(args.repeats):
            label = call_label(c["impl"], c["case"], r)
            torch.cuda.nvtx.range_push(label)     # ncu --nvtx --print-nvtx-rename kernel names kernels by it
            c["fn"]()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()              # one call's kernels at a time, in this order
            order.append({"impl": c["impl"], "case": c["case"], "repeat": r, "label": label})
    torch.cuda.profiler.stop()
    Path(args.order).write_text(json.dumps(order, indent=1))
    print(f"profiled {len(order)} calls: {len(calls)} (implementation, case) x {args.repeats}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
