"""LLM proposals: a chat-completions endpoint reads a parent's evidence and proposes a change.

Any OpenAI-compatible endpoint works (vLLM, SGLang, Ollama, llama.cpp's server, hosted APIs),
through the official `openai` SDK (optional extra `llm`: pip install 'ptx-kernel-factory[llm]').
A prompt (operators/prompts/proposal_v1.md) gives the operation, the gene space with its docs, the
parent genome, its evidence quoted as delimited data (operators/evidence.py), what the run knows,
and, when the family marks editable regions (kernels/<family>/raw_launch.py), one region of the
parent's rendered source. The answer is one JSON object:

    {"kind": "genes",  "changes": {"chunks": 4}, "rationale": "..."}          -> a genome (validated)
    {"kind": "source", "region": "row_reduce", "code": "...", "rationale": "..."}   -> a RawSource
    {"kind": "kernel", "source": "...", "launch": {...}, "rationale": "..."}   -> a RawSource

Every exchange (prompt, answer, tokens, latency, cost, model, endpoint, attempts) is returned as
a plain dict for the store, so a run replays without a server (`RecordedChat`), answer for
answer. Failures are values: a timeout, a refused connection, 429/5xx after the retries, a
refusal, malformed or truncated JSON, an unknown gene, a forbidden #include, each becomes a
Proposal with its reason; nothing here raises for a bad answer. The API key is read from the
environment variable the settings name, handed to the SDK, and never written anywhere.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import difflib
import hashlib
import json
import os
import random
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from fitness.raw import LaunchSpec, RawSource
from genomes import GeneSpace
from operators.candidate import Candidate
from operators.evidence import Evidence
from operators.proposal import Proposal, Proposer, Request
from operators.source_edit import (RegionError, family_kernel, family_regions, parent_launch, region_text,
                                  replace_region)

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
DATA_OPEN, DATA_CLOSE = "<<<DATA", "<<<END"
_REFUSAL = re.compile(r"\b(I can(?:no|')t|I cannot|I'm sorry|I am sorry|unable to (?:help|assist)|I won't)\b", re.I)


@dataclass(frozen=True)
class LLMSettings:
    """What the operator needs to know of `[operators.llm]` (evo.config.LLMSection has the docs)."""

    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.2
    max_tokens: int = 2048
    timeout_s: float = 120.0
    retries: int = 3
    backoff_s: float = 2.0
    retry_after_max_s: float = 60.0
    concurrency: int = 1
    budget_tokens: int = 0
    budget_usd: float = 0.0
    price_per_1k_prompt: float = 0.0
    price_per_1k_completion: float = 0.0
    prompt: str = "proposal_v1"
    source_edits: bool = True
    kernel_rate: float = 0.0
    replay: str = ""

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any]) -> "LLMSettings":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return prompt_tokens / 1000 * self.price_per_1k_prompt + completion_tokens / 1000 * self.price_per_1k_completion


def prompt_sha(messages: Sequence[Mapping[str, str]], model: str) -> str:
    blob = json.dumps({"model": model, "messages": list(messages)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


# -- transports ------------------------------------------------------------------------------

class OpenAIChat:
    """A live endpoint through the openai SDK. The SDK's own retries are off (max_retries=0) so
    that every attempt is recorded; this loop retries 429, 5xx, timeouts and connection errors
    `retries` times, waiting what Retry-After asks (at most retry_after_max_s) or an exponential
    backoff."""

    def __init__(self, settings: LLMSettings, sleep=time.sleep):
        import openai  # noqa: PLC0415 - optional dependency, needed only for a live endpoint

        self.s = settings
        self._openai = openai
        self._sleep = sleep
        key = os.environ.get(settings.api_key_env, "") if settings.api_key_env else ""
        # local servers (vLLM, llama.cpp) take any key; the SDK insists on one
        self._client = openai.OpenAI(base_url=settings.base_url or None, api_key=key or "EMPTY",
                                     timeout=settings.timeout_s, max_retries=0)
        del key

    @property
    def endpoint(self) -> str:
        return self.s.base_url

    def complete(self, messages: Sequence[Mapping[str, str]]) -> dict[str, Any]:
        oa, s = self._openai, self.s
        attempts: list[dict[str, Any]] = []
        started = time.monotonic()
        for attempt in range(s.retries + 1):
            t0 = time.monotonic()
            retry_after: float | None = None
            try:
                resp = self._client.chat.completions.create(model=s.model, messages=list(messages),
                                                            temperature=s.temperature, max_tokens=s.max_tokens)
            except oa.APITimeoutError:
                status, detail, retryable = "timeout", f"no answer within {s.timeout_s:g} s", True
            except oa.APIConnectionError as exc:
                status, detail, retryable = "connection", _first_line(exc), True
            except oa.APIStatusError as exc:
                code = exc.status_code
                status, detail = f"http_{code}", _first_line(exc)[:300]
                retryable = code == 429 or code >= 500
                retry_after = _retry_after(exc.response.headers if exc.response is not None else {})
            else:
                attempts.append({"status": "ok", "latency_s": round(time.monotonic() - t0, 4)})
                return _exchange_from_response(resp, attempts, time.monotonic() - started, s)
            attempts.append({"status": status, "latency_s": round(time.monotonic() - t0, 4), "detail": detail,
                             **({"retry_after": retry_after} if retry_after is not None else {})})
            if not retryable or attempt == s.retries:
                break
            wait = retry_after if retry_after is not None else s.backoff_s * 2 ** attempt
            self._sleep(min(max(0.0, wait), s.retry_after_max_s))
        last = attempts[-1]
        return {"status": last["status"], "error": last.get("detail", ""), "answer": "", "finish_reason": "",
                "prompt_tokens": 0, "completion_tokens": 0, "latency_s": round(time.monotonic() - started, 4),
                "attempts": attempts}


class RecordedChat:
    """Answers from a transcript (exchanges recorded by an earlier run or written for a test).

    The n-th time a prompt is asked it gets the n-th recorded answer to that prompt (matched by
    prompt_sha). A prompt the transcript does not hold gets, with `by_order` (the default), the next
    answer not yet given, marked prompt_changed (the template or the evidence text changed since
    the recording; the answers are still replayed one for one), or else status "not_recorded".
    Never a network call."""

    def __init__(self, exchanges: Sequence[Mapping[str, Any]], source: str = "transcript", by_order: bool = True):
        self.source, self.by_order = source, by_order
        self._all = [dict(e) for e in exchanges]
        self._used = [False] * len(self._all)
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"replay of {self.source}"

    def complete(self, messages: Sequence[Mapping[str, str]], sha: str = "") -> dict[str, Any]:
        with self._lock:
            pick = next((i for i, e in enumerate(self._all) if not self._used[i] and e.get("prompt_sha") == sha), None)
            changed = False
            if pick is None and self.by_order:
                pick = next((i for i, u in enumerate(self._used) if not u), None)
                changed = pick is not None
            if pick is None:
                return {"status": "not_recorded", "error": f"{self.source} has no answer to prompt {sha}",
                        "answer": "", "finish_reason": "", "prompt_tokens": 0, "completion_tokens": 0,
                        "latency_s": 0.0, "attempts": []}
            self._used[pick] = True
            ex = self._all[pick]
        out = {k: ex.get(k) for k in ("status", "error", "answer", "finish_reason", "prompt_tokens",
                                       "completion_tokens", "latency_s", "attempts", "refusal")}
        return out | {"replayed": True, "recorded_endpoint": ex.get("endpoint", ""), "recorded_model": ex.get("model", ""),
                      **({"prompt_changed": True} if changed else {})}


def read_transcript(path: str | Path) -> list[dict[str, Any]]:
    """Exchanges of a transcript file ({"exchanges": [...]}, as write_transcript makes)."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, Mapping) or not isinstance(data.get("exchanges"), list):
        raise ValueError(f"{path}: not a transcript (expected {{\"exchanges\": [...]}})")
    return [dict(e) for e in data["exchanges"]]


