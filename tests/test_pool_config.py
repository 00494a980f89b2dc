"""[evaluator] pool / ray_address / gpus / ray_retries: validation (one line per field), what
build_evaluator makes of them, a run resumed from its store alone (`evo resume URL#RUN_ID`), and a
second driver of the same run that records nothing twice. No Ray cluster is started here."""

from __future__ import annotations

import subprocess
import sys

import pytest

from evo.config import ConfigError
from evo.evaluators import build_evaluator, check_environment
from evo.run import Run, new_run_info
from evo.store import open_store, sqlite_url
from tests.conftest import TABLE, make_config, subprocess_env


def problems(**evaluator) -> list[str]:
    with pytest.raises(ConfigError) as info:
        make_config(evaluator=evaluator)
    return info.value.problems


def test_each_field_the_chosen_pool_would_ignore_is_one_line():
    assert problems(ray_address="head:6379", gpus=2) == [
        "evaluator.ray_address: only pool = 'ray' uses it (pool is 'local', whose GPU count is evaluator.workers); "
        "set pool = 'ray' or remove ray_address",
        "evaluator.gpus: only pool = 'ray' uses it (pool is 'local', whose GPU count is evaluator.workers); "
        "set pool = 'ray' or remove gpus"]
    assert problems(pool="ray", workers=2) == [
        "evaluator.workers: the Ray pool runs one actor per GPU; set evaluator.gpus instead"]
    assert problems(pool="rays") == ["evaluator.pool: 'rays' is not one of ['local', 'ray'] (did you mean 'ray'?)"]
    assert problems(pool="ray", ray_retries=-1) == ["evaluator.ray_retries: must be >= 0, got -1"]
    cfg = make_config(evaluator={"pool": "ray", "ray_address": "head:6379", "gpus": 8})
    assert (cfg.evaluator.pool, cfg.evaluator.ray_address, cfg.evaluator.gpus, cfg.evaluator.ray_retries) == \
        ("ray", "head:6379", 8, 2)


def test_without_ray_installed_the_ray_pool_is_one_line_naming_the_extra(monkeypatch):
    import evo.pools

    real = evo.pools.importlib.util.find_spec
    monkeypatch.setattr(evo.pools.importlib.util, "find_spec", lambda name: None if name == "ray" else real(name))
    with pytest.raises(ConfigError) as info:
        check_environment(make_config(evaluator={"pool": "ray"}))
    assert info.value.problems == ["evaluator.pool: 'ray' needs Ray, which is not installed: pip install "
                                   "'ptx-kernel-factory[ray]'"]
    check_environment(make_config())                       # the local pool needs nothing more


def test_a_replay_on_the_ray_pool_reads_a_file_every_node_sees(tmp_path):
    with pytest.raises(ConfigError, match="the actors read the recording from a file"):
        check_environment(make_config(evaluator={"pool": "ray", "replay": sqlite_url(tmp_path / "s.db") + "#r"}))


def test_build_evaluator_puts_the_gpu_judge_and_a_replay_on_the_ray_pool(synthetic_space):
    pytest.importorskip("ray", reason="Ray is not installed")
    from fitness.gpu_evaluator import GPUEvaluator
    from fitness.pooled_replay import PooledReplayEvaluator
    from fitness.ray_compile import ClusterCompiler
    from fitness.ray_pool import RayPool
    from genomes import load_space

    replay = build_evaluator(make_config(evaluator={"pool": "ray", "gpus": 2, "ray_address": "h:1"}), synthetic_space)
    assert isinstance(replay, PooledReplayEvaluator) and isinstance(replay.pool, RayPool)
    assert replay.batch_size == 4 and replay.pool.address == "h:1" and len(replay) > 1000
    replay.close()                                          # never joined a cluster: nothing to stop
    cfg = make_config(experiment={"family": "rmsnorm"},
                      evaluator={"kind": "gpu", "pool": "ray", "gpus": 3, "ray_retries": 5, "timeout_s": 90.0})
    judge = build_evaluator(cfg, load_space("rmsnorm"))
    assert isinstance(judge, GPUEvaluator) and isinstance(judge._pool, RayPool)
    assert isinstance(judge._compiler, ClusterCompiler) and judge.batch_size == 12 and judge._compiler.address == ""
    assert (judge._pool.max_retries, judge._pool.timeout_s, judge._pool.gpus) == (5, 90.0, 3)
    judge.close()


