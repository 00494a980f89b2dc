"""Why does one case run slower in the exported package than in the judge? (session 3: fp32
8192 x 262144, genome 83ce6f89, 4-6 % slower in three package runs, while the judge reproduced
its own figure). One process, one case, the package's kernel timed several ways, with the GPU's
clocks, power and temperature sampled (nvidia-smi) during each variant:

  alone          the package's kernel only, L2 flushed and shielded before every sample
  interleaved    kernel, allocating op and torch in turn, exactly as `python -m <pkg>.bench` does
  cupy_buffers   the kernel on cupy-allocated x and y (the judge allocates through cupy)
  judge          then, in a child process, the judge's bench of the same case (bench_rmsnorm.py)

On the device, with the package installed in /tmp/pkgsite (export_check.sh) and the factory on
PYTHONPATH for the judge step:

    python3 experiments/scripts/diagnose_pkg_case.py --dtype fp32 --M 8192 --N 262144 --out OUT/diag.json

A package/judge difference that follows the clocks points at duty cycle (heavier interleaving,
lower SM clock) rather than the kernel or its launch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

QUERY = "clocks.sm,clocks.mem,power.draw,temperature.gpu"


class ClockSampler:
    """nvidia-smi readings every `period_s` while active (the GPU's settings are only read)."""

    def __init__(self, period_s: float = 0.2):
        self.period_s, self.rows, self._stop = period_s, [], threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "ClockSampler":
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5).stdout.strip().splitlines()[0]
                self.rows.append([float(v) for v in out.split(",")])
            except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
                pass
            self._stop.wait(self.period_s)

    def summary(self) -> dict[str, float]:
        if not self.rows:
            return {}
        cols = list(zip(*self.rows))
        names = QUERY.split(",")
        return {f"{n}_median": statistics.median(c) for n, c in zip(names, cols)} | \
               {f"{n}_min": min(c) for n, c in zip(names, cols)} | {"readings": len(self.rows)}


def package_variants(args: argparse.Namespace, report: dict) -> None:
    """The package's kernel timed alone, interleaved as its bench does, and on cupy buffers."""
    import importlib

    import cupy
    import torch

    pkg = importlib.import_module(args.package)
    bench = importlib.import_module(f"{args.package}.bench")
    timer = bench.Timer(torch, cupy)
    F = torch.nn.functional
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    M, N, eps = args.M, args.N, 1e-6
    x = torch.randn(M, N, device="cuda", dtype=tdt)
    w = 1 + 0.1 * torch.randn(N, device="cuda")
    y = torch.empty_like(x)
    report["genome_key"] = pkg.plan(M, N, args.dtype)[0]

    def variant(name: str, fns: dict) -> None:
        with ClockSampler() as clocks:
            t = timer.interleaved(fns, args.samples, args.warmup)
        report["variants"][name] = {"timings": t, "clocks": clocks.summary()}
        print(name, {k: round(v["us"], 1) for k, v in t.items()}, clocks.summary(), flush=True)

    variant("alone", {"kernel": lambda: pkg.rmsnorm_into(x, w, y, eps)})
    w_same = w.to(tdt)
    variant("interleaved", {"kernel": lambda: pkg.rmsnorm_into(x, w, y, eps),
                            "op": lambda: pkg.rmsnorm(x, w, eps),
                            "torch": lambda: F.rms_norm(x, (N,), w_same, eps)})
    cx = cupy.asarray(x.detach())            # the same values, in a cupy allocation
    cy = cupy.empty_like(cx)
    xc, yc = torch.as_tensor(cx, device="cuda"), torch.as_tensor(cy, device="cuda")
    variant("cupy_buffers", {"kernel": lambda: pkg.rmsnorm_into(xc, w, yc, eps)})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--package", default="ptxk_rmsnorm")
    ap.add_argument("--dtype", default="fp32", choices=("bf16", "fp16", "fp32"))
    ap.add_argument("--M", type=int, default=8192)
    ap.add_argument("--N", type=int, default=262144)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--dispatch", default="results/rmsnorm_dispatch.json", help="for the judge step")
    ap.add_argument("--no-judge", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    import torch

    report: dict = {"case": f"{args.dtype}/{args.M}x{args.N}", "variants": {}}
    package_variants(args, report)           # its buffers are freed when it returns
    torch.cuda.empty_cache()
    M, N = args.M, args.N

    if not args.no_judge:
        case = f"{args.dtype}/{M}x{N}"
        out = Path(args.out).with_suffix("")
        cmd = [sys.executable, "experiments/scripts/bench_rmsnorm.py", "--dispatch", args.dispatch,
               "--matrix", f"quack:{args.dtype}", "--cases", case, "--baselines", "torch", "--out", f"{out}_judge"]
        t0 = time.time()
        with ClockSampler() as clocks:
            res = subprocess.run(cmd, capture_output=True, text=True)
        judged = {}
        try:
            judged = json.loads(Path(f"{out}_judge.json").read_text())["cases"][0]
        except (OSError, KeyError, IndexError, ValueError):
            pass
        report["variants"]["judge"] = {"rc": res.returncode, "seconds": time.time() - t0,
                                       "evolved_us": judged.get("evolved_us"), "torch_us": judged.get("torch_us"),
                                       "clocks": clocks.summary(), "stderr_tail": res.stderr[-2000:]}
        print("judge", judged.get("evolved_us"), clocks.summary(), flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
