"""Regenerate tests/data/llm_transcript_synthetic.json: an LLM transcript WRITTEN FOR THE TESTS.

No model produced any answer in it: `ANSWERS` below are hand-written gene edits (and a few bad
answers: malformed JSON, a refusal, an unknown gene, off-space values, a truncated answer), handed
out in order by a scripted chat to the prompts that experiments/synthetic_llm_replay.toml's run
sends. The prompts recorded beside them are real: what the operator asked. Replaying the config
(`evo run experiments/synthetic_llm_replay.toml`) answers every prompt from this file, no server.

    python tests/data/make_llm_transcript.py
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/data/llm_transcript_synthetic.json"
CONFIG = ROOT / "experiments/synthetic_llm_replay.toml"


def _genes(changes, why):
    return json.dumps({"kind": "genes", "changes": changes, "rationale": why})


ANSWERS = [
    (_genes({"unroll": 4}, "more loads in flight per thread"), "stop"),
    ("```json\n" + _genes({"vector_bytes": 16}, "wider loads") + "\n```", "stop"),
    ('{"kind": "genes", "changes": {"unroll": 3,, }', "stop"),                        # malformed
    (_genes({"stages": 5}, "deeper pipeline"), "stop"),                              # off-space: repaired
    ("I'm sorry, but I can't help with that request.", "stop"),                      # a refusal
    (_genes({"threads_per_row": 256, "rows_per_cta": 2}, "more threads per row"), "stop"),
    (_genes({"unrol": 2}, "typo"), "stop"),                                          # unknown gene
    ('{"kind": "genes", "changes": {"load_cache": "n', "length"),                   # truncated
    (_genes({"load_cache": "nc"}, "read-only path"), "stop"),
    (_genes({"cluster": 2, "threads_per_row": 128}, "split rows over a cluster"), "stop"),
    (_genes({"streaming_store": True}, "do not keep y in L2"), "stop"),
    (_genes({"rows_per_cta": 4, "threads_per_row": 64}, "more rows per CTA"), "stop"),
] * 4


class ScriptedChat:
    """Hands out ANSWERS in order (a test double: no model, no network)."""

    endpoint = "scripted answers written for the tests (tests/data/make_llm_transcript.py)"

    def __init__(self):
        self.i = 0

    def complete(self, messages):
        answer, finish = ANSWERS[self.i % len(ANSWERS)]
        self.i += 1
        prompt_chars = sum(len(m["content"]) for m in messages)
        return {"status": "ok", "error": "", "answer": answer, "finish_reason": finish,
                "prompt_tokens": prompt_chars // 4, "completion_tokens": max(1, len(answer) // 4),
                "latency_s": 0.0, "attempts": [{"status": "ok", "latency_s": 0.0}]}


def main() -> None:
    from evo.config import load_config
    from evo.proposers import ProposalMixer
    from evo.run import Run, new_run_info
    from evo.store import open_store
    from fitness.replay import ReplayEvaluator
    from genomes import load_space
    from operators.llm import write_transcript

    cfg = load_config(CONFIG).with_overrides({"operators.llm.replay": "",
                                              "operators.llm.base_url": "http://written-for-the-tests.invalid/v1"})
    space = load_space(cfg.experiment.family)
    store = open_store("memory://")
    store.create_run(new_run_info(cfg, "transcript"))
    evaluator = ReplayEvaluator.from_file(cfg.resolve(cfg.evaluator.replay), space)
    run = Run(cfg, space, store, evaluator, "transcript")
    run.mixer = ProposalMixer(cfg, space, store, "transcript", evaluator, chat=ScriptedChat())
    run.optimize()
    exchanges = store.events("transcript", "llm")
    write_transcript(exchanges, OUT, note="WRITTEN FOR THE TESTS: every answer below is hand-written "
                     "(tests/data/make_llm_transcript.py), no model produced it; the prompts are what "
                     "experiments/synthetic_llm_replay.toml's run sent")
    print(f"{OUT}: {len(exchanges)} exchanges")


if __name__ == "__main__":
    main()
