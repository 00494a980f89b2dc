"""A run as pandas DataFrames, for notebooks, plots and `evo report`.

    frames = load_run("runs/<run id>")                            # a run directory
    frames = load_run("results/<name>_run.json")                  # an `evo dump` file
    frames = load_run("sqlite:///runs/evo.db", run_id="...")      # any store URL
    frames.evaluations   # one row per evaluation, in append order
    frames.cases         # one row per (evaluation, benchmark case); the case parameters the
                         # family's dispatch key names (frames.keys.columns) are columns
    frames.run           # run_id, family, seed, metric, baseline, config, ...

Every number is the stored one, unrounded: `fitness` is `Record.fitness(metric)` (NaN where the
candidate cannot compete: failed or suspect), `speedup.<baseline>` is `CaseResult.speedup`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from fitness.family import NO_DISPATCH_KEY, DispatchKey, dispatch_key_of
from fitness.objectives import geomean
from fitness.records import Evaluation, read_json
from evo.store.base import Record, RunInfo

EVAL_COLUMNS = ["seq", "key", "generation", "stage", "operator", "parents", "status", "suspect", "fitness"]
TAIL_COLUMNS = ["device", "toolkit", "started_at", "finished_at", "duration_s", "gpu_seconds",
                "copy_ceiling_tbps", "message"]
#: a case row: these, the family's key columns (DispatchKey.columns) after "case", then CASE_FIGURES
CASE_COLUMNS = ["key", "seq", "case"]
CASE_FIGURES = ["status", "time_us", "spread_us", "samples", "tbps", "max_abs_err", "rel_l2_err"]


@dataclass(frozen=True)
class RunFrames:
    evaluations: pd.DataFrame
    cases: pd.DataFrame
    run: Mapping[str, Any]
    records: tuple[Record, ...] = field(default=(), repr=False, compare=False)
    #: the family's dispatch key (fitness.family.dispatch_key_of the run's family): how its results
    #: are keyed (evo dispatch, playoff, report) and which case parameters are columns of `cases`
    keys: DispatchKey = field(default=NO_DISPATCH_KEY, repr=False, compare=False)

    @property
    def metric(self) -> str:
        return self.run["metric"]

    @property
    def baselines(self) -> list[str]:
        """Every baseline timed in the run (columns `base.<name>_us`), the run's own first."""
        names = [c[len("base."):-len("_us")] for c in self.cases.columns if c.startswith("base.")]
        own = self.run.get("baseline")
        return sorted(names, key=lambda n: (n != own, n))

    @property
    def genes(self) -> list[str]:
        return [c[len("gene."):] for c in self.evaluations.columns if c.startswith("gene.")]

    def best(self) -> pd.Series | None:
        """The best scored evaluation (highest fitness, earliest on ties, as Store.best)."""
        ev = self.evaluations
        scored = ev[ev["fitness"].notna()]
        if scored.empty:
            return None
        top = scored["fitness"].max()
        return scored[scored["fitness"] == top].sort_values("seq").iloc[0]

    def best_cases(self) -> pd.DataFrame:
        best = self.best()
        if best is None:
            return self.cases.iloc[0:0]
        return self.cases[self.cases["key"] == best["key"]].reset_index(drop=True)


# -- loading ------------------------------------------------------------------------------------
def load_run(source: str | Path, run_id: str | None = None) -> RunFrames:
    """Frames of one run from a run directory, an `evo dump` JSON file or a store URL.

    A store URL may name the run as `URL#RUN_ID`; run_id is required when the store holds
    several runs. ValueError (one line, saying what to pass) when the source cannot be read.
    """
    text = str(source)
    path = Path(text)
    if "://" in text and not path.exists():
        url, _, frag = text.partition("#")
        return _from_store(url, run_id or frag or None)
    if path.is_dir():
        from evo.rundir import open_run_dir

        rd = open_run_dir(path)
        return _from_store(rd.store_url, run_id or rd.run_id)
    if path.is_file():
        return _from_dump(path, run_id)
    raise ValueError(f"{text}: not a run directory, an `evo dump` JSON file or a store URL")