def write_transcript(exchanges: Sequence[Mapping[str, Any]], path: str | Path, note: str = "") -> Path:
    path = Path(path)
    path.write_text(json.dumps({"note": note, "exchanges": list(exchanges)}, indent=1) + "\n")
    return path


# -- the operator -------------------------------------------------------------------------------

LLMRequest = Request          # one parent to propose from (operators.proposal.Request)


class LLMOperator(Proposer):
    """Proposals from a chat endpoint (or a transcript), within a token and money budget."""

    name = "llm"

    def __init__(self, settings: LLMSettings, space: GeneSpace, family_name: str, *, chat: Any = None,
                 family: Any = None, recorded: Sequence[Mapping[str, Any]] = (), metric: str = "geomean_speedup",
                 baseline: str = "torch", arch: str = "sm_90a", space_version: str = "",
                 source_edits: bool | None = None, sample_case: Any = None, takes_source: bool = True):
        self.s = settings
        self.space, self.family_name, self.family = space, family_name, family
        self.metric, self.baseline, self.arch, self.space_version = metric, baseline, arch, space_version
        self.sample_case = sample_case
        self.takes_source = takes_source           # the evaluator judges RawSource candidates (evaluate_raw)
        if chat is None:
            chat = RecordedChat(read_transcript(settings.replay), settings.replay) if settings.replay \
                else OpenAIChat(settings)
        self.chat = chat
        self.recorded = [dict(e) for e in recorded]        # this run's exchanges from an earlier session
        self.exchanges: list[dict[str, Any]] = []          # every exchange of this session, in order
        self.regions = family_regions(family_name) if family is not None else {}
        want = settings.source_edits if source_edits is None else source_edits
        self.source_edits = bool(want and self.regions and family is not None)
        self.template = _read_prompt(settings.prompt)
        self.source_template = _read_prompt(settings.prompt.replace("proposal", "source_section")) \
            if (PROMPTS_DIR / f"{settings.prompt.replace('proposal', 'source_section')}.md").is_file() else ""
        # whole kernels from scratch: only for a family that says how its entry is called
        self.kernel_spec = family_kernel(family_name) if family is not None else {}
        kernel_prompt = settings.prompt.replace("proposal", "kernel_section")
        self.kernel_template = _read_prompt(kernel_prompt) \
            if (PROMPTS_DIR / f"{kernel_prompt}.md").is_file() else ""

    # -- budget ---------------------------------------------------------------------------
    @property
    def spent_tokens(self) -> int:
        return sum(int(e.get("prompt_tokens") or 0) + int(e.get("completion_tokens") or 0) for e in self.exchanges)

    @property
    def spent_usd(self) -> float:
        return sum(float(e.get("cost_usd") or 0.0) for e in self.exchanges)

    def budget_left(self) -> str:
        """"" while the budget allows another request, else why not."""
        if self.s.budget_tokens and self.spent_tokens >= self.s.budget_tokens:
            return f"token budget spent ({self.spent_tokens} of {self.s.budget_tokens})"
        if self.s.budget_usd and self.spent_usd >= self.s.budget_usd:
            return f"money budget spent (${self.spent_usd:.4f} of ${self.s.budget_usd:g})"
        return ""

    # -- prompts --------------------------------------------------------------------------
    def messages(self, req: LLMRequest, index: int, lessons: str = "") -> tuple[list[dict[str, str]], str]:
        """The chat messages for one parent, and the region offered for rewriting ("" for none)."""
        region = ""
        fields = {
            "arch": self.arch, "family": self.family_name, "space_name": self.space.name,
            "operation": _operation_text(self.family_name),
            "gene_space": _space_text(self.space), "parent_key": req.parent.key,
            "parent_genome": json.dumps(dict(req.genome.as_dict()), sort_keys=True),
            "evidence": Evidence.of(req.parent, self.metric, self.baseline).as_text(),
            "lessons": lessons or "none recorded for this setting", "baseline": self.baseline,
            "source_section": "", "source_formats": "",
        }
        if self.source_edits and self.source_template:
            names = sorted(self.regions)
            region = names[index % len(names)]
            try:
                text = region_text(self.family.render(req.genome), self.regions, region)
            except (RegionError, Exception):  # noqa: BLE001 - a family that cannot render offers no region
                region, text = "", ""
            if region:
                fields["source_section"] = _fill(self.source_template, {
                    "regions": "\n".join(f"  {n}: {self.regions[n].get('doc', '')}" for n in names),
                    "region": region, "region_text": _quote(text)})
                fields["source_formats"] = (
                    '  {"kind": "source", "region": "<one editable region>", "code": "<the whole new definition>", '
                    '"rationale": "..."}\n      a rewrite of one editable region; the parent\'s launch is kept.\n')
        if self.offers_kernel(index, req):
            fields["source_section"] += "\n" + self._kernel_section(req)
            fields["source_formats"] += (
                '  {"kind": "kernel", "source": "<the whole CUDA source>", "launch": {<launch JSON>}, '
                '"flags": [], "rationale": "..."}\n      a new kernel from scratch with its own launch.\n')
        template = re.sub(r"<!--.*?-->\s*", "", self.template, flags=re.S)     # the file's own comment
        text = _fill(template, {k: _quote(v) if k in _DATA_FIELDS else v for k, v in fields.items()})
        system, _, user = text.partition("=== USER ===")
        system = system.strip()
        return [{"role": "system", "content": system}, {"role": "user", "content": user.strip()}], region

    def offers_kernel(self, index: int, req: LLMRequest | None = None) -> bool:
        """Whether request `index` also offers writing a whole kernel: a share `kernel_rate` of the
        requests, spread evenly by index (so a replay asks the same prompts), and only when the family
        says how its entry is called, the evaluator takes source and the prompt has a kernel section."""
        rate = self.s.kernel_rate
        if rate <= 0 or not (self.kernel_spec and self.kernel_template and self.takes_source):
            return False
        return int((index + 1) * rate + 1e-9) > int(index * rate + 1e-9)

    def _kernel_section(self, req: LLMRequest) -> str:
        """The whole-kernel part of a prompt: the entry convention, the launch language, a launch to
        start from and the parent's rendered source with its launch on the sample case (all data)."""
        case = self.sample_case
        params, buffers, launch_text = "(the case's parameters)", "the family's inputs and outputs", "unknown"
        if case is not None:
            params = ", ".join(sorted(case.params))
            ins, outs = self.family.io(case)
            names = list(ins) + list(outs) + list(self.family.workspace(case))
            buffers = ", ".join(names)
            try:
                launches = self.family.launch(req.genome, case)
                launch_text = repr(launches) if launches is not None else "none (the parent cannot run it)"
            except Exception as exc:  # noqa: BLE001 - a parent whose launch fails still gets a prompt
                launch_text = f"(its launch failed: {type(exc).__name__})"
        try:
            source = self.family.render(req.genome)
        except Exception as exc:  # noqa: BLE001
            source = f"(the parent does not render: {type(exc).__name__}: {exc})"
        return _fill(self.kernel_template, {
            "convention": _quote(self.kernel_spec["convention"]),
            "example_launch": _quote(json.dumps(self.kernel_spec["example_launch"])),
            "case_params": params, "buffers": buffers,
            "sample_case": getattr(case, "id", "(none)"), "parent_launch": _quote(launch_text),
            "parent_source": _quote(source)})

    # -- asking ---------------------------------------------------------------------------
    def propose_many(self, requests: Sequence[LLMRequest], rng: random.Random, taken: Collection[str] = (),
                     context: str = "") -> list[Proposal]:
        """One proposal per request, in order; requests go out `concurrency` at a time while the
        budget lasts (the rest: outcome "skipped")."""
        out: list[Proposal] = []
        taken = set(taken)
        i = 0
        while i < len(requests):
            why = self.budget_left()
            if why:
                out += [Proposal("llm", r.parent.key, "skipped", why) for r in requests[i:]]
                break
            wave = requests[i:i + max(1, self.s.concurrency)]
            prepared = []
            for req in wave:
                index = len(self.exchanges) + len(prepared)
                msgs, region = self.messages(req, index, context)
                prepared.append((req, index, msgs, region, prompt_sha(msgs, self.s.model)))
            answers = self._ask([(idx, msgs, sha) for _, idx, msgs, _, sha in prepared])
            for (req, index, msgs, region, sha), ex in zip(prepared, answers):
                ex = self._exchange(index, msgs, sha, region, ex)
                self.exchanges.append(ex)
                p = self.judge_answer(req, ex, rng, taken)
                if p.candidate is not None:
                    taken.add(p.candidate.key)
                out.append(p)
            i += len(wave)
        return out

    def _ask(self, batch: Sequence[tuple[int, list[dict[str, str]], str]]) -> list[dict[str, Any]]:
        def one(item):
            index, msgs, sha = item
            if index < len(self.recorded) and self.recorded[index].get("prompt_sha") == sha:
                ex = dict(self.recorded[index])          # resumed: answered in an earlier session
                ex["resumed"] = True
                return ex
            if isinstance(self.chat, RecordedChat):
                return self.chat.complete(msgs, sha)
            return self.chat.complete(msgs)

        if len(batch) == 1:
            return [one(batch[0])]
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(batch)) as pool:
            return list(pool.map(one, batch))

    def _exchange(self, index: int, msgs: list[dict[str, str]], sha: str, region: str,
                  ex: Mapping[str, Any]) -> dict[str, Any]:
        pt, ct = int(ex.get("prompt_tokens") or 0), int(ex.get("completion_tokens") or 0)
        out = {"index": index, "prompt_sha": sha, "prompt_version": self.s.prompt, "model": self.s.model,
               "endpoint": getattr(self.chat, "endpoint", ""), "messages": msgs, "region": region,
               "status": ex.get("status", "error"), "error": ex.get("error", ""), "answer": ex.get("answer", ""),
               "finish_reason": ex.get("finish_reason", ""), "refusal": ex.get("refusal") or "",
               "prompt_tokens": pt, "completion_tokens": ct, "latency_s": float(ex.get("latency_s") or 0.0),
               "cost_usd": round(self.s.cost(pt, ct), 8), "attempts": list(ex.get("attempts") or [])}
        if ex.get("replayed") or ex.get("resumed"):
            out["replayed"] = True
        if ex.get("prompt_changed"):
            out["prompt_changed"] = True
        for k in ("recorded_endpoint", "recorded_model"):
            if ex.get(k):
                out[k] = ex[k]
        return out

    # -- reading an answer ----------------------------------------------------------------
    def judge_answer(self, req: LLMRequest, ex: Mapping[str, Any], rng: random.Random,
                     taken: Collection[str]) -> Proposal:
        parent, index = req.parent.key, ex.get("index")
        if ex.get("status") != "ok":
            return Proposal("llm", parent, "error", f"{ex.get('status')}: {ex.get('error', '')}"[:500], exchange=index)
        if ex.get("refusal"):
            return Proposal("llm", parent, "invalid", f"refused: {str(ex['refusal'])[:300]}", exchange=index)
        text = str(ex.get("answer") or "")
        obj, why = parse_answer(text)
        if obj is None:
            if ex.get("finish_reason") == "length":
                why = f"truncated answer (finish_reason=length, {ex.get('completion_tokens')} tokens): {why}"
            elif _REFUSAL.search(text[:400]):
                why = f"refused: {text[:200]!r}"
            return Proposal("llm", parent, "invalid", why, exchange=index)
        rationale = str(obj.get("rationale", ""))[:2000]
        kind = obj.get("kind", "genes")
        if kind == "genes":
            return self._genes(req, obj, rationale, rng, taken, index)
        if kind in ("source", "kernel"):
            return self._source(req, obj, kind, rationale, taken, index)
        return Proposal("llm", parent, "invalid", f"unknown kind {kind!r} (genes, source or kernel)",
                        rationale=rationale, exchange=index)

    def _genes(self, req: LLMRequest, obj: Mapping[str, Any], rationale: str, rng: random.Random,
               taken: Collection[str], index: Any) -> Proposal:
        op, parent = "llm:genes", req.parent.key
        changes = obj.get("changes")
        if not isinstance(changes, Mapping) or not changes:
            return Proposal(op, parent, "invalid", "'changes' must be a non-empty object of gene: value",
                            rationale=rationale, exchange=index)
        unknown = [g for g in changes if g not in self.space.names]
        if unknown:
            hints = [f"{g!r}" + (f" (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(
                str(g), self.space.names, n=1)) else "") for g in unknown]
            return Proposal(op, parent, "invalid", "unknown gene " + ", ".join(hints), rationale=rationale,
                            changes=dict(changes), exchange=index)
        values = self.space.complete(req.genome.as_dict()) | {k: _number(v) for k, v in changes.items()}
        problems = self.space.violations(values)
        try:
            child = self.space.repair(values, rng) if problems else self.space.make(values)
        except Exception as exc:  # noqa: BLE001 - a value no gene can hold (e.g. a list)
            return Proposal(op, parent, "invalid", f"cannot repair: {exc}"[:500], rationale=rationale,
                            changes=dict(changes), exchange=index)
        if child.key == parent:
            why = "the changes repair back to the parent" if problems else "the changes leave the parent as it is"
            return Proposal(op, parent, "invalid", why + ("; " + "; ".join(problems) if problems else ""),
                            rationale=rationale, changes=dict(changes), exchange=index)
        if child.key in taken:
            return Proposal(op, parent, "duplicate", f"genome {child.key} is judged already", rationale=rationale,
                            changes=dict(changes), exchange=index)
        cand = Candidate(child, (parent,), op)
        if problems:
            return Proposal(op, parent, "repaired", "; ".join(problems)[:500], cand, rationale, dict(changes), index)
        return Proposal(op, parent, "valid", "", cand, rationale, dict(changes), index)

    def _source(self, req: LLMRequest, obj: Mapping[str, Any], kind: str, rationale: str,
                taken: Collection[str], index: Any) -> Proposal:
        op, parent = "llm:source", req.parent.key
        if not self.takes_source:
            return Proposal(op, parent, "skipped", "the evaluator judges no source (it has no evaluate_raw)",
                            rationale=rationale, exchange=index)
        if kind == "source" and (self.family is None or not self.regions):
            return Proposal(op, parent, "invalid", f"family {self.family_name!r} marks no editable regions "
                            "(kernels/<family>/raw_launch.py)", rationale=rationale, exchange=index)
        try:
            if kind == "source":
                region, code = str(obj.get("region", "")), obj.get("code")
                if not isinstance(code, str) or not code.strip():
                    raise ValueError("'code' must be the new definition of the region, as text")
                source = replace_region(self.family.render(req.genome), self.regions, region, code)
                launch: Any = parent_launch(self.family, self.family_name, req.genome, self.sample_case,
                                            self.space_version)
                source = declare_entry(source, launch.kernel)
                flags = tuple(self.family.compile_flags(req.genome))
                changes = {"region": region}
            else:
                source = obj.get("source")
                if not isinstance(source, str) or not source.strip():
                    raise ValueError("'source' must be the kernel's CUDA source, as text")
                launch = LaunchSpec.from_dict(obj.get("launch") or {})
                flags, changes = tuple(str(f) for f in obj.get("flags", ())), {"region": "(whole kernel)"}
        except (RegionError, ValueError, TypeError) as exc:
            return Proposal(op, parent, "invalid", str(exc)[:500], rationale=rationale, exchange=index)
        raw = RawSource(family=self.family_name, source=source, launch=launch, flags=flags, origin="llm",
                        parent=parent, note=rationale)
        problems = raw.problems()
        if problems:
            return Proposal(op, parent, "invalid", "; ".join(problems)[:500], rationale=rationale,
                            changes=changes, exchange=index)
        if raw.key in taken:
            return Proposal(op, parent, "duplicate", f"source {raw.key} is judged already", rationale=rationale,
                            changes=changes, exchange=index)
        return Proposal(op, parent, "valid", "", Candidate(req.genome, (parent,), op, raw=raw), rationale,
                        changes, index)


