"""Same-process A/B of genome pairs on chosen cases (device).

A one-gene question (does lean_groups help ed8f41a1 on bf16 256?) is usually answered across
sessions: the parent's verdict carried from an earlier run, the variant judged now. On rows of
256-1024 the baselines themselves move 2-4 % between sessions (results/NOTES.md, sessions 6-7),
so such a ratio cannot see a 1-3 % effect. Here both genomes go through the real judge
(correctness protocol, then timing beside torch) in one process, alternately, `--repeats` times
(A then B, then B then A, ...), and every ratio is B's time over A's from two adjacent evaluations.

    python3 experiments/scripts/ab_pairs.py --run results/rmsnorm_fwd_h200_run.json \\
        --pairs ed8f41a1:ed8f41a1+lean_groups=true,570c7c11:570c7c11+lean_groups=true \\
        --cases bf16/32768x256,bf16/32768x512,bf16/32768x1024 --repeats 3 --out $OUT/ab_lean

A genome is a key (or unique prefix) of the run's evaluations, optionally followed by
`+gene=value` changes (values as in TOML: true, 16, "regs" or regs).

`--neighbours SPEC[,SPEC...]` pairs each SPEC with every valid genome one gene-step away from it
(GeneSpace.neighbours: the adjacent values of an ordered gene, every other value of a choice), a
local sensitivity scan in one process; the markdown then ends with the pairs ranked by ratio:

    python3 experiments/scripts/ab_pairs.py --run results/rmsnorm_fwd_h200_run.json \
        --neighbours ed8f41a1 --pairs ed8f41a1:ed8f41a1+chunks=4 \
        --cases bf16/32768x256,bf16/32768x512 --repeats 2 --out $OUT/ab_scan
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fitness.objectives import geomean  # noqa: E402 - after the repo is on the path
from fitness.records import read_json  # noqa: E402


def parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_genome(spec: str, genomes: Mapping[str, Mapping], space):
    """`key[+gene=value...]` -> (name, genome in `space`); a clear error for a bad spec."""
    head, *changes = spec.split("+")
    keys = [k for k in genomes if k.startswith(head)] if head else []
    if len(keys) != 1:
        found = "no genome" if not keys else f"{len(keys)} genomes ({', '.join(sorted(keys)[:4])} ...)"
        raise SystemExit(f"--pairs: {head!r} matches {found} of the run; give a key or a unique prefix")
    values = dict(genomes[keys[0]])
    for change in changes:
        gene, sep, value = change.partition("=")
        if not sep or gene not in space.names:
            raise SystemExit(f"--pairs: {change!r} in {spec!r} is not GENE=VALUE with a gene of the space "
                             f"({', '.join(space.names)})")
        values[gene] = parse_value(value)
    try:
        genome = space.make(values)
    except Exception as exc:  # noqa: BLE001 - the reason is the message
        raise SystemExit(f"--pairs: {spec!r} is not a valid genome: {exc}") from None
    return spec, genome


def parse_pairs(text: str) -> list[tuple[str, str]]:
    pairs = []
    for item in (p for p in text.split(",") if p):
        a, sep, b = item.partition(":")
        if not sep or not a or not b:
            raise SystemExit(f"--pairs: {item!r} is not A:B")
        pairs.append((a, b))
    if not pairs:
        raise SystemExit("--pairs: give at least one A:B")
    return pairs


def neighbour_pairs(specs: str, genomes: Mapping[str, Mapping], space) -> list[tuple[str, str]]:
    """(SPEC, SPEC+gene=value) for every valid one-step neighbour of each SPEC's genome."""
    pairs = []
    for spec in (s for s in specs.split(",") if s):
        name, genome = parse_genome(spec, genomes, space)
        for other in space.neighbours(genome):
            (gene,) = [k for k in space.names if other[k] != genome[k]]
            value = other[gene]
            pairs.append((name, f"{name}+{gene}={json.dumps(value) if not isinstance(value, str) else value}"))
    if not pairs:
        raise SystemExit(f"--neighbours: {specs!r} has no valid one-step neighbour")
    return pairs


