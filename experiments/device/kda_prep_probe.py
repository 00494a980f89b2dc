"""kda_prep and kda_rec timed apart on the H200, beside what the fitted model says of each.

    python experiments/device/kda_prep_probe.py --out $OUT/kda_prep_probe.json
    python experiments/device/kda_prep_probe.py --genomes split-bf16-v2,split-bf16-v2-compact --cases H64

Why: the results table times a split genome's two launches as one; session 13's split of that time
(kda_prep ~9.0 us a head, 52-68 % of every scenario) is a fit (kernels/kda/kernel_model.SPLIT_FIT),
and gene `prep` (v5) is chosen on it. This measures the split: per scenario and genome, the L2
flushed once, then each launch between its own events (kda_prep, then kda_rec, as the judge runs
them: kda_rec finds in L2 what kda_prep left there), median of --reps after --warmup rounds, beside
kernel_model.split_fit_ms with the prep scale predicted for the genome's prep (PREP_SCALE_PREDICTED).
Lab tooling: no verification here (the table verifies every genome on both distributions); inputs of
the `flashkda` distribution, outputs and workspace allocated once per scenario.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fitness import dtypes  # noqa: E402
from fitness.device import as_launches, resolve_args  # noqa: E402
from fitness.family import import_sibling, load_family  # noqa: E402
from genomes.kda import NAMED  # noqa: E402

model = import_sibling(str(ROOT / "kernels" / "kda" / "family.py"), "kernel_model")
fam = import_sibling(str(ROOT / "kernels" / "kda" / "family.py"), "family")

#: session 20's adds split-bf16-tight-r2-p6cols (v11: P6 in column order; its kda_prep against
#: tight-r2's is README "v11"'s discriminating figure, predicted 1.0-2.6 % faster). Session 18's: the uniform and mixed pairs in both orders, kda_rec of tight-r2 (1 split, 2 CTAs an SM)
#: against v2-tight's (2 splits, 3) with the longest sequence first and not: where tight-r2-longest's
#: mixed figure comes from (a tail genome times as its twin here: each launch apart, no overlap).
#: Session 17's were v2-tight, v2-tight-r4, tight, tight-r2 (v9's kda_rec at 4 and 2 CTAs an SM:
#: r4's 0.290 ms at uniform/H64 = v2-tight's, throughput-bound); session 16's v2-compact, v2-tight,
#: v2-compact-pdl3 and -pdl2 (kda_prep alone at 5 / 6 / 3 / 2 CTAs per SM).
DEFAULT_GENOMES = "split-bf16-tight-r2,split-bf16-tight-r2-p6cols,split-bf16-tight-r2-longest,split-bf16-v2-tight,split-bf16-v2-tight-longest"


def compile_cubin(family: Any, genome: Any, cache_dir: Path) -> bytes:
    from fitness.compile import Compiler  # noqa: PLC0415

    res = Compiler(cache_dir).compile(family.render(genome), family.compile_flags(genome))
    if not res.ok:
        raise RuntimeError(res.log[-2000:])
    return res.cubin()


def time_apart(backend: Any, module: Any, launches: list[Any], arrays: dict[str, Any], reps: int,
               warmup: int) -> dict[str, float]:
    """Median ms of each launch of one genome's sequence, the L2 flushed before each sequence. Each
    launch is an ordinary one (Launch.overlap dropped: an overlap permission between two launches timed
    apart buys nothing, and a pdl or tail kda_rec is correct after its kda_prep has finished: v7's
    flags are all set, v10's griddepcontrol.wait returns at once)."""
    kernels = []
    for one in (dataclasses.replace(x, overlap=False) for x in launches):
        k = backend.get_kernel(module, one.kernel)
        backend.prepare_kernel(k, one)
        kernels.append((k, one, resolve_args(one, arrays)))
    samples: list[list[float]] = [[] for _ in kernels]
    for rep in range(warmup + reps):
        backend.flush_l2()
        backend.spin(20_000)
        events = [backend.record()]
        for k, one, args in kernels:
            backend.launch(k, one, args)
            events.append(backend.record())
        backend.synchronize(60.0)
        if rep >= warmup:
            for i in range(len(kernels)):
                samples[i].append(backend.elapsed_ms(events[i], events[i + 1]))
    return {one.kernel: float(np.median(s)) for (_, one, _), s in zip(kernels, samples)}


def probe_case(backend: Any, family: Any, case: Any, genomes: dict[str, Any], modules: dict[str, Any], reps: int,
               warmup: int, seed: int) -> dict[str, Any]:
    xp = backend.xp
    inputs = family.make_inputs(case, backend.device_rng(seed), family.distributions[0], xp=xp)
    _, outs = family.io(case)
    bufs = {n: xp.zeros(s.shape, dtype=dtypes.storage_dtype(s.dtype))
            for n, s in {**outs, **(family.workspace(case) or {})}.items()}
    p = case.params
    row: dict[str, Any] = {"case": case.id, "H": p["H"], "lens": list(p["lens"]), "genomes": {}}
    for name, g in genomes.items():
        launch_ms = time_apart(backend, modules[name], list(as_launches(family.launch(g, case))), {**inputs, **bufs},
                               reps, warmup)
        prep_ms = sum(t for k, t in launch_ms.items() if k == fam.PREP_ENTRY)
        scale = model.PREP_SCALE_PREDICTED[dict(g).get("prep", "v3")]
        resident = fam.rec_min_blocks(g) if fam.rec_min_blocks(g) > 1 else None    # v9: kda_rec's CTAs an SM
        mp, mr = model.split_fit_ms(p["lens"], p["H"], fam.rec_v_split(g), prep_scale=scale[1],
                                    order=dict(g).get("order", "index"), rec_resident=resident)
        row["genomes"][name] = {"launch_ms": launch_ms, "prep_ms": prep_ms, "rec_ms": sum(launch_ms.values()) - prep_ms,
                                "total_ms": sum(launch_ms.values()),
                                "model": {"prep_ms": mp, "rec_ms": mr, "prep_scale": list(scale)}}
        print(json.dumps({"case": case.id, "genome": name, **{k: round(v, 4) for k, v in launch_ms.items()},
                          "model_prep_ms": round(mp, 4), "model_rec_ms": round(mr, 4)}), flush=True)
    return row


def main(argv: list[str] | None = None, *, backend: Any = None, family: Any = None,
         compile_fn: Callable[[Any, Any], bytes] | None = None) -> int:
    """`backend`, `family`, `compile_fn(family, genome)` default to the H200's (CupyBackend), the kda
    family and nvcc through the judge's compiler (tests pass stand-ins)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "results"), "kda_prep_probe.json"))
    ap.add_argument("--genomes", default=DEFAULT_GENOMES, help=f"split genomes among {sorted(NAMED)}")
    ap.add_argument("--matrix", default="flashkda")
    ap.add_argument("--cases", default="", help="comma-separated substrings of case ids to keep")
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache-dir", default=str(ROOT / ".cache" / "evo-compile"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    family = load_family("kda") if family is None else family
    if backend is None:
        from fitness.cuda_backend import CupyBackend  # noqa: PLC0415
        backend = CupyBackend()
    compile_fn = compile_fn or (lambda f, g: compile_cubin(f, g, Path(args.cache_dir)))
    genomes = {}
    for name in [n for n in args.genomes.split(",") if n]:
        if name not in NAMED or not fam.split(NAMED[name]):
            ap.error(f"{name!r} is not a named split genome; split genomes: {sorted(n for n, g in NAMED.items() if fam.split(g))}")
        genomes[name] = NAMED[name]
    modules = {name: backend.load(compile_fn(family, g)) for name, g in genomes.items()}
    keep = [s for s in args.cases.split(",") if s]
    cases = [c for c in family.benchmark_cases(args.matrix) if not keep or any(s in c.id for s in keep)]
    report: dict[str, Any] = {"command": " ".join([sys.executable, *sys.argv]), "device": backend.describe(),
                              "protocol": f"L2 flushed, then each launch between events; median of {args.reps} after "
                                          f"{args.warmup}", "fit": dict(model.SPLIT_FIT), "scenarios": []}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for case in cases:
        report["scenarios"].append(probe_case(backend, family, case, genomes, modules, args.reps, args.warmup, args.seed))
        report["wall_s"] = round(time.perf_counter() - t0, 1)
        out.write_text(json.dumps(report, indent=1) + "\n")
        backend.free_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