# -- helpers -------------------------------------------------------------------------------------

_DATA_FIELDS = ("operation", "gene_space", "parent_genome", "evidence", "lessons")


def declare_entry(source: str, kernel: str) -> str:
    """A rendered template may generate its extern "C" entries with a macro (RMSNorm's RMS_ENTRY),
    which fitness.raw.RawSource.problems() cannot see in the text; when the entry's name is in the
    source as a macro argument, say so in a comment line it can read (nothing compiled changes)."""
    if not kernel or re.search(r'extern\s+"C"[^;{]*\b' + re.escape(kernel) + r"\s*\(", source):
        return source
    if not re.search(r"\b" + re.escape(kernel) + r"\b", source):
        return source                  # not generated either: problems() rightly refuses it
    return source + f'\n// entry generated by a macro above: extern "C" {kernel}(...)\n'


def parse_answer(text: str) -> tuple[dict[str, Any] | None, str]:
    """The first JSON object of an answer (markdown fences and prose around it allowed), or None
    and why not."""
    if not text.strip():
        return None, "empty answer"
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    candidates = [fenced.group(1)] if fenced else []
    start = text.find("{")
    if start >= 0:
        candidates.append(text[start:])
    if not candidates:
        return None, "no JSON object in the answer"
    last = ""
    for c in candidates:
        try:
            obj, _ = json.JSONDecoder().raw_decode(c)
        except json.JSONDecodeError as exc:
            last = f"malformed JSON: {exc.msg} at character {exc.pos}"
            continue
        if isinstance(obj, dict):
            return obj, ""
        last = "the JSON answer is not an object"
    return None, last


