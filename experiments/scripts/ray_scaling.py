"""The Ray pool's figures, for results/ray_scaling.json + .md: chaos on a CPU Ray, throughput on GPUs.

    python experiments/scripts/ray_scaling.py chaos --out results/ray_scaling [--store URL]
    python experiments/scripts/ray_scaling.py device --pool local --out $OUT/ray_local.json      # on the H200
    python experiments/scripts/ray_scaling.py device --pool ray --compare ray_local.json --out $OUT/ray_h200.json
    python experiments/scripts/ray_scaling.py merge --device ray_h200.json --out results/ray_scaling

chaos (no GPU): a local Ray of 2 CPUs and 2 GPUs that are only a resource count, the synthetic
recorded space replayed through the Ray pool (fitness.pooled_replay: every verdict answered inside
a disposable worker process of an actor, after a simulated latency), two scenarios:
  actor_kill   a search whose actor is SIGKILLed while it judges a job: Ray restarts the actor, the
               pool runs the job again; the run's records must equal an undisturbed run's
  driver_kill  `evo run` (driver A) on a PostgreSQL store with an Optuna stage, SIGKILLed
               mid-search; `evo resume URL#RUN_ID` (driver B, its own working directory: another
               host) finishes it from the store alone; the records must equal an uninterrupted
               run's, none lost, none twice
The store is --store, else EVO_TEST_POSTGRES_URL (.ci/postgres.sh starts one), in a schema of its
own that is dropped afterwards.

device (GPU): the same genomes (the recorded H200 search's verified genomes, inf_safe where they take
the Newton step) judged with the settings of experiments/rmsnorm_fwd_h200.toml (33 cases, its
hopeless cut) by one pool, compiled beforehand so both pools time judging alone: candidates per
GPU-minute (candidates / (wall minutes x GPUs)), the pools' startup apart. With --compare, the other
pool's file: the ratio and the verdicts side by side. With --gpus 2 (a two-GPU machine): the Ray pool
on 2 GPUs beside its 1-GPU file, the scaling and the genomes judged on the second GPU against the first.

merge: a device file into the results (single_h200, scaling_2gpu).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TABLE = ROOT / "tests" / "data" / "synthetic_table.csv"
SEARCH_CONFIG = ROOT / "experiments" / "rmsnorm_fwd_h200.toml"
RECORDED_RUN = ROOT / "results" / "rmsnorm_fwd_h200_run.json"
WHY_NO_2GPU = ("not run: the device tool withheld its machines of several GPUs (nvidia-h200-x2 and up) when this "
               "was written; experiments/device/ray_pool_h200.sh with GPUS=2 on nvidia-h200-x2 measures it")


# --------------------------------------------------------------------------------------------
# chaos (CPU)
# --------------------------------------------------------------------------------------------
def chaos_config(address: str, *, pool: str = "ray", budget: int = 48, latency_s: float = 0.1,
                 optuna_trials: int = 0, store_url: str = "") -> dict[str, Any]:
    """A synthetic replay search; pool = "ray" answers it through the actors of the cluster at
    `address` (2 GPUs), pool = "local" in the driver (the undisturbed reference)."""
    evaluator: dict[str, Any] = {"kind": "replay", "replay": str(TABLE), "latency_s": latency_s}
    if pool == "ray":
        evaluator.update(pool="ray", ray_address=address, gpus=2, timeout_s=30.0, startup_timeout_s=60.0)
    data: dict[str, Any] = {
        "experiment": {"name": "ray-chaos", "family": "synthetic", "seed": 21},
        "search": {"ga": {"population": 12, "offspring": 12}},
        "budget": {"evaluations": budget},
        "evaluator": evaluator,
        "output": {"progress": False, "report": False},
    }
    if optuna_trials:
        data["search"]["optuna"] = {"enabled": True, "trials": optuna_trials, "top_k": 2, "batch": 4}
    if store_url:
        data["store"] = {"url": store_url}
    return data


def run_in_process(data: dict[str, Any], evaluator: Any = None, store_url: str = "memory://") -> list:
    """Run a config in this process to its end; its records (Optuna studies in the same store). An
    evaluator given is left open (its pool's counters are read after)."""
    from evo.config import from_dict
    from evo.evaluators import build_evaluator
    from evo.run import Run, new_run_info
    from evo.store import open_store
    from genomes import load_space

    cfg = from_dict(data)
    space = load_space(cfg.experiment.family, cfg.experiment.space_version)
    own = evaluator is None
    evaluator = build_evaluator(cfg, space) if own else evaluator
    store = open_store(store_url)
    run_id = f"ref-{uuid.uuid4().hex[:8]}"
    store.create_run(new_run_info(cfg, run_id))
    try:
        Run(cfg, space, store, evaluator, run_id,
            optuna_storage=None if store_url.startswith("memory") else store_url).optimize()
        return store.records(run_id)
    finally:
        store.close()
        if own:
            evaluator.close()


def compare(reference: list, records: list) -> dict[str, Any]:
    """lost, duplicated and whether the records are the reference's (same genomes in the same order,
    same verdicts), plus where they were judged."""
    keys = [r.key for r in records]
    ref = [(r.key, r.status.value, dict(r.evaluation.objectives)) for r in reference]
    got = [(r.key, r.status.value, dict(r.evaluation.objectives)) for r in records]
    gpus = sorted({f"{w['node']}:{w['gpu']}" for r in records
                   for w in json.loads(r.evaluation.artifacts.get("judged_on", "[]"))})
    return {"evaluations": len(records), "reference_evaluations": len(reference),
            "lost": len({k for k, _, _ in ref} - set(keys)), "duplicated": len(keys) - len(set(keys)),
            "identical_to_reference": got == ref, "judged_on": gpus}


def actor_kill(address: str, *, budget: int = 48, latency_s: float = 0.1, kill_after: tuple[int, ...] = (8, 28)
               ) -> dict[str, Any]:
    """Scenario 1: SIGKILL an actor while it judges a job, once the pool has returned each of
    `kill_after` jobs (a different actor each time where one is busy), mid-search."""
    from evo.config import from_dict
    from evo.evaluators import build_evaluator
    from genomes import load_space

    reference = run_in_process(chaos_config(address, pool="local", budget=budget, latency_s=latency_s))
    data = chaos_config(address, budget=budget, latency_s=latency_s)
    cfg = from_dict(data)
    evaluator = build_evaluator(cfg, load_space("synthetic"))
    pool = evaluator.pool
    killed: list[int] = []
    stop = threading.Event()

    def killer() -> None:
        for threshold in kill_after:
            while not stop.is_set():
                busy = [p for p in pool.actor_pids(busy=True) if p not in killed] \
                    if pool.stats["jobs"] >= threshold else []
                if busy:
                    time.sleep(latency_s / 3)          # well inside the job's simulated latency
                    os.kill(busy[0], signal.SIGKILL)
                    killed.append(busy[0])
                    break
                time.sleep(0.005)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        records = run_in_process(data, evaluator=evaluator)
        stats = pool.stats
    finally:
        stop.set()
        thread.join()
        evaluator.close()
    out = compare(reference, records)
    out.update(actors_killed=len(killed), retried=int(stats["retried"]), actor_deaths=int(stats["actor_deaths"]),
               jobs_lost_by_pool=int(stats["lost"]), jobs=int(stats["jobs"]))
    return out


def _evo(args: list[str], cwd: Path) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "evo.cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _toml(data: dict[str, Any], prefix: str = "") -> str:
    """The few TOML forms a chaos config uses (tables of strings, numbers and booleans)."""
    lines, tables = [], []
    for k, v in data.items():
        if isinstance(v, dict):
            tables.append((k, v))
        else:
            lines.append(f"{k} = {json.dumps(v)}")
    out = ([f"[{prefix}]"] if prefix and lines else []) + lines
    for k, v in tables:
        out.append(_toml(v, f"{prefix}.{k}" if prefix else k))
    return "\n".join(out)


def driver_kill(address: str, store_url: str, work: Path, *, budget: int = 60, latency_s: float = 0.1,
                kill_at: int = 20, optuna_trials: int = 16) -> dict[str, Any]:
    """Scenario 2: driver A SIGKILLed mid-search, driver B (another working directory) resumes the
    run from the store alone, Optuna study included."""
    from evo.store import open_store

    data = chaos_config(address, budget=budget, latency_s=latency_s, optuna_trials=optuna_trials, store_url=store_url)
    cfg_path = work / "ray_chaos.toml"
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(_toml(data) + "\n")
    ref_data = chaos_config(address, pool="local", budget=budget, latency_s=0.0, optuna_trials=optuna_trials)
    reference = run_in_process(ref_data, store_url="sqlite:///" + str((work / "reference.sqlite").resolve()))

    host_a, host_b = work / "host-a", work / "host-b"
    a = _evo(["run", str(cfg_path), "--runs-dir", str(host_a / "runs")], cwd=host_a)
    try:
        run_id = _wait_run_id(host_a / "runs", a)
        with open_store(store_url) as store:
            _wait(lambda: store.count(run_id) >= kill_at, a, f"{kill_at} records")
            a.send_signal(signal.SIGKILL)
            a.wait(timeout=30)
            before = store.records(run_id)
            state_after_kill = store.get_run(run_id).state
    finally:
        if a.poll() is None:
            a.kill()
    b = _evo(["resume", f"{store_url}#{run_id}", "--runs-dir", str(host_b / "runs"), "--quiet", "--no-report"],
             cwd=host_b)
    out_b, err_b = b.communicate(timeout=600)
    if b.returncode != 0:
        raise RuntimeError(f"driver B failed (rc {b.returncode}): {err_b[-2000:]}")
    with open_store(store_url) as store:
        after = store.records(run_id)
        state = store.get_run(run_id).state
    out = compare(reference, after)
    out.update(killed_at=len(before), state_after_kill=state_after_kill, final_state=state,
               records_before_kill_kept=[r.key for r in after[:len(before)]] == [r.key for r in before],
               resumed_from=f"{_masked(store_url)}#{run_id}", optuna_trials=optuna_trials,
               stages=sorted({r.stage for r in after}))
    return out


def _wait_run_id(runs: Path, proc: subprocess.Popen, timeout_s: float = 120.0) -> str:
    found: list[str] = []

    def ready() -> bool:
        for d in runs.glob("*/run.json") if runs.exists() else []:
            found.append(json.loads(d.read_text())["run_id"])
            return True
        return False

    _wait(ready, proc, "the run directory", timeout_s)
    return found[0]


def _wait(cond, proc: subprocess.Popen, what: str, timeout_s: float = 180.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"driver ended before {what}: {proc.stderr.read()[-2000:]}")
        try:
            if cond():
                return
        except Exception:  # noqa: BLE001 - the store or its run not made yet
            pass
        time.sleep(0.02)
    raise RuntimeError(f"never reached {what}")


def _masked(url: str) -> str:
    import sqlalchemy as sa

    try:
        return sa.make_url(url).render_as_string(hide_password=True).split("?")[0]
    except Exception:  # noqa: BLE001
        return url


def fresh_schema(url: str) -> tuple[str, Any]:
    """A URL whose connections live in a new PostgreSQL schema, and a function that drops it."""
    import sqlalchemy as sa

    schema = f"evo_chaos_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')

    def drop() -> None:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()

    scoped = sa.make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
    return scoped.render_as_string(hide_password=False), drop


def chaos(out: Path, store: str) -> dict[str, Any]:
    import tempfile

    import ray

    paths = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": paths}})
    address = ray.get_runtime_context().gcs_address
    url, drop = fresh_schema(store)
    try:
        with tempfile.TemporaryDirectory(prefix="ray-chaos-") as tmp:
            t0 = time.time()
            a = actor_kill(address)
            b = driver_kill(address, url, Path(tmp))
            seconds = time.time() - t0
    finally:
        drop()
        ray.shutdown()
    figures = {"actor_kill": a, "driver_kill": b, "seconds": round(seconds, 1),
               "cluster": "local Ray, 2 CPUs, 2 resource-only GPUs (CPU stand-in runner: fitness.pooled_replay)",
               "store": f"PostgreSQL ({_masked(store)})"}
    return write(out, chaos=figures, command=" ".join(["python", *[_rel(a) for a in sys.argv]]))


# --------------------------------------------------------------------------------------------
# device (GPU)
# --------------------------------------------------------------------------------------------
def device_genomes(space: Any, n: int) -> list:
    """The recorded H200 search's verified genomes, best first, each as the latest space spells it
    with inf_safe where it takes the Newton step (session 10: the twins that pass protocol 2)."""
    data = json.loads(RECORDED_RUN.read_text())
    evs = sorted((e for e in data["evaluations"] if e["status"] == "OK"),
                 key=lambda e: (-(e["objectives"].get("geomean_speedup") or 0.0), e["key"]))
    out, seen = [], set()
    for e in evs:
        genome = dict(e["genome"])
        if "inf_safe" in space.names:
            genome["inf_safe"] = genome.get("rsqrt") == "newton"
        if not space.is_valid(genome):
            continue
        g = space.make(genome)
        if g.key not in seen:
            seen.add(g.key)
            out.append(g)
        if len(out) == n:
            break
    return out


def device(pool: str, n: int, out: Path, gpus: int, cache_dir: str, compare_with: str = "") -> dict[str, Any]:
    from evo.config import load_config
    from evo.evaluators import build_evaluator
    from genomes import load_space

    overrides: dict[str, Any] = {"evaluator.pool": pool, "evaluator.cache_dir": cache_dir,
                                 "experiment.space_version": ""}
    if pool == "ray":
        overrides["evaluator.gpus"] = gpus
    else:
        overrides["evaluator.workers"] = gpus
    cfg = load_config(SEARCH_CONFIG).with_overrides(overrides)
    space = load_space(cfg.experiment.family, cfg.experiment.space_version)
    genomes = device_genomes(space, n)
    t0 = time.time()
    with build_evaluator(cfg, space) as ev:
        ev.pool()                                          # workers (and actors) up: startup apart
        startup = time.time() - t0
        items = [(ev.family.render(g), tuple(ev.family.compile_flags(g))) for g in genomes]
        ev.compiler().compile_many(items)                  # every source in the cache before timing
        t1 = time.time()
        evaluations = []
        b = ev.batch_size
        for i in range(0, len(genomes), b):
            evaluations.extend(ev.evaluate(genomes[i:i + b]))
        wall = time.time() - t1
        stats, info = ev.stats(), ev.describe()
    rows = [{"key": e.key, "status": e.status.value, "geomean_speedup": e.objectives.get("geomean_speedup"),
             "gpu_seconds": float(e.artifacts.get("gpu_seconds", 0) or 0), "truncated": bool(e.artifacts.get("truncated")),
             "judged_on": json.loads(e.artifacts.get("judged_on", "[]")),
             "cases": {c.case: [c.time_us, c.spread_us] for c in e.cases if c.time_us}} for e in evaluations]
    result = {"command": " ".join(["python", *[_rel(a) for a in sys.argv]]), "pool": pool, "gpus": gpus,
              "device": info.get("device"), "toolkit": info.get("toolkit"), "bench_cases": info.get("bench_cases"),
              "candidates": len(rows), "verified": sum(r["status"] == "OK" for r in rows),
              "startup_s": round(startup, 2), "wall_s": round(wall, 2),
              "gpu_seconds": round(stats["gpu_seconds"], 2),
              "candidates_per_gpu_minute": len(rows) / (wall * gpus / 60.0) if wall > 0 else None,
              "verified_per_gpu_minute_worker": stats.get("verified_per_gpu_minute"),
              "pool_stats": stats.get("pool"), "rows": rows}
    if compare_with:
        result["comparison"] = side_by_side(json.loads(Path(compare_with).read_text()), result)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1, default=str))
    return result