def _from_store(url: str, run_id: str | None) -> RunFrames:
    from evo.store import open_store

    with open_store(url) as store:
        if run_id is None:
            runs = store.list_runs()
            if len(runs) != 1:
                ids = ", ".join(r.run_id for r in runs) or "none"
                raise ValueError(f"store {url} holds {len(runs)} runs ({ids}): pass run_id (or URL#RUN_ID)")
            run_id = runs[0].run_id
        try:
            info = store.get_run(run_id)
        except KeyError:
            raise ValueError(f"store {url} has no run {run_id!r}") from None
        records = store.records(run_id)
        try:
            events = store.events(run_id)
        except NotImplementedError:
            events = []
    return frames_from_records(info, records, events)


def _from_dump(path: Path, run_id: str | None) -> RunFrames:
    try:
        data = read_json(path)
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise ValueError(f"{path}: not an `evo dump` JSON file ({exc})") from None
    if not isinstance(data, Mapping) or "evaluations" not in data:
        raise ValueError(f"{path}: not an `evo dump` JSON file (no 'evaluations')")
    rid = data.get("run_id", path.stem)
    if run_id is not None and run_id != rid:
        raise ValueError(f"{path} holds run {rid!r}, not {run_id!r}")
    lineage = {x["key"]: x for x in data.get("lineage") or ()}
    records = []
    for i, e in enumerate(data["evaluations"]):
        ev = Evaluation.from_dict(e)
        lin = lineage.get(ev.key, {})
        records.append(Record(run_id=rid, evaluation=ev, generation=int(lin.get("generation", 0)),
                              stage=lin.get("stage", "ga"), operator=lin.get("operator", "init"),
                              parents=tuple(lin.get("parents") or ()), seq=int(lin.get("seq", i))))
    config = data.get("config") or {}
    info = RunInfo(run_id=rid, name=config.get("experiment", {}).get("name", rid),
                   family=data.get("family", ""), seed=int(data.get("seed", 0)), config=config,
                   created_at=0.0, state=data.get("state", "dumped"), notes=data.get("notes") or {},
                   elapsed_s=float(data.get("elapsed_s") or 0.0))
    return frames_from_records(info, sorted(records, key=lambda r: r.seq), data.get("events") or ())


# -- building -----------------------------------------------------------------------------------
def _float_artifact(artifacts: Mapping[str, Any], name: str) -> float:
    value = artifacts.get(name)
    if value in (None, ""):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _nan(value: Any) -> Any:
    return math.nan if value is None else value


def _run_genes(info: RunInfo, records: Sequence[Record]) -> tuple[list[str], dict[str, Any]]:
    """The gene columns in the order of the run's gene space (`[experiment] space_version`), and
    the legacy value of each gene added to it later: a genome recorded before a gene existed (a
    seed carried from an earlier session) holds that value. Without the space (an unknown family),
    the genes the records name, in order of appearance."""
    # a source proposal's "genome" (fitness.raw.RawSource.as_dict) names no genes
    seen = _ordered(k for r in records if not r.evaluation.space.endswith("/raw") for k in r.evaluation.genome)
    try:
        from genomes import load_space

        version = (info.config.get("experiment") or {}).get("space_version") or None
        space = load_space(info.family, version) if version else load_space(info.family)
    except Exception:  # noqa: BLE001 - frames of a family this checkout lacks still load
        return seen, {}
    names = list(space.names)
    legacy = {g.name: g.legacy for g in space.genes if g.legacy is not None}
    return names + [k for k in seen if k not in names], legacy


