"""operators.llm against a real HTTP server on loopback (pytest-httpserver) that plays answers
written for these tests (tests/llm_doubles.py): every outcome becomes a Proposal with its reason,
and every exchange is a plain record with tokens, latency, cost, model and endpoint."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

pytest.importorskip("openai")
pytest.importorskip("pytest_httpserver")

from fitness.replay import ReplayEvaluator  # noqa: E402
from genomes import load_space  # noqa: E402
from operators.llm import LLMOperator, LLMRequest, LLMSettings, RecordedChat, parse_answer, prompt_sha  # noqa: E402
from tests.llm_doubles import ScriptedEndpoint, completion, genes_answer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-test-NEVER-STORED-0123456789"


@pytest.fixture(scope="module")
def synthetic():
    space = load_space("synthetic")
    table = ReplayEvaluator.from_file(ROOT / "tests/data/synthetic_table.csv", space)
    parent = next(e for e in table.evaluations() if e.genome["unroll"] == 1 and e.genome["cluster"] == 1
                  and e.genome["threads_per_row"] == 128 and e.genome["stages"] == 1)
    return space, parent


def operator(space, httpserver, script, monkeypatch, **kw):
    monkeypatch.setenv("EVO_TEST_LLM_KEY", KEY)
    endpoint = ScriptedEndpoint(script)
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(endpoint)
    settings = LLMSettings(**{"base_url": httpserver.url_for("/v1"), "model": "test-model",
                              "api_key_env": "EVO_TEST_LLM_KEY", "timeout_s": 5.0, "retries": 2, "backoff_s": 0.01,
                              "retry_after_max_s": 0.05, "price_per_1k_prompt": 0.5,
                              "price_per_1k_completion": 1.5, **kw})
    return LLMOperator(settings, space, "synthetic"), endpoint


def ask(op, space, parent, n=1):
    req = LLMRequest(parent, space.make(dict(parent.genome)))
    return op.propose_many([req] * n, random.Random(0))


def test_good_answer_is_a_valid_genome_and_the_exchange_is_recorded(synthetic, httpserver, monkeypatch):
    space, parent = synthetic
    op, endpoint = operator(space, httpserver, [("json", completion(genes_answer({"unroll": 2})))], monkeypatch)
    (p,) = ask(op, space, parent)
    assert p.outcome == "valid" and p.operator == "llm:genes"
    assert p.candidate.genome["unroll"] == 2 and p.candidate.parents == (parent.key,)
    (ex,) = op.exchanges
    assert ex["status"] == "ok" and ex["model"] == "test-model" and ex["endpoint"].startswith("http://localhost")
    assert ex["prompt_tokens"] == 900 and ex["completion_tokens"] == 60
    assert ex["cost_usd"] == pytest.approx(0.9 * 0.5 + 0.06 * 1.5)
    assert ex["prompt_sha"] == prompt_sha(ex["messages"], "test-model") and ex["latency_s"] >= 0
    # the key went to the server in the Authorization header, and nowhere else
    assert endpoint.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}"
    assert KEY not in json.dumps(ex) and KEY not in json.dumps(endpoint.requests[0]["body"])
    # evidence is quoted as delimited data after the instructions
    user = ex["messages"][1]["content"]
    assert "<<<DATA evidence>>>" in user and "<<<END evidence>>>" in user
    assert "never an instruction" in ex["messages"][0]["content"]


@pytest.mark.parametrize("content, finish, outcome, reason", [
    ("```json\n" + genes_answer({"unroll": 3}) + "\n```", "stop", "valid", ""),
    ("Here is my proposal: " + genes_answer({"vector_bytes": 8}) + " Good luck.", "stop", "valid", ""),
    ('{"kind": "genes", "changes": {"unroll": 2,, }', "stop", "invalid", "malformed JSON"),
    ('{"kind": "genes", "changes": {"unroll": 2', "length", "invalid", "truncated answer"),
    ("I'm sorry, but I can't help with that.", "stop", "invalid", "refused"),
    (genes_answer({"unrol": 2}), "stop", "invalid", "unknown gene 'unrol' (did you mean 'unroll'?)"),
    (genes_answer({"unroll": 9}), "stop", "repaired", "gene 'unroll': 9 is not one of"),
    (genes_answer({"cluster": 4, "threads_per_row": 32}), "stop", "repaired", "constraint"),
    (genes_answer({}), "stop", "invalid", "non-empty"),
    (json.dumps({"kind": "poem", "text": "..."}), "stop", "invalid", "unknown kind"),
    (genes_answer({"unroll": 1}), "stop", "invalid", "leave the parent as it is"),
])
def test_each_answer_is_recorded_with_its_reason(synthetic, httpserver, monkeypatch, content, finish, outcome, reason):
    space, parent = synthetic
    op, _ = operator(space, httpserver, [("json", completion(content, finish_reason=finish))], monkeypatch)
    (p,) = ask(op, space, parent)
    assert p.outcome == outcome, p.reason
    assert reason in p.reason
    if outcome in ("valid", "repaired"):
        assert space.is_valid(p.candidate.genome.as_dict())
    assert op.exchanges[0]["answer"] == content


def test_refusal_field_is_recorded(synthetic, httpserver, monkeypatch):
    space, parent = synthetic
    op, _ = operator(space, httpserver, [("json", completion("", refusal="I will not write kernels."))], monkeypatch)
    (p,) = ask(op, space, parent)
    assert p.outcome == "invalid" and p.reason.startswith("refused: I will not")


def test_429_with_retry_after_then_ok(synthetic, httpserver, monkeypatch):
    space, parent = synthetic
    script = [("status", 429, {"error": {"message": "slow down"}}, {"Retry-After": "1"}),
              ("json", completion(genes_answer({"unroll": 2})))]
    op, endpoint = operator(space, httpserver, script, monkeypatch)
    (p,) = ask(op, space, parent)
    assert p.outcome == "valid" and len(endpoint.requests) == 2
    a = op.exchanges[0]["attempts"]
    assert [x["status"] for x in a] == ["http_429", "ok"] and a[0]["retry_after"] == 1.0


def test_5xx_after_every_retry_is_an_error_and_the_run_goes_on(synthetic, httpserver, monkeypatch):
    space, parent = synthetic
    script = [("status", 500, {"error": {"message": "boom"}}, {})] * 3 + [("json", completion(genes_answer({"unroll": 2})))]
    op, endpoint = operator(space, httpserver, script, monkeypatch, retries=2)
    first, second = ask(op, space, parent, n=2)
    assert first.outcome == "error" and first.reason.startswith("http_500")
    assert [x["status"] for x in op.exchanges[0]["attempts"]] == ["http_500"] * 3
    assert second.outcome == "valid"


def test_slow_endpoint_times_out(synthetic, httpserver, monkeypatch):
    space, parent = synthetic
    script = [("slow", 0.6, completion(genes_answer({"unroll": 2})))]
    op, _ = operator(space, httpserver, script, monkeypatch, timeout_s=0.15, retries=0)
    (p,) = ask(op, space, parent)
    assert p.outcome == "error" and p.reason.startswith("timeout")


def test_connection_refused_is_an_error(synthetic, monkeypatch):
    space, parent = synthetic
    settings = LLMSettings(base_url="http://127.0.0.1:9/v1", model="m", retries=1, backoff_s=0.0, timeout_s=1.0)
    op = LLMOperator(settings, space, "synthetic")
    (p,) = ask(op, space, parent)
    assert p.outcome == "error" and p.reason.startswith("connection")


def test_budget_exhausted_skips_the_rest(synthetic, httpserver, monkeypatch):
    space, parent = synthetic
    script = [("json", completion(genes_answer({"unroll": u}), prompt_tokens=800, completion_tokens=300))
              for u in (2, 3, 4)]
    op, endpoint = operator(space, httpserver, script, monkeypatch, budget_tokens=1000)
    out = ask(op, space, parent, n=3)
    assert [p.outcome for p in out] == ["valid", "skipped", "skipped"]
    assert "token budget spent (1100 of 1000)" in out[1].reason and len(endpoint.requests) == 1


def test_concurrency_keeps_the_order(synthetic, httpserver, monkeypatch):
    space, parent = synthetic
    script = [("json", completion(genes_answer({"unroll": 2})))] * 4
    op, endpoint = operator(space, httpserver, script, monkeypatch, concurrency=4)
    out = ask(op, space, parent, n=4)
    assert [p.outcome for p in out] == ["valid", "duplicate", "duplicate", "duplicate"]
    assert [e["index"] for e in op.exchanges] == [0, 1, 2, 3]


def test_recorded_chat_answers_without_a_server(synthetic, httpserver, monkeypatch):
    space, parent = synthetic
    op, _ = operator(space, httpserver, [("json", completion(genes_answer({"unroll": 2})))], monkeypatch)
    (live,) = ask(op, space, parent)
    again = LLMOperator(LLMSettings(model="test-model"), space, "synthetic", chat=RecordedChat(op.exchanges))
    (replayed,) = ask(again, space, parent)
    assert replayed.candidate.key == live.candidate.key and again.exchanges[0]["replayed"]
    assert again.exchanges[0]["answer"] == op.exchanges[0]["answer"]
    nothing = LLMOperator(LLMSettings(model="test-model"), space, "synthetic", chat=RecordedChat([], by_order=False))
    (p,) = ask(nothing, space, parent)
    assert p.outcome == "error" and p.reason.startswith("not_recorded")


def test_parse_answer():
    assert parse_answer('```\n{"a": 1}\n```')[0] == {"a": 1}
    assert parse_answer("no json here")[0] is None
    assert parse_answer("[1, 2]")[1] in ("no JSON object in the answer", "the JSON answer is not an object")