def side_by_side(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """The second measurement against the first: throughput ratio, and per genome the verdicts and
    the cases timed by both whose times agree within the two spreads (IQRs)."""
    a = {r["key"]: r for r in first["rows"]}
    same_status, within, cases, ratios = 0, 0, 0, []
    for r in second["rows"]:
        o = a.get(r["key"])
        if o is None:
            continue
        same_status += o["status"] == r["status"]
        if o["geomean_speedup"] and r["geomean_speedup"]:
            ratios.append(r["geomean_speedup"] / o["geomean_speedup"])
        for case, (t, s) in r["cases"].items():
            if case in o["cases"]:
                t0, s0 = o["cases"][case]
                cases += 1
                within += abs(t - t0) <= (s or 0.0) + (s0 or 0.0)
    ratio = None
    if first.get("candidates_per_gpu_minute") and second.get("candidates_per_gpu_minute"):
        ratio = second["candidates_per_gpu_minute"] / first["candidates_per_gpu_minute"]
    return {"first": f"{first['pool']} pool, {first['gpus']} GPU", "second": f"{second['pool']} pool, {second['gpus']} GPU",
            "candidates_per_gpu_minute_ratio": ratio,
            "wall_minute_ratio": (first["wall_s"] / second["wall_s"] * second["candidates"] / first["candidates"]
                                  if second["wall_s"] and first["candidates"] else None),
            "same_status": f"{same_status}/{len(second['rows'])}",
            "geomean_speedup_ratio_median": statistics.median(ratios) if ratios else None,
            "cases_within_spreads": f"{within}/{cases}"}


# --------------------------------------------------------------------------------------------
# the results files
# --------------------------------------------------------------------------------------------
def write(prefix: Path, *, chaos: dict | None = None, device: dict | None = None, command: str = "") -> dict[str, Any]:
    """results/ray_scaling.json + .md: what is given replaces its part, the rest is kept."""
    path = prefix.with_suffix(".json")
    data: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    data.setdefault("single_h200", None)
    data.setdefault("scaling_2gpu", None)
    data.setdefault("scaling_2gpu_why_null", WHY_NO_2GPU)
    data.setdefault("commands", {})
    if chaos is not None:
        data["chaos"] = chaos
        data["commands"]["chaos"] = command
        parts = (chaos["actor_kill"], chaos["driver_kill"])
        data["retried"] = sum(p.get("retried", 0) for p in parts)
        data["lost"] = sum(p["lost"] for p in parts)
        data["duplicated"] = sum(p["duplicated"] for p in parts)
        data["identical_to_undisturbed"] = all(p["identical_to_reference"] for p in parts)
    if device is not None:
        data["commands"]["device"] = device.get("command", "")
        comparison = device.get("comparison") or {}
        entry = {k: v for k, v in device.items() if k not in ("rows", "comparison", "command")}
        if device.get("gpus", 1) >= 2:
            data["scaling_2gpu"] = {**entry, **comparison}
            data["scaling_2gpu_why_null"] = None
        else:
            data["single_h200"] = {**entry, **comparison}
    prefix.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    prefix.with_suffix(".md").write_text(markdown(data))
    return data


def _fmt(v: Any, spec: str = ".3f") -> str:
    if v is None:
        return "not measured"
    if isinstance(v, float) and math.isfinite(v):
        return format(v, spec)
    return str(v)


def markdown(data: dict[str, Any]) -> str:
    lines = ["# The Ray pool: chaos and scaling", "",
             "Written by `experiments/scripts/ray_scaling.py` (commands below), not by hand.", ""]
    c = data.get("chaos")
    if c:
        a, b = c["actor_kill"], c["driver_kill"]
        lines += [f"## Chaos ({c['cluster']}; store {c['store']}; {c['seconds']} s)", "",
                  f"Jobs retried **{data['retried']}**, evaluations lost **{data['lost']}**, duplicated "
                  f"**{data['duplicated']}**; every run identical to its undisturbed twin: "
                  f"**{data['identical_to_undisturbed']}**.", "",
                  "| scenario | what was done | evaluations | retried | lost | duplicated | identical |",
                  "|---|---|---|---|---|---|---|",
                  f"| actors killed | SIGKILL to {a['actors_killed']} actors, each while it judged a job, mid-search (Ray "
                  f"restarted them; {a['actor_deaths']} actor deaths seen) | {a['evaluations']} | {a['retried']} | {a['lost']} | "
                  f"{a['duplicated']} | {a['identical_to_reference']} |",
                  f"| driver killed | `evo run` SIGKILLed at {b['killed_at']} records (state left: {b['state_after_kill']}); "
                  f"`evo resume URL#RUN_ID` from another working directory finished it ({b['final_state']}; stages "
                  f"{', '.join(b['stages'])}) | {b['evaluations']} | - | {b['lost']} | {b['duplicated']} | "
                  f"{b['identical_to_reference']} |", "",
                  f"Judged on: {', '.join(a['judged_on'])} (node:GPU, from each evaluation's `judged_on`).", ""]
    lines += ["## One H200: Ray pool against the local pool", ""]
    s = data.get("single_h200")
    if s:
        lines += [f"{s.get('device')}; {s.get('candidates')} candidates, {s.get('bench_cases')} cases, the search's "
                  f"settings (experiments/rmsnorm_fwd_h200.toml).", "",
                  f"Candidates per GPU-minute, Ray / local: **{_fmt(s.get('candidates_per_gpu_minute_ratio'))}** "
                  f"(target: within 5 %); verdicts {s.get('same_status')} the same, cases within the two spreads "
                  f"{s.get('cases_within_spreads')}.", ""]
        if s.get("runs_in_order"):
            lines += ["Every run of this comparison (the Ray run is compared with the last other run):", "",
                      "| file | pool | candidates per GPU-minute | wall s |", "|---|---|---:|---:|"]
            lines += [f"| {r['file']} | {r['pool']} | {_fmt(r['candidates_per_gpu_minute'])} | {_fmt(r['wall_s'], '.1f')} |"
                      for r in s["runs_in_order"]]
            lines += [f"| (compared) | {s.get('pool')} | {_fmt(s.get('candidates_per_gpu_minute'))} | "
                      f"{_fmt(s.get('wall_s'), '.1f')} |", ""]
    else:
        lines += ["Not measured yet: `experiments/device/ray_pool_h200.sh` on the H200, then `merge`.", ""]
    lines += ["## Two H200s", ""]
    t = data.get("scaling_2gpu")
    if t:
        lines += [f"Candidates per wall-minute, 2 GPUs / 1 GPU: **{_fmt(t.get('wall_minute_ratio'))}** (target >= 1.8); "
                  f"genomes judged on both GPUs: verdicts {t.get('same_status')} the same, cases within the "
                  f"spreads {t.get('cases_within_spreads')}.", ""]
    else:
        lines += [f"`scaling_2gpu` is null: {data.get('scaling_2gpu_why_null')}.", ""]
    lines += ["## Commands", ""] + [f"- {k}: `{v}`" for k, v in data.get("commands", {}).items() if v] + [""]
    return "\n".join(lines)


def _rel(arg: str) -> str:
    return arg.replace(str(ROOT) + "/", "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("chaos", help="the chaos scenarios on a CPU Ray (no GPU)")
    c.add_argument("--out", default="results/ray_scaling", help="prefix of the .json and .md to write")
    c.add_argument("--store", default=os.environ.get("EVO_TEST_POSTGRES_URL", ""),
                   help="PostgreSQL URL (default: EVO_TEST_POSTGRES_URL)")
    d = sub.add_parser("device", help="one pool's throughput on the GPU")
    d.add_argument("--pool", choices=("local", "ray"), required=True)
    d.add_argument("--genomes", type=int, default=4)
    d.add_argument("--gpus", type=int, default=1)
    d.add_argument("--cache-dir", default="/root/work/evo-compile")
    d.add_argument("--compare", default="", help="the other pool's (or 1-GPU) file from this command")
    d.add_argument("--out", required=True)
    m = sub.add_parser("merge", help="a device file into the results")
    m.add_argument("--device", required=True)
    m.add_argument("--out", default="results/ray_scaling")
    m.add_argument("--against", action="append", default=[],
                   help="another run of the other pool on the same machine (repeatable): the comparison is made "
                        "against the LAST one given, and every one is listed with its order, because the first "
                        "pool timed on a fresh machine pays its cold caches (cupy's kernel cache, torch's "
                        "first compile) and runs slower")
    args = ap.parse_args(argv)
    if args.command == "chaos":
        if not args.store:
            print("error: --store URL (PostgreSQL) or EVO_TEST_POSTGRES_URL: eval \"$(bash .ci/postgres.sh)\" starts one",
                  file=sys.stderr)
            return 2
        data = chaos(Path(args.out), args.store)
        print(f"wrote {args.out}.json/.md: retried {data['retried']}, lost {data['lost']}, "
              f"duplicated {data['duplicated']}, identical {data['identical_to_undisturbed']}")
        return 0
    if args.command == "device":
        device(args.pool, args.genomes, Path(args.out), args.gpus, args.cache_dir, args.compare)
        return 0
    dev = json.loads(Path(args.device).read_text())
    if args.against:
        others = [json.loads(Path(a).read_text()) for a in args.against]
        dev["comparison"] = side_by_side(others[-1], dev)
        dev["runs_in_order"] = [{"file": _rel(str(Path(a).resolve())), "pool": o["pool"],
                                 "candidates_per_gpu_minute": o["candidates_per_gpu_minute"], "wall_s": o["wall_s"]}
                                for a, o in zip(args.against, others)]
    write(Path(args.out), device=dev)
    print(f"merged {args.device} into {args.out}.json/.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