def test_a_second_driver_of_the_same_run_records_nothing_twice(tmp_path, synthetic_space, synthetic_table):
    """A driver believed dead that still runs beside the one resumed elsewhere: each genome is
    recorded by whichever appends first; the other takes that record and goes on identically."""
    cfg = make_config(budget={"evaluations": 40})
    url = sqlite_url(tmp_path / "store.sqlite")
    with open_store(url) as store:
        store.create_run(new_run_info(cfg, "r"))
        late = Run(cfg, synthetic_space, store, synthetic_table, "r")       # knows nothing recorded yet
        first = Run(cfg, synthetic_space, store, synthetic_table, "r").optimize()
        second = late.optimize()
        records = store.records("r")
    assert len(records) == 40 == len({r.key for r in records})
    assert first.new_evaluations == 40 and second.new_evaluations == 0 and late.duplicates_dropped == 40
    assert second.best.key == first.best.key and second.evaluations == 40


def evo(*args, cwd):
    return subprocess.run([sys.executable, "-m", "evo.cli", *args], cwd=cwd, env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)


def test_a_run_resumes_from_its_store_alone_in_another_directory(tmp_path):
    cfg = tmp_path / "cfg.toml"
    store = sqlite_url(tmp_path / "shared.sqlite")
    cfg.write_text(f'[experiment]\nname = "moved"\nfamily = "synthetic"\n[budget]\nevaluations = 30\n'
                   f'[evaluator]\nkind = "replay"\nreplay = "{TABLE}"\n[store]\nurl = "{store}"\n'
                   f'[output]\nprogress = false\nreport = false\n')
    host_a = tmp_path / "a"
    host_a.mkdir()
    first = evo("run", str(cfg), cwd=host_a)
    assert first.returncode == 0, first.stderr
    with open_store(store) as s:
        (run,) = s.list_runs()
    assert run.config["evaluator"]["replay"] == str(TABLE)           # recorded with absolute paths
    host_b = tmp_path / "b"
    host_b.mkdir()
    resumed = evo("resume", f"{store}#{run.run_id}", "--runs-dir", "elsewhere", "--quiet", cwd=host_b)
    assert resumed.returncode == 0, resumed.stderr
    assert "30 evaluations (0 new)" in resumed.stdout
    assert (host_b / "elsewhere" / run.run_id / "run.json").is_file()
    again = evo("resume", f"{store}#{run.run_id}", "--runs-dir", "elsewhere", "--quiet", cwd=host_b)
    assert again.returncode == 0 and "30 evaluations (0 new)" in again.stdout      # its directory reused
    missing = evo("resume", f"{store}#nope", cwd=host_b)
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        f"error: {store}: the store has no run 'nope'"]


def test_an_unreachable_ray_cluster_ends_the_run_with_one_line(tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed")
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f'[experiment]\nname = "noray"\nfamily = "synthetic"\n[budget]\nevaluations = 5\n'
                   f'[evaluator]\nkind = "replay"\nreplay = "{TABLE}"\npool = "ray"\nray_address = "127.0.0.1:1"\n'
                   f'gpus = 1\n[output]\nprogress = false\n')
    out = evo("run", str(cfg), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert errors == ["error: cannot join the Ray cluster at 127.0.0.1:1 ([evaluator] ray_address): nothing answers "
                      "at 127.0.0.1:1 (Connection refused); is `ray start --head` running there?"]
    assert "Traceback" not in out.stderr
