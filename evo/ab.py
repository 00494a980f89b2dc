"""Same-process A/B of genome pairs (`evo ab`): both genomes of a pair through the real judge in one
process, alternately, and every ratio B/A taken from two adjacent evaluations.

A one-gene question (does gene G help genome K on these cases?) is usually answered across
sessions: the parent's verdict carried from an earlier run, the variant judged now. Between
sessions the baselines themselves move by a few percent on short rows, so such a ratio cannot
see a 1-3 % effect. Here both go through the judge (correctness protocol, then timing beside the
run's baseline) `repeats` times, A then B, then B then A, ...

A side is a genome key (or unique prefix) of the run's evaluations, optionally followed by
`+gene=value` changes (values as in TOML: true, 16, "regs" or regs). `neighbour_pairs` pairs a
genome with every valid genome one gene-step away (GeneSpace.neighbours): a local sensitivity scan.
"""
from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fitness.objectives import geomean


class ABError(ValueError):
    """A pair, a genome spec or an option that cannot be timed (one line saying why)."""


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
        raise ABError(f"{head!r} matches {found} of the run; give a key or a unique prefix")
    values = dict(genomes[keys[0]])
    for change in changes:
        gene, sep, value = change.partition("=")
        if not sep or gene not in space.names:
            raise ABError(f"--pairs: {change!r} in {spec!r} is not GENE=VALUE with a gene of the space "
                             f"({', '.join(space.names)})")
        values[gene] = parse_value(value)
    try:
        genome = space.make(values)
    except Exception as exc:  # noqa: BLE001 - the reason is the message
        raise ABError(f"--pairs: {spec!r} is not a valid genome: {exc}") from None
    return spec, genome


def parse_pairs(text: str) -> list[tuple[str, str]]:
    pairs = []
    for item in (p for p in text.split(",") if p):
        a, sep, b = item.partition(":")
        if not sep or not a or not b:
            raise ABError(f"--pairs: {item!r} is not A:B")
        pairs.append((a, b))
    if not pairs:
        raise ABError("--pairs: give at least one A:B")
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
        raise ABError(f"--neighbours: {specs!r} has no valid one-step neighbour")
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


def run_ab(source: str, out: str, *, cases: Sequence[str], pairs: str = "", neighbours: str = "",
           repeats: int = 3, matrix: str | None = None, max_s: float = 0.0, run_id: str | None = None,
           command: str = "", timeout_s: float = 300.0) -> str:
    """`evo ab`: time the pairs of `source`'s genomes (a run directory, dump or store URL) on `cases`
    through the GPU judge, writing OUT.json and OUT.md after every pair (a device call's time limit
    keeps what is done); --max-s starts no new pair after that many seconds. Returns the markdown."""
    from evo.analysis import run_to_judge
    from evo.progress import Progress

    if repeats < 1:
        raise ABError("--repeats: at least 1")
    if not pairs and not neighbours:
        raise ABError("give --pairs A:B[,...] or --neighbours SPEC[,...] (or both)")
    run = run_to_judge(source, run_id=run_id, matrix=matrix)
    space, baseline = run.space, run.baseline
    genomes = {r.key: r.evaluation.genome for r in run.frames.records}
    asked = (parse_pairs(pairs) if pairs else []) + (neighbour_pairs(neighbours, genomes, space) if neighbours else [])
    timed = []
    for a, b in asked:
        (na, ga), (nb, gb) = parse_genome(a, genomes, space), parse_genome(b, genomes, space)
        timed.append((na, ga, nb, gb))
    case_ids = [c for c in cases if c]
    t0 = time.time()

    def write(rows: list[dict], device: str) -> str:
        Path(out + ".json").write_text(json.dumps({"command": command, "device": device, "seconds": time.time() - t0,
                                                   "pairs_asked": len(timed), "rows": rows}, indent=1))
        text = markdown(rows, command, device, baseline=baseline, asked=len(timed))
        Path(out + ".md").write_text(text)
        return text

    rows: list[dict] = []
    with run.judge([baseline], timeout_s) as ev, Progress(len(timed), "evo ab", "pairs") as bar:
        ev.prefetch(list({g.key: g for p in timed for g in (p[1], p[3])}.values()))   # compiled in parallel, up front
        for done, pair in enumerate(timed):
            if max_s and time.time() - t0 > max_s:
                print(f"--max-s {max_s:.0f} reached: {len(timed) - done} of {len(timed)} pairs not timed")
                break
            rows += ab(ev.evaluate_cases, [pair], case_ids, repeats, baseline=baseline)
            write(rows, ev.describe().get("device") or "?")   # the judge knows its device after an evaluation
            bar.advance()
        return write(rows, ev.describe().get("device") or "?")