def ranked(rows: Sequence[dict]) -> list[tuple[str, str, float, int, int]]:
    """Each pair's cases summarised: (A, B, geomean of the cases' median ratios, cases where B is
    faster by more than the pair's own spread, cases where it is slower by more), fastest B first.
    The spread of a case is max - min of its ratios: a 1 % move inside a 2 % spread is noise."""
    by_pair: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by_pair.setdefault((r["a"], r["b"]), []).append(r)
    out = []
    for (a, b), rs in by_pair.items():
        timed = [r for r in rs if r["ratios"]]
        if not timed:
            continue
        geo = geomean([r["median_ratio"] for r in timed])
        spread = lambda r: max(r["ratios"]) - min(r["ratios"])  # noqa: E731
        faster = sum(1 for r in timed if 1 - r["median_ratio"] > max(spread(r), 0.005))
        slower = sum(1 for r in timed if r["median_ratio"] - 1 > max(spread(r), 0.005))
        out.append((a, b, geo, faster, slower))
    return sorted(out, key=lambda x: x[2])


def ab(evaluate: Callable[[Sequence, Sequence[str]], list], pairs: Sequence[tuple], cases: Sequence[str],
       repeats: int, baseline: str = "torch") -> list[dict]:
    """For each (name_a, genome_a, name_b, genome_b): `repeats` adjacent evaluations of the two on
    `cases` (order alternating between repeats), one row per case with both genomes' times, the
    baseline's, and the ratios B/A of adjacent evaluations. `evaluate(genomes, case_ids)` is the
    judge's evaluate_cases."""
    rows = []
    for name_a, ga, name_b, gb in pairs:
        times: dict[str, dict[str, list]] = {c: {"a": [], "b": [], "base": [], "ratios": []} for c in cases}
        failures = []
        for r in range(repeats):
            order = [("a", ga), ("b", gb)] if r % 2 == 0 else [("b", gb), ("a", ga)]
            got = {}
            for side, g in order:
                (e,) = evaluate([g], list(cases))
                if e.status.value != "OK":
                    failures.append(f"{side} repeat {r}: {e.status.value} {e.message[:160]}")
                got[side] = {c.case: c for c in e.cases}
            for case in cases:
                ca, cb = got["a"].get(case), got["b"].get(case)
                if ca is None or cb is None or not ca.time_us or not cb.time_us:
                    continue
                t = times[case]
                t["a"].append(ca.time_us)
                t["b"].append(cb.time_us)
                t["base"] += [x for x in (ca.baselines_us.get(baseline), cb.baselines_us.get(baseline)) if x]
                t["ratios"].append(cb.time_us / ca.time_us)
        for case in cases:
            t = times[case]
            rows.append({"a": name_a, "b": name_b, "case": case, "a_us": t["a"], "b_us": t["b"],
                         f"{baseline}_us": t["base"], "ratios": t["ratios"],
                         "median_ratio": statistics.median(t["ratios"]) if t["ratios"] else None,
                         "failures": failures})
    return rows