def frames_from_records(info: RunInfo, records: Sequence[Record],
                        events: Sequence[Mapping[str, Any]] = ()) -> RunFrames:
    """The frames of a run from its RunInfo and records (in append order); `events` (the store's
    proposals and LLM exchanges, evo.proposers) go to run["events"] for the operator tables."""
    objective = dict(info.config.get("objective") or {})
    metric = objective.get("metric", "geomean_speedup")
    baseline = objective.get("baseline", "torch")
    records = tuple(records)

    objectives = _ordered(k for r in records for k in r.evaluation.objectives)
    genes, legacy = _run_genes(info, records)
    keys = dispatch_key_of(info.family)
    baselines = sorted({b for r in records for c in r.evaluation.cases for b in c.baselines_us})

    rows = []
    case_rows = []
    for r in records:
        ev = r.evaluation
        row: dict[str, Any] = {"seq": r.seq, "key": r.key, "generation": r.generation, "stage": r.stage,
                               "operator": r.operator, "parents": tuple(r.parents),
                               "status": ev.status.value, "suspect": ev.suspect,
                               "fitness": _nan(r.fitness(metric))}
        for name in objectives:
            row[f"obj.{name}"] = _nan(ev.objectives.get(name))
        raw = ev.space.endswith("/raw")
        for name in genes:
            row[f"gene.{name}"] = None if raw else ev.genome.get(name, legacy.get(name))
        row.update(device=ev.device, toolkit=ev.toolkit, started_at=ev.started_at, finished_at=ev.finished_at,
                   duration_s=ev.duration_s, gpu_seconds=_float_artifact(ev.artifacts, "gpu_seconds"),
                   copy_ceiling_tbps=_float_artifact(ev.artifacts, "copy_ceiling_tbps"), message=ev.message)
        rows.append(row)
        for c in ev.cases:
            crow: dict[str, Any] = {"key": r.key, "seq": r.seq, "case": c.case,
                                    **{p: c.params.get(p) for p in keys.columns},
                                    "status": c.status.value, "time_us": _nan(c.time_us),
                                    "spread_us": _nan(c.spread_us), "samples": c.samples, "tbps": _nan(c.tbps),
                                    "max_abs_err": _nan(c.max_abs_err), "rel_l2_err": _nan(c.rel_l2_err)}
            for b in baselines:
                crow[f"base.{b}_us"] = _nan(c.baselines_us.get(b))
                crow[f"speedup.{b}"] = _nan(c.speedup(b))
            case_rows.append(crow)

    eval_cols = EVAL_COLUMNS + [f"obj.{n}" for n in objectives] + [f"gene.{n}" for n in genes] + TAIL_COLUMNS
    case_cols = CASE_COLUMNS + list(keys.columns) + CASE_FIGURES + [c for b in baselines
                                                                    for c in (f"base.{b}_us", f"speedup.{b}")]
    evaluations = pd.DataFrame(rows, columns=eval_cols)
    evaluations["fitness"] = evaluations["fitness"].astype(float)
    cases = pd.DataFrame(case_rows, columns=case_cols)
    for col in ("time_us", "spread_us", "tbps", *[c for c in case_cols if c.startswith(("base.", "speedup."))]):
        cases[col] = cases[col].astype(float)
    run = {"run_id": info.run_id, "name": info.name, "family": info.family, "seed": info.seed,
           "metric": metric, "baseline": baseline, "config": dict(info.config), "state": info.state,
           "elapsed_s": info.elapsed_s, "created_at": info.created_at, "notes": dict(info.notes),
           "stop_reason": (info.notes or {}).get("stop_reason", ""), "events": [dict(e) for e in events]}
    return RunFrames(evaluations, cases, run, records, keys)


