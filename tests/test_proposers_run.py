"""Guided and LLM proposals inside a whole Run: mixed by rate, judged, recorded, reported, resumed
and replayed without a server. The endpoint is a real HTTP server on loopback playing answers
written for these tests; source proposals are judged by a labelled test double (tests/llm_doubles.py)."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

pytest.importorskip("openai")
pytest.importorskip("pytest_httpserver")

from evo.analysis import load_run  # noqa: E402
from evo.config import from_dict  # noqa: E402
from evo.report import write_report  # noqa: E402
from evo.run import Run, new_run_info  # noqa: E402
from evo.store import open_store  # noqa: E402
from fitness.replay import ReplayEvaluator  # noqa: E402
from genomes import load_space  # noqa: E402
from operators.llm import write_transcript  # noqa: E402
from tests.llm_doubles import RawJudgeDouble, ScriptedEndpoint, completion, genes_answer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "tests/data/synthetic_table.csv"
KEY = "sk-test-SECRET-must-not-leak-42"


def synthetic_cfg(llm: dict, guided: float = 0.25, evaluations: int = 60, seed: int = 5):
    return from_dict({
        "experiment": {"name": "llm-test", "family": "synthetic", "seed": seed},
        "search": {"ga": {"population": 8, "offspring": 8, "elites": 1}, "optuna": {"enabled": False}},
        "budget": {"evaluations": evaluations},
        "evaluator": {"kind": "replay", "replay": str(TABLE)},
        "operators": {"guided": {"rate": guided}, "llm": {"rate": 0.3, **llm}},
    })


def live(url: str, **kw) -> dict:
    return {"base_url": url, "model": "test-model", "api_key_env": "EVO_TEST_LLM_KEY", "retries": 1,
            "backoff_s": 0.0, "retry_after_max_s": 0.01, "timeout_s": 5.0, "price_per_1k_prompt": 1.0, **kw}


def run_once(cfg, store, run_id="r1", evaluator=None):
    space = load_space(cfg.experiment.family)
    try:
        store.get_run(run_id)
    except KeyError:
        store.create_run(new_run_info(cfg, run_id))
    ev = evaluator if evaluator is not None else ReplayEvaluator.from_file(TABLE, space)
    run = Run(cfg, space, store, ev, run_id)
    return run, run.optimize()


SCRIPT = [  # written for this test: one of each kind of answer, then good ones
    ("json", completion(genes_answer({"unroll": 4}, "more loads in flight"))),
    ("json", completion('{"kind": "genes", "changes": {"unroll": 2,,}}')),
    ("json", completion("```json\n" + genes_answer({"vector_bytes": 16}) + "\n```")),
    ("status", 429, {"error": {"message": "rate limited"}}, {"Retry-After": "2"}),
    ("json", completion(genes_answer({"stages": 9}))),                          # off-space: repaired
    ("status", 500, {"error": {"message": "overloaded"}}, {}),
    ("status", 500, {"error": {"message": "overloaded"}}, {}),                   # retries spent: error
    ("json", completion("I'm sorry, I cannot help with GPU kernels.")),
    ("json", completion(genes_answer({"load_cache": "nc", "unroll": 3}))),
] + [("json", completion(genes_answer({"threads_per_row": t, "rows_per_cta": r})))
     for t in (32, 64, 128, 256) for r in (1, 2, 4)]


def test_run_with_guided_and_llm_records_every_outcome_and_reports(httpserver, monkeypatch, tmp_path):
    monkeypatch.setenv("EVO_TEST_LLM_KEY", KEY)
    endpoint = ScriptedEndpoint(SCRIPT)
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(endpoint)
    cfg = synthetic_cfg(live(httpserver.url_for("/v1")))
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    run, summary = run_once(cfg, store)
    assert summary.evaluations == 60 and "budget" in summary.stop_reason
    records = store.records("r1")
    ops = collections.Counter(r.operator.split(":")[0] for r in records)
    assert ops["guided"] > 0 and ops["llm"] > 0 and ops["mutation"] > 0
    props = store.events("r1", "proposal")
    outcomes = collections.Counter(p["outcome"] for p in props if p["operator"].startswith("llm"))
    assert outcomes["valid"] >= 3 and outcomes["repaired"] >= 1 and outcomes["invalid"] >= 2 and outcomes["error"] >= 1
    reasons = " | ".join(p["reason"] for p in props)
    assert "malformed JSON" in reasons and "refused" in reasons and "http_500" in reasons
    exchanges = store.events("r1", "llm")
    assert any(a["status"] == "http_429" and a["retry_after"] == 2.0 for e in exchanges for a in e["attempts"])
    # every judged proposal is a record with its operator and parent; guided ones name their rule
    judged = {p["key"]: p for p in props if p["key"]}
    for r in records:
        if r.key in judged and r.operator.startswith(("guided", "llm")):
            assert r.parents == (judged[r.key]["parent"],)
    assert all(p["operator"].startswith("guided:") for p in props if p["operator"].startswith("guided")
               and p["outcome"] in ("valid", "repaired"))
    # the key reached no store table
    db = (tmp_path / "store.sqlite").read_bytes()
    assert KEY.encode() not in db
    # the report's yield table
    report = write_report(load_run(f"sqlite:///{tmp_path / 'store.sqlite'}#r1"), tmp_path / "report").read_text()
    # a dump carries the events too: it reports like the run
    from evo.session import dump_run
    assert dump_run(f"sqlite:///{tmp_path / 'store.sqlite'}#r1", tmp_path / "dump.json") == 0
    dumped = load_run(tmp_path / "dump.json")
    assert len(dumped.run["events"]) == len(store.events("r1")) > 0
    assert "## Yield per operator" in report and "| llm |" in report and "| guided |" in report
    assert "What the model was told and said" in report
    store.close()

    # a second session of the same run needs no server: every prompt is answered from the store
    httpserver.clear()
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    cfg_dead = synthetic_cfg(live("http://127.0.0.1:9/v1"))
    before = len(store.events("r1"))
    again, s2 = run_once(cfg_dead, store)
    assert s2.new_evaluations == 0 and len(store.events("r1")) == before
    assert [e.key for _, e in again.history] == [e.key for _, e in run.history]

    # and a transcript replays the run in a new one, answer for answer
    transcript = write_transcript(store.events("r1", "llm"), tmp_path / "t.json", note="written for the tests")
    store.close()
    other = open_store("memory://")
    replay, s3 = run_once(synthetic_cfg({"replay": str(transcript)}), other, "r2")
    assert [r.key for r in other.records("r2")] == [r.key for r in records]
    assert all(e.get("replayed") for e in other.events("r2", "llm"))


def test_budget_in_money_stops_asking_and_the_run_goes_on(httpserver, monkeypatch):
    monkeypatch.setenv("EVO_TEST_LLM_KEY", KEY)
    endpoint = ScriptedEndpoint([("json", completion(genes_answer({"unroll": u}), prompt_tokens=2000))
                                 for u in (2, 3, 4)] * 4)
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(endpoint)
    cfg = synthetic_cfg(live(httpserver.url_for("/v1"), budget_usd=0.005, price_per_1k_prompt=0.001), guided=0.0)
    store = open_store("memory://")
    _, summary = run_once(cfg, store)
    assert summary.evaluations == 60
    llm = [p for p in store.events("r1", "proposal")]
    assert len(endpoint.requests) == 3          # $0.002 each: the third crosses the budget
    assert sum(p["outcome"] == "skipped" for p in llm) >= 1
    assert all("money budget spent" in p["reason"] for p in llm if p["outcome"] == "skipped")


# -- source proposals: rmsnorm regions through a judge double that takes source -----------------

GOOD_RSQRT = """__device__ __forceinline__ float rms_rsqrt(float v) {
  float r;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r * fmaf(-0.5f * v * r, r, 1.5f);
}"""
BROKEN = "__device__ __forceinline__ float rms_rsqrt(float v) { /* TEST-VERDICT: COMPILE_ERROR */ return v +; }"
CHEAT = """__device__ __forceinline__ float rms_rsqrt(float v) {
  // TEST-VERDICT: WRONG_RESULT  (a constant instead of 1/sqrt: the judge's reference check fails it)
  return 1.0f;
}"""
FORBIDDEN = "#include <fstream>\n__device__ __forceinline__ float rms_rsqrt(float v) { return rsqrtf(v); }"


def source_answer(code: str, region: str = "rsqrt") -> str:
    return json.dumps({"kind": "source", "region": region, "code": code, "rationale": "written for the tests"})


def rmsnorm_cfg(url: str, evaluations: int = 16):
    return from_dict({
        "experiment": {"name": "src-test", "family": "rmsnorm", "seed": 2},
        "benchmark": {"matrix": "quack:bf16"},
        "search": {"ga": {"population": 4, "offspring": 8, "elites": 1, "tournament_size": 2},
                   "optuna": {"enabled": False}},
        "budget": {"evaluations": evaluations},
        "operators": {"llm": {"rate": 0.6, **live(url)}},
    })


def fitness_of(g) -> float:       # the double's verdict for genomes: a function of the genes
    return 1.0 + 0.01 * g["chunks"] + 0.001 * g["unroll"]


def test_source_proposals_are_judged_through_evaluate_raw(httpserver, monkeypatch):
    monkeypatch.setenv("EVO_TEST_LLM_KEY", KEY)
    script = [("json", completion(source_answer(c))) for c in (GOOD_RSQRT, BROKEN, CHEAT, FORBIDDEN)]
    script += [("json", completion(source_answer(GOOD_RSQRT, region="main_loop")))]
    script += [("json", completion(genes_answer({"unroll": u}))) for u in (1, 2, 3, 4)] * 3
    endpoint = ScriptedEndpoint(script)
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(endpoint)
    judge = RawJudgeDouble(fitness_of=fitness_of)
    store = open_store("memory://")
    _, summary = run_once(rmsnorm_cfg(httpserver.url_for("/v1")), store, evaluator=judge)
    records = {r.key: r for r in store.records("r1")}
    props = store.events("r1", "proposal")
    src = [p for p in props if p["edit"] == "source"]
    by_reason = " | ".join(p["reason"] for p in src)
    assert "#include <fstream> is not allowed" in by_reason and "region 'main_loop' is not editable" in by_reason
    judged = [records[p["key"]] for p in src if p["key"] in records]
    statuses = collections.Counter(r.status.value for r in judged)
    assert statuses == {"OK": 1, "COMPILE_ERROR": 1, "WRONG_RESULT": 1}
    for r in judged:
        assert r.operator == "llm:source" and r.evaluation.space == "rmsnorm/raw"
        assert r.evaluation.genome["origin"] == "llm" and r.evaluation.genome["parent"] == r.parents[0]
    # the double saw the parent's source with one region rewritten, and the parent's own launch
    raw = judge.raw_seen[0]
    assert "fmaf(-0.5f * v * r, r, 1.5f)" in raw.source and "row_reduce" in raw.source
    from fitness.family import load_family

    fam = load_family("rmsnorm")
    case = fam.benchmark_cases("quack:bf16")[0]
    parent = load_space("rmsnorm").make(dict(records[judged[0].parents[0]].evaluation.genome))
    assert raw.launch.resolve(case) == fam.launch(parent, case) or raw.parent != parent.key
    assert summary.evaluations == 16


def test_source_proposals_are_skipped_when_the_evaluator_takes_no_source(httpserver, monkeypatch):
    monkeypatch.setenv("EVO_TEST_LLM_KEY", KEY)
    endpoint = ScriptedEndpoint([("json", completion(source_answer(GOOD_RSQRT)))] * 30)
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(endpoint)

    class GenomesOnly(RawJudgeDouble):
        evaluate_raw = None           # a plain evaluator: no source path

    store = open_store("memory://")
    run_once(rmsnorm_cfg(httpserver.url_for("/v1"), evaluations=12), store, evaluator=GenomesOnly(fitness_of=fitness_of))
    props = store.events("r1", "proposal")
    src = [p for p in props if p["edit"] == "source"]
    assert src and all(p["outcome"] == "skipped" and "no evaluate_raw" in p["reason"] for p in src)
    assert all(not r.operator.endswith(":source") for r in store.records("r1"))
    # without evaluate_raw the prompt offers no region to rewrite
    assert all("Editable regions" not in e["messages"][1]["content"] for e in store.events("r1", "llm"))


def test_a_winning_region_rewrite_is_grafted_onto_later_children(httpserver, monkeypatch):
    monkeypatch.setenv("EVO_TEST_LLM_KEY", KEY)
    script = [("json", completion(source_answer(GOOD_RSQRT)))] + \
             [("json", completion(genes_answer({"unroll": u}))) for u in (1, 2, 3, 4)] * 6
    endpoint = ScriptedEndpoint(script)
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(endpoint)
    cfg = rmsnorm_cfg(httpserver.url_for("/v1"), evaluations=30).with_overrides({"operators.llm.graft": 1.0,
                                                                                 "operators.llm.rate": 0.3})
    judge = RawJudgeDouble(fitness_of=fitness_of)       # the rewrite's verdict (2.0) beats every genome
    store = open_store("memory://")
    run_once(cfg, store, evaluator=judge)
    records = store.records("r1")
    winner = next(r for r in records if r.operator == "llm:source")
    grafts = [r for r in records if r.operator == "graft:rsqrt"]
    assert winner.status.value == "OK" and grafts
    by_key = {raw.key: raw for raw in judge.raw_seen}
    for g in grafts:
        raw = by_key[g.key]
        child, allele = g.parents
        assert allele == winner.key and raw.parent == child and raw.origin == f"graft:{winner.key}"
        assert "fmaf(-0.5f * v * r, r, 1.5f)" in raw.source
    props = [p for p in store.events("r1", "proposal") if p["operator"].startswith("graft")]
    assert props and all(p["edit"] == "source" for p in props if p["outcome"] == "valid")