def markdown(rows: Sequence[dict], command: str, device: str, baseline: str = "torch", asked: int = 0) -> str:
    def us(xs):
        return f"{statistics.median(xs):.2f}" if xs else "-"

    timed = len({(r["a"], r["b"]) for r in rows})
    cut = [f"Pairs timed: {timed} of {asked} asked (--max-s reached: the rest were not timed).", ""] \
        if asked > timed else []
    lines = ["# Same-process A/B of genome pairs", "", f"Command: `{command}`", "", f"Device: {device}", "", *cut,
             "Ratio = B's time / A's time from two adjacent evaluations (each verified, then timed beside "
             f"{baseline}); below 1: B is faster. Medians over the repeats.", "",
             f"| A | B | case | A us | B us | {baseline} us | median B/A | min | max | repeats |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        rs = r["ratios"]
        ratio = (f"{r['median_ratio']:.4f} | {min(rs):.4f} | {max(rs):.4f}" if rs else "- | - | -")
        lines.append(f"| {r['a']} | {r['b']} | {r['case']} | {us(r['a_us'])} | {us(r['b_us'])} | "
                     f"{us(r[f'{baseline}_us'])} | {ratio} | {len(rs)} |")
    order = ranked(rows)
    if len(order) > 1:
        lines += ["", "Pairs ranked by the geometric mean of their cases' median ratios (faster / slower: cases "
                  "where B moved by more than the case's own spread of ratios, and by more than 0.5 %):", "",
                  "| A | B | geomean B/A | faster | slower |", "|---|---|---:|---:|---:|"]
        lines += [f"| {a} | {b} | {g:.4f} | {f} | {s} |" for a, b, g, f, s in order]
    failed = sorted({f for r in rows for f in r["failures"]})
    if failed:
        lines += ["", "Failures:", *[f"- {f}" for f in failed]]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="a run dump (evo dump) whose evaluations hold the genomes")
    ap.add_argument("--pairs", default="", help="A:B[,A:B...], each side key[+gene=value...]")
    ap.add_argument("--neighbours", default="", help="SPEC[,SPEC...]: pair each with its every one-step neighbour")
    ap.add_argument("--cases", required=True, help="comma list of case ids of --matrix")
    ap.add_argument("--matrix", default="quack:bf16,fp16,fp32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--space", default="", help="gene space version (default: the latest)")
    ap.add_argument("--max-s", type=float, default=0.0,
                    help="start no new pair after this many seconds (0: no limit); the files are written after "
                         "every pair, so a device call's time limit keeps what is done")
    ap.add_argument("--out", required=True, help="output prefix: writes PREFIX.json and PREFIX.md")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        raise SystemExit("--repeats: at least 1")
    from genomes import load_space

    space = load_space("rmsnorm", args.space)
    run = read_json(args.run)
    genomes = {e["key"]: e["genome"] for e in run["evaluations"]}
    if not args.pairs and not args.neighbours:
        raise SystemExit("give --pairs A:B[,...] or --neighbours SPEC[,...] (or both)")
    asked = (parse_pairs(args.pairs) if args.pairs else []) + \
        (neighbour_pairs(args.neighbours, genomes, space) if args.neighbours else [])
    pairs = []
    for a, b in asked:
        (na, ga), (nb, gb) = parse_genome(a, genomes, space), parse_genome(b, genomes, space)
        pairs.append((na, ga, nb, gb))
    cases = [c for c in args.cases.split(",") if c]
    from fitness.gpu_evaluator import GPUEvaluator

    command = " ".join(["python3", "experiments/scripts/ab_pairs.py", *(argv if argv is not None else sys.argv[1:])])
    t0 = time.time()

    def write(rows: list[dict], device: str) -> str:
        Path(args.out + ".json").write_text(json.dumps({"command": command, "device": device,
                                                        "seconds": time.time() - t0, "pairs_asked": len(pairs),
                                                        "rows": rows}, indent=1))
        text = markdown(rows, command, device, asked=len(pairs))
        Path(args.out + ".md").write_text(text)
        return text

    rows: list[dict] = []
    with GPUEvaluator("rmsnorm", space, matrix=args.matrix, baseline="torch", baselines=["torch"],
                      timeout_s=300) as ev:
        ev.prefetch(list({g.key: g for p in pairs for g in (p[1], p[3])}.values()))   # compiled in parallel, up front
        for done, pair in enumerate(pairs):
            if args.max_s and time.time() - t0 > args.max_s:
                print(f"--max-s {args.max_s:.0f} reached: {len(pairs) - done} of {len(pairs)} pairs not timed")
                break
            rows += ab(ev.evaluate_cases, [pair], cases, args.repeats)
            write(rows, ev.describe().get("device") or "?")   # the judge knows its device after an evaluation
        text = write(rows, ev.describe().get("device") or "?")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
