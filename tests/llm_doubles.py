"""Test doubles for the LLM operator's tests, labelled as such.

- `ScriptedEndpoint`: a handler for pytest-httpserver (a real HTTP server on loopback) that plays
  chat-completions answers WRITTEN FOR THE TESTS, in order: good, malformed, markdown-wrapped,
  truncated, refusals, 429 with Retry-After, 5xx, slow. No model produced any of them.
- `RawJudgeDouble`: a stand-in for an evaluator that takes source (GPUEvaluator.evaluate_raw, which
  needs the GPU). It is no judge: it compiles nothing and returns the verdict a test recorded for a
  marker in the source ("TEST-VERDICT: COMPILE_ERROR" ...), so the engine's handling of each real
  outcome can be tested without a device. Genomes get a verdict from a function of their genes.
"""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from fitness.records import CaseResult, Evaluation, Status, failed
from fitness.replay import ReplayEvaluator

MARKER = re.compile(r"TEST-VERDICT:\s*(\w+)")


def completion(content: str, *, finish_reason: str = "stop", prompt_tokens: int = 900, completion_tokens: int = 60,
               refusal: str | None = None, model: str = "test-model") -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if refusal is not None:
        msg["refusal"] = refusal
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": msg, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def genes_answer(changes: Mapping[str, Any], rationale: str = "test answer") -> str:
    return json.dumps({"kind": "genes", "changes": dict(changes), "rationale": rationale})


class ScriptedEndpoint:
    """Plays `script` in order, one item per request: ("json", body) | ("status", code, body, headers)
    | ("slow", seconds, body). After the script: 503. Records the requests it saw."""

    def __init__(self, script: Sequence[tuple]):
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, request):
        from werkzeug import Response

        with self._lock:
            self.requests.append({"headers": dict(request.headers), "body": json.loads(request.data or b"{}")})
            item = self.script.pop(0) if self.script else ("status", 503, {"error": {"message": "script ended"}}, {})
        kind = item[0]
        if kind == "slow":
            time.sleep(item[1])
            return Response(json.dumps(item[2]), status=200, content_type="application/json")
        if kind == "status":
            return Response(json.dumps(item[2]), status=item[1], headers=item[3], content_type="application/json")
        return Response(json.dumps(item[1]), status=200, content_type="application/json")


class RawJudgeDouble(ReplayEvaluator):
    """TEST DOUBLE (no judge): genomes from a replay table or `fitness_of`, raw sources by marker."""

    def __init__(self, table: Sequence[Evaluation] = (), fitness_of: Callable[[Mapping], float] | None = None,
                 **kw: Any):
        super().__init__(table, **kw)
        self.fitness_of = fitness_of
        self.raw_seen: list[Any] = []

    def evaluate(self, genomes):
        if self.fitness_of is None:
            return super().evaluate(genomes)
        return [_verdict(g.key, g.as_dict(), g.space, self.fitness_of(g)) for g in genomes]

    def evaluate_raw(self, raws):
        out = []
        for raw in raws:
            self.raw_seen.append(raw)
            m = MARKER.search(raw.source)
            status = Status(m.group(1)) if m else Status.OK
            if raw.problems():
                status = Status.INVALID
            if status is Status.OK:
                out.append(_verdict(raw.key, raw.as_dict(), raw.space, 2.0, source=raw.source))
            else:
                out.append(Evaluation(key=raw.key, genome=raw.as_dict(), space=raw.space, status=status,
                                      message=f"test double: recorded verdict {status.value}",
                                      artifacts={"raw_source": raw.source}))
        return out


def _verdict(key: str, genome: Mapping, space: str, fitness: float, source: str = "") -> Evaluation:
    cases = (CaseResult("bf16/32768x4096", Status.OK, {"M": 32768, "N": 4096, "dtype": "bf16"}, time_us=100.0 / fitness,
                        tbps=3.0 * fitness / 2, baselines_us={"torch": 100.0}),)
    arts = {"gpu_seconds": "1.5", "copy_ceiling_tbps": "4.2",
            "resources": json.dumps({"k": {"registers": 40, "spill_store_bytes": 0, "spill_load_bytes": 0}})}
    if source:
        arts["raw_source"] = source
    return Evaluation(key=key, genome=dict(genome), space=space, status=Status.OK,
                      objectives={"geomean_speedup": fitness}, cases=cases, artifacts=arts, device="test double")


__all__ = ["MARKER", "RawJudgeDouble", "ScriptedEndpoint", "completion", "failed", "genes_answer"]