def _ordered(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


# -- tables shared by the plots and the report ---------------------------------------------------
def per_generation(frames: RunFrames) -> pd.DataFrame:
    """Per generation: evaluations, best and median fitness of the scored ones, share invalid."""
    ev = frames.evaluations
    if ev.empty:
        return pd.DataFrame(columns=["generation", "evaluations", "best", "median", "invalid_share"])
    g = ev.groupby("generation", sort=True)
    return pd.DataFrame({"evaluations": g.size(), "best": g["fitness"].max(), "median": g["fitness"].median(),
                         "invalid_share": g["fitness"].apply(lambda s: float(s.isna().mean()))}).reset_index()


def operator_table(frames: RunFrames) -> pd.DataFrame:
    """Per operator (children with parents only): count, how many and what share beat their best
    parent. A child that cannot compete never beats; a parent that cannot compete counts as -inf."""
    ev = frames.evaluations
    fit = dict(zip(ev["key"], ev["fitness"]))
    rows = []
    for op, parents, f in zip(ev["operator"], ev["parents"], ev["fitness"]):
        if not parents:
            continue
        pf = [fit.get(p, math.nan) for p in parents]
        pf = [x for x in pf if not (x is None or math.isnan(x))]
        best_parent = max(pf) if pf else -math.inf
        rows.append((op, bool(not math.isnan(f) and f > best_parent)))
    if not rows:
        return pd.DataFrame(columns=["operator", "children", "better", "share_better"])
    df = pd.DataFrame(rows, columns=["operator", "better"])
    g = df.groupby("operator", sort=True)["better"]
    out = pd.DataFrame({"children": g.size(), "better": g.sum().astype(int)}).reset_index()
    out["share_better"] = out["better"] / out["children"]
    return out


def gene_effects_table(frames: RunFrames) -> pd.DataFrame:
    """Per (gene, value): count of scored evaluations and their mean fitness."""
    ev = frames.evaluations[frames.evaluations["fitness"].notna()]
    rows = []
    for gene in frames.genes:
        col = f"gene.{gene}"
        try:
            groups = list(ev.groupby(col, sort=True, dropna=True))
        except TypeError:                      # values of mixed types: keep them in first-seen order
            groups = list(ev.groupby(col, sort=False, dropna=True))
        for value, grp in groups:
            rows.append({"gene": gene, "value": value, "count": len(grp), "mean_fitness": grp["fitness"].mean()})
    return pd.DataFrame(rows, columns=["gene", "value", "count", "mean_fitness"])


PAIR_COLUMNS = ["gene", "value_a", "value_b", "key_a", "key_b", "cases", "ratio", "min_ratio", "max_ratio",
                "best_case"]


def one_gene_pairs(frames: RunFrames, baseline: str | None = None) -> pd.DataFrame:
    """Pairs of verified genomes of the run that differ in exactly one gene: the run's natural A/B
    experiments (search.seed_variants, one-gene mutations). `ratio` is the geometric mean, over
    the cases both timed, of b's speedup vs `baseline` (default: the run's) over a's; a speedup
    rather than a time, so that a verdict carried from an earlier session compares with one
    measured today through the baseline timed beside each. value_a sorts before value_b."""
    ev = frames.evaluations
    base = baseline or frames.run.get("baseline") or (frames.baselines[0] if frames.baselines else "torch")
    col = f"speedup.{base}"
    ok = ev[(ev["status"] == "OK") & ~ev["suspect"].astype(bool)]
    if ok.empty or col not in frames.cases.columns:
        return pd.DataFrame(columns=PAIR_COLUMNS)
    cases = frames.cases[frames.cases["status"] == "OK"]
    speed = {k: dict(zip(g["case"], g[col])) for k, g in cases.groupby("key", sort=False)}
    genes = frames.genes
    values = {k: tuple(row) for k, row in zip(ok["key"], ok[[f"gene.{g}" for g in genes]].itertuples(index=False))}
    rows = []
    for i, gene in enumerate(genes):
        groups: dict[tuple, list[str]] = {}
        for key, vals in values.items():
            groups.setdefault(vals[:i] + vals[i + 1:], []).append(key)
        for keys in groups.values():
            for x in range(len(keys)):
                for y in range(x + 1, len(keys)):
                    a, b = keys[x], keys[y]
                    if _order(values[b][i]) < _order(values[a][i]):
                        a, b = b, a
                    rows.append(_pair_row(gene, values[a][i], values[b][i], a, b, speed.get(a, {}), speed.get(b, {})))
    return pd.DataFrame([r for r in rows if r is not None], columns=PAIR_COLUMNS)


def one_gene_summary(pairs: pd.DataFrame, tolerance: float = 0.005) -> pd.DataFrame:
    """Per (gene, value_a, value_b): how many pairs, their median ratio, and how many moved by more
    than `tolerance` either way."""
    if pairs.empty:
        return pd.DataFrame(columns=["gene", "value_a", "value_b", "pairs", "median_ratio", "better", "worse"])
    # grouped in Python: pandas would merge 0 with False (equal hashes) in a column of mixed genes
    groups: dict[tuple, list[float]] = {}
    for gene, va, vb, ratio in zip(pairs["gene"], pairs["value_a"], pairs["value_b"], pairs["ratio"]):
        groups.setdefault((gene, _order(va), _order(vb)), []).append(float(ratio))
    rows = [{"gene": gene, "value_a": va[1], "value_b": vb[1], "pairs": len(r),
             "median_ratio": float(pd.Series(r).median()), "better": sum(x > 1 + tolerance for x in r),
             "worse": sum(x < 1 - tolerance for x in r)}
            for (gene, va, vb), r in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]), str(kv[0][2])))]
    return pd.DataFrame(rows, columns=["gene", "value_a", "value_b", "pairs", "median_ratio", "better", "worse"])