def _number(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _quote(text: str) -> str:
    """Data as data: a delimiter inside it cannot close its section."""
    return str(text).replace(DATA_OPEN, "<<DATA").replace(DATA_CLOSE, "<<END")


def _fill(template: str, fields: Mapping[str, str]) -> str:
    return re.sub(r"\{\{(\w+)\}\}", lambda m: str(fields.get(m.group(1), m.group(0))), template)


def _read_prompt(name: str) -> str:
    path = Path(name) if name.endswith(".md") else PROMPTS_DIR / f"{name}.md"
    return path.read_text()


def _operation_text(family: str) -> str:
    from fitness.family import KERNELS_DIR  # noqa: PLC0415

    readme = KERNELS_DIR / family / "README.md"
    return "\n".join(readme.read_text().splitlines()[:40]) if readme.is_file() else f"kernel family {family}"


def _space_text(space: GeneSpace) -> str:
    lines = []
    for g in space.genes:
        lines.append(f"{g.name} in {g.describe_values()}: {g.doc}")
    for c in space.constraints:
        lines.append(f"constraint {c.describe()}")
    return "\n".join(lines)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    for name in ("retry-after-ms", "retry-after"):
        v = headers.get(name) if hasattr(headers, "get") else None
        if v is None:
            continue
        try:
            return float(v) / (1000.0 if name.endswith("-ms") else 1.0)
        except ValueError:
            continue
    return None


def _exchange_from_response(resp: Any, attempts: list, latency: float, s: LLMSettings) -> dict[str, Any]:
    choice = resp.choices[0] if getattr(resp, "choices", None) else None
    msg = getattr(choice, "message", None)
    answer = (getattr(msg, "content", None) or "") if msg is not None else ""
    usage = getattr(resp, "usage", None)
    pt = int(getattr(usage, "prompt_tokens", 0) or 0)
    ct = int(getattr(usage, "completion_tokens", 0) or 0)
    return {"status": "ok", "error": "", "answer": answer, "finish_reason": getattr(choice, "finish_reason", "") or "",
            "refusal": (getattr(msg, "refusal", None) or "") if msg is not None else "",
            "prompt_tokens": pt, "completion_tokens": ct, "latency_s": round(latency, 4), "attempts": attempts,
            "served_model": getattr(resp, "model", "") or ""}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["LLMOperator", "LLMRequest", "LLMSettings", "OpenAIChat", "RecordedChat", "parse_answer", "prompt_sha",
           "read_transcript", "write_transcript"]