def _order(value: Any) -> tuple[str, Any]:
    return (type(value).__name__, value)


def _pair_row(gene: str, va: Any, vb: Any, a: str, b: str, sa: Mapping[str, float],
              sb: Mapping[str, float]) -> dict[str, Any] | None:
    ratios = {c: sb[c] / sa[c] for c in sa.keys() & sb.keys()
              if sa[c] and sb[c] and not (math.isnan(sa[c]) or math.isnan(sb[c]))}
    if not ratios:
        return None
    best = max(ratios, key=ratios.get)
    return {"gene": gene, "value_a": va, "value_b": vb, "key_a": a, "key_b": b, "cases": len(ratios),
            "ratio": geomean(list(ratios.values())),
            "min_ratio": min(ratios.values()), "max_ratio": max(ratios.values()), "best_case": best}


OCCUPANCY_COLUMNS = ["key", "case", "ctas_per_sm", "warps_per_sm", "occupancy_limit"]


def case_occupancy(frames: RunFrames) -> pd.DataFrame:
    """Per (evaluation, case): the CTAs and warps one SM holds at once and what bounds them
    (fitness.occupancy), from the launch the family chooses for the genome and case and the
    registers ptxas reported for that kernel (the evaluation's `resources` artifact). Rows only for
    evaluations that recorded a ptxas report and cases the genome can launch; empty when the run's
    family is not in this checkout."""
    from fitness.family import Case, load_family
    from fitness.occupancy import case_occupancy as occupancy_of

    try:
        family = load_family(frames.run["family"])
    except Exception:  # noqa: BLE001 - frames of a family this checkout lacks still analyse
        return pd.DataFrame(columns=OCCUPANCY_COLUMNS)
    rows = []
    for rec in frames.records:
        ev = rec.evaluation
        raw = ev.artifacts.get("resources")
        if not raw:
            continue
        resources = json.loads(raw) if isinstance(raw, str) else raw
        for c in ev.cases:
            try:
                occ = occupancy_of(family, ev.genome, Case(c.case, dict(c.params)), resources)
            except Exception:  # noqa: BLE001 - a genome of an older space the family no longer launches
                occ = None
            if occ is not None:
                rows.append({"key": rec.key, "case": c.case, "ctas_per_sm": occ.ctas, "warps_per_sm": occ.warps,
                             "occupancy_limit": occ.limit})
    return pd.DataFrame(rows, columns=OCCUPANCY_COLUMNS).drop_duplicates(["key", "case"])


def one_gene_occupancy(frames: RunFrames, pairs: pd.DataFrame | None = None, baseline: str | None = None,
                       tolerance: float = 0.005, occupancy: pd.DataFrame | None = None) -> pd.DataFrame:
    """The one-gene pairs' per-case ratios (b's speedup over a's), grouped by what the gene did
    to the resident warps of that case: fewer, same or more. A gene that only costs registers
    shows up as 'fewer' with a low median and 'same' with a high one (session 6: weight_batch)."""
    columns = ["gene", "value_a", "value_b", "warps", "cases", "median_ratio", "better", "worse"]
    pairs = one_gene_pairs(frames, baseline) if pairs is None else pairs
    occ = case_occupancy(frames) if occupancy is None else occupancy
    if pairs.empty or occ.empty:
        return pd.DataFrame(columns=columns)
    base = baseline or frames.run.get("baseline") or "torch"
    col = f"speedup.{base}"
    ok = frames.cases[frames.cases["status"] == "OK"]
    speed = {(k, c): v for k, c, v in zip(ok["key"], ok["case"], ok[col])}
    cases_of: dict[str, list[str]] = {}
    for k, c in speed:
        cases_of.setdefault(k, []).append(c)
    warps = {(k, c): w for k, c, w in zip(occ["key"], occ["case"], occ["warps_per_sm"])}
    groups: dict[tuple, list[float]] = {}
    for gene, va, vb, a, b in zip(pairs["gene"], pairs["value_a"], pairs["value_b"], pairs["key_a"], pairs["key_b"]):
        for case in cases_of.get(a, ()):
            sa, sb = speed.get((a, case)), speed.get((b, case))
            wa, wb = warps.get((a, case)), warps.get((b, case))
            if None in (sa, sb, wa, wb) or not sa or not sb or math.isnan(sa) or math.isnan(sb):
                continue
            change = "fewer" if wb < wa else ("same" if wb == wa else "more")
            groups.setdefault((gene, _order(va), _order(vb), change), []).append(sb / sa)
    order = {"fewer": 0, "same": 1, "more": 2}
    rows = [{"gene": gene, "value_a": va[1], "value_b": vb[1], "warps": change, "cases": len(r),
             "median_ratio": float(pd.Series(r).median()), "better": sum(x > 1 + tolerance for x in r),
             "worse": sum(x < 1 - tolerance for x in r)}
            for (gene, va, vb, change), r in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]),
                                                                                    str(kv[0][2]), order[kv[0][3]]))]
    return pd.DataFrame(rows, columns=columns)


def copy_ceiling(frames: RunFrames, default: float = 4.27) -> float:
    """The measured copy ceiling (TB/s) recorded with the best genome, else any, else `default`."""
    ev = frames.evaluations
    best = frames.best()
    if best is not None and not math.isnan(best["copy_ceiling_tbps"]):
        return float(best["copy_ceiling_tbps"])
    known = ev["copy_ceiling_tbps"].dropna()
    return float(known.iloc[0]) if len(known) else float(default)


@dataclass(frozen=True)
class RunToJudge:
    """A recorded run to judge again on the GPU (`evo table`, `evo playoff`, `evo ab`): its frames,
    family, gene space (the version it ran with), benchmark matrix and baseline."""
    frames: RunFrames
    family: str
    space: Any
    matrix: str
    baseline: str

    def judge(self, baselines: Sequence[str] | None = None, timeout_s: float = 300.0) -> Any:
        """The GPU judge for this run (fitness.gpu_evaluator.GPUEvaluator, imported only now; a test
        double can stand in): the run's family, space, matrix and baseline, with `baselines` timed
        beside it (None: every baseline the family offers)."""
        from fitness import gpu_evaluator

        return gpu_evaluator.GPUEvaluator(self.family, self.space, matrix=self.matrix, baseline=self.baseline,
                                          baselines=list(baselines) if baselines is not None else None,
                                          timeout_s=timeout_s)


def run_to_judge(source: str | Path, run_id: str | None = None, matrix: str | None = None) -> RunToJudge:
    """load_run, with what judging it again needs; ValueError for a source that is not a run or a run
    that names no benchmark matrix (and no `matrix` is given)."""
    from genomes import load_space

    frames = load_run(source, run_id=run_id)
    family, config = frames.run["family"], frames.run["config"]
    space = load_space(family, (config.get("experiment") or {}).get("space_version") or "")
    matrix = matrix or (config.get("benchmark") or {}).get("matrix")
    if not matrix:
        raise ValueError("the run names no benchmark matrix: pass --matrix")
    return RunToJudge(frames, family, space, matrix, frames.run["baseline"])
