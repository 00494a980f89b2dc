"""Proposers mixed into a strategy's children: guided rules and an LLM, by the rates of [operators].

    [operators.guided]
    rate = 0.2                     # a fifth of the GA's children replaced by a guided proposal
    [operators.llm]
    rate = 0.1
    base_url = "http://localhost:8000/v1"
    model = "Qwen/Qwen2.5-Coder-32B-Instruct"

The Run hands every batch the strategy asks for to `ProposalMixer.mix`. Each child the strategy
made by variation (mutation, crossover) is, with probability guided.rate, replaced by what the
guided rules propose on the same parent, or with probability llm.rate by what the LLM proposes
(drawn from the mixer's own seeded generator, so a resumed run mixes exactly as the original did).
A proposal that fails (no rule fired, invalid answer, duplicate, endpoint down, budget spent)
leaves the strategy's child in place; a source proposal (a RawSource) is judged beside the batch
when the evaluator takes source (`evaluate_raw`) and is otherwise recorded as skipped. The
strategy is told about its own slots only (with the proposals that took some of them): it keeps
its population logic, the proposers only change which children it sees.

Every proposal and every LLM exchange is appended to the store as an event ("proposal", "llm"),
so `evo report` counts each operator's proposals, valid ones and their yield, and a resumed run
answers every prompt an earlier session asked from the store, without a server.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any, Mapping, Sequence

from fitness.records import Evaluation
from genomes import GeneSpace
from operators.candidate import Candidate
from operators.guided import GuidedOperator, RuleError
from operators.proposal import Proposal, Proposer, Request
from evo.config import Config

#: operator labels of the strategy's own variation that a proposer may take the place of
VARIED = ("mutation", "crossover")


def _varied(c: Candidate) -> bool:
    return c.raw is None and bool(c.parents) and c.operator.split("@")[0].split(":")[0] in VARIED


class ProposalMixer:
    def __init__(self, cfg: Config, space: GeneSpace, store: Any, run_id: str, evaluator: Any, *,
                 chat: Any = None, family: Any = None):
        ops = cfg.operators
        self.cfg, self.space, self.store, self.run_id = cfg, space, store, run_id
        self.metric = cfg.objective.metric
        self.rates = (ops.guided.rate, ops.llm.rate)
        self.known = ""         # evo.lessons.RunLessons.prompt_text(), set by the Run
        self.rng = random.Random(f"proposers/{cfg.experiment.seed}/{ops.seed}")
        self.takes_source = callable(getattr(evaluator, "evaluate_raw", None))
        family_name = cfg.experiment.family
        self.guided = None
        if ops.guided.rate > 0:
            rules = str(cfg.resolve(ops.guided.rules)) if ops.guided.rules else ""
            self.guided = GuidedOperator.for_family(space, family_name, rules, metric=self.metric,
                                                    baseline=cfg.objective.baseline)
        earlier = store.events(run_id)
        self._recorded = {"proposal": sum(1 for e in earlier if e["kind"] == "proposal"),
                          "llm": sum(1 for e in earlier if e["kind"] == "llm")}
        self._emitted = {"proposal": 0, "llm": 0}
        self.proposals: list[Proposal] = []
        # region rewrites judged or in flight (key -> (region, parent key)), and those that beat their
        # parent: alleles grafted onto later children ([operators.llm] graft)
        self._source_edits: dict[str, tuple[str, str, str]] = {}
        self.alleles: list[Any] = []
        self.graft_rate = ops.llm.graft if ops.llm.rate > 0 else 0.0
        self.llm = None
        if ops.llm.rate > 0:
            self.llm = build_llm(cfg, space, chat=chat, family=family,
                                 recorded=[e for e in earlier if e["kind"] == "llm"],
                                 takes_source=self.takes_source)

    @classmethod
    def build(cls, cfg: Config, space: GeneSpace, store: Any, run_id: str, evaluator: Any,
              **kw: Any) -> "ProposalMixer | None":
        """A mixer when [operators] asks for a proposer, else None (the run is the strategy alone)."""
        ops = cfg.operators
        if ops.guided.rate <= 0 and ops.llm.rate <= 0:
            return None
        return cls(cfg, space, store, run_id, evaluator, **kw)

    # -- mixing -------------------------------------------------------------------------------
    def proposers(self) -> list[tuple[float, Proposer]]:
        """(rate, proposer) in the order slots are drawn for and asked."""
        return [(rate, p) for rate, p in zip(self.rates, (self.guided, self.llm)) if p is not None and rate > 0]

    def mix(self, candidates: Sequence[Candidate], answered: Mapping[str, Evaluation]) -> tuple[list[Candidate], int]:
        """The batch to judge, and how many of its first candidates are the strategy's slots."""
        out = list(candidates)
        active = self.proposers()
        slots: list[list[int]] = [[] for _ in active]
        for i, c in enumerate(candidates):
            if not _varied(c):
                continue
            u, edge = self.rng.random(), 0.0
            for j, (rate, _) in enumerate(active):
                edge += rate
                if u < edge:
                    slots[j].append(i)
                    break
        taken = set(answered) | {c.key for c in candidates}
        extra: list[Candidate] = []
        for (_, proposer), mine in zip(active, slots):
            asked, requests = [], []
            for i in mine:
                parent = self._parent(candidates[i], answered)
                genome = self._genome(parent) if parent is not None else None
                if genome is not None:
                    asked.append(i)
                    requests.append(Request(parent, genome))
            if not requests:
                continue
            proposals = proposer.propose_many(requests, self.rng, taken, context=self._lessons(answered))
            if proposer is self.llm:
                self._log_exchanges()
            for i, p in zip(asked, proposals):
                if p.candidate is not None and p.candidate.raw is not None:
                    if p.changes.get("region") in getattr(self.llm, "regions", {}):
                        self._source_edits[p.candidate.key] = (p.changes["region"], p.candidate.raw.source, p.parent)
                    if not self.takes_source:
                        p = dataclasses.replace(p, outcome="skipped", candidate=None,
                                                reason="the evaluator judges no source (it has no evaluate_raw)")
                    else:
                        extra.append(p.candidate)
                elif p.candidate is not None:
                    out[i] = p.candidate
                if p.candidate is not None:
                    taken.add(p.candidate.key)
                self._log(p)
        extra += self._grafts(candidates, out, answered, taken)
        return out + extra, len(out)

    def _grafts(self, candidates: Sequence[Candidate], out: Sequence[Candidate], answered: Mapping[str, Evaluation],
                taken: set) -> list[Candidate]:
        """Winning region rewrites grafted onto some of the strategy's own children (beside them)."""
        if self.graft_rate <= 0 or not self.takes_source or self.llm is None or not self.llm.source_edits:
            return []
        from operators.llm import declare_entry  # noqa: PLC0415
        from operators.source_edit import SourceAllele, region_text  # noqa: PLC0415

        for key, (region, source, parent) in list(self._source_edits.items()):
            if key not in answered:
                continue
            del self._source_edits[key]
            f, pf = answered[key].fitness(self.metric), answered[parent].fitness(self.metric) if parent in answered else None
            if f is not None and pf and f > pf:
                code = region_text(source, self.llm.regions, region)
                self.alleles.append(SourceAllele(region, code, key, f / pf))
        if not self.alleles:
            return []
        grafts = []
        for i, c in enumerate(candidates):
            if out[i] is not c or not _varied(c) or self.rng.random() >= self.graft_rate:
                continue
            allele = self.alleles[self.rng.randrange(len(self.alleles))]
            try:
                raw = allele.graft(self.llm.family, self.llm.family_name, c.genome, self.llm.regions,
                                   self.llm.sample_case, self.llm.space_version, declare=declare_entry)
            except Exception as exc:  # noqa: BLE001 - a genome whose render lacks the region gets none
                self._log(Proposal(f"graft:{allele.region}", c.key, "invalid", f"cannot graft: {exc}"[:300]))
                continue
            op = f"graft:{allele.region}"
            problems = raw.problems()
            if problems or raw.key in taken:
                why = "; ".join(problems) if problems else f"source {raw.key} is judged already"
                self._log(Proposal(op, c.key, "invalid" if problems else "duplicate", why[:300],
                                   changes={"region": allele.region, "allele": allele.key}))
                continue
            cand = Candidate(c.genome, (c.key, allele.key), op, raw=raw)
            taken.add(cand.key)
            grafts.append(cand)
            self._log(Proposal(op, c.key, "valid", "", cand, raw.note, {"region": allele.region, "allele": allele.key}))
        return grafts

    def _parent(self, c: Candidate, answered: Mapping[str, Evaluation]) -> Evaluation | None:
        """The child's best judged parent (a crossover has two)."""
        evs = [answered[k] for k in c.parents if k in answered and not answered[k].space.endswith("/raw")]
        if not evs:
            return None
        return max(evs, key=lambda e: (e.fitness(self.metric) is not None, e.fitness(self.metric) or 0.0))

    def _genome(self, ev: Evaluation):
        try:
            return self.space.make(dict(ev.genome))
        except Exception:  # noqa: BLE001 - a parent outside this space cannot be edited here
            return None

    def _lessons(self, answered: Mapping[str, Evaluation], top: int = 3) -> str:
        scored = sorted(((e.fitness(self.metric), k, e) for k, e in answered.items()
                         if e.fitness(self.metric) is not None), key=lambda x: (-x[0], x[1]))[:top]
        lines = [f"{k}: {self.metric} {f:.4g}, genes {json.dumps(dict(e.genome), sort_keys=True)}"
                 for f, k, e in scored]
        text = ("best verified so far in this run:\n" + "\n".join(lines)) if lines else ""
        if self.known:          # the run's lessons ([search.lessons] prompt): what earlier runs learned
            text = (text + "\n" if text else "") + "lessons of earlier runs:\n" + self.known
        return text

    # -- the record -----------------------------------------------------------------------------
    def _append(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Append unless an earlier session of this run recorded it already (a resumed run
        proposes again, in the same order, what it proposed before)."""
        n = self._emitted[kind]
        self._emitted[kind] += 1
        if n >= self._recorded[kind]:
            self.store.append_event(self.run_id, kind, payload)

    def _log(self, p: Proposal) -> None:
        self.proposals.append(p)
        self._append("proposal", p.as_event())

    def _log_exchanges(self) -> None:
        for ex in self.llm.exchanges[self._emitted["llm"]:]:
            self._append("llm", ex)


def build_llm(cfg: Config, space: GeneSpace, *, chat: Any = None, family: Any = None,
              recorded: Sequence[Mapping[str, Any]] = (), takes_source: bool = True):
    from operators.llm import LLMOperator, LLMSettings, RecordedChat, read_transcript  # noqa: PLC0415

    llm = cfg.operators.llm
    settings = LLMSettings.from_mapping(dataclasses.asdict(llm))
    if settings.replay:
        settings = dataclasses.replace(settings, replay=str(cfg.resolve(settings.replay)))
        if chat is None:
            chat = RecordedChat(read_transcript(settings.replay), Path(settings.replay).name)
    sample_case = None
    if family is None and llm.source_edits and takes_source:
        family, sample_case = _family(cfg)
    elif family is not None:
        cases = family.benchmark_cases(cfg.benchmark.matrix)
        sample_case = cases[0] if cases else None
    return LLMOperator(settings, space, cfg.experiment.family, chat=chat, family=family, recorded=recorded,
                       metric=cfg.objective.metric, baseline=cfg.objective.baseline, arch=cfg.target.arch,
                       space_version=cfg.experiment.space_version, sample_case=sample_case,
                       source_edits=llm.source_edits and takes_source, takes_source=takes_source)


def _family(cfg: Config):
    from fitness.family import FamilyNotFound, load_family  # noqa: PLC0415
    from operators.source_edit import family_regions  # noqa: PLC0415

    if not family_regions(cfg.experiment.family):
        return None, None
    try:
        fam = load_family(cfg.experiment.family)
    except FamilyNotFound:
        return None, None
    cases = fam.benchmark_cases(cfg.benchmark.matrix)
    return fam, (cases[0] if cases else None)


def operator_problems(cfg: Config, space: GeneSpace) -> list[str]:
    """[operators] checked against the world: the rules load, the transcript and prompt exist, the
    SDK is installed for a live endpoint. One line per problem."""
    ops, problems = cfg.operators, []
    if ops.guided.rate > 0:
        try:
            GuidedOperator.for_family(space, cfg.experiment.family,
                                      str(cfg.resolve(ops.guided.rules)) if ops.guided.rules else "")
        except RuleError as exc:
            problems.append(f"operators.guided.rules: {exc}")
    if ops.llm.rate > 0:
        from operators.llm import PROMPTS_DIR, read_transcript  # noqa: PLC0415

        prompt = Path(ops.llm.prompt) if ops.llm.prompt.endswith(".md") else PROMPTS_DIR / f"{ops.llm.prompt}.md"
        if not prompt.is_file():
            problems.append(f"operators.llm.prompt: {prompt} does not exist (a name in operators/prompts/ or a .md path)")
        if ops.llm.replay:
            path = cfg.resolve(ops.llm.replay)
            try:
                read_transcript(path)
            except (OSError, ValueError) as exc:
                problems.append(f"operators.llm.replay: {path}: {exc}")
        else:
            try:
                import openai  # noqa: F401, PLC0415
            except ImportError:
                problems.append("operators.llm: a live endpoint needs the openai SDK: "
                                "pip install 'ptx-kernel-factory[llm]'")
    return problems


def write_run_transcript(source: str, out: str, run_id: str | None = None) -> int:
    """`evo transcript RUN --out FILE`: the run's LLM exchanges as a transcript for [operators.llm] replay."""
    import sys  # noqa: PLC0415

    from evo.analysis import load_run  # noqa: PLC0415
    from operators.llm import write_transcript  # noqa: PLC0415

    try:
        frames = load_run(source, run_id)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    exchanges = [e for e in frames.run.get("events") or [] if e.get("kind") == "llm"]
    if not exchanges:
        print(f"error: {source}: the run has no LLM exchanges (was [operators.llm] rate > 0?)", file=sys.stderr)
        return 2
    path = write_transcript(exchanges, out, note=f"LLM exchanges of run {frames.run['run_id']} ({source})")
    print(f"{path}: {len(exchanges)} exchanges of run {frames.run['run_id']}")
    return 0


__all__ = ["ProposalMixer", "VARIED", "build_llm", "operator_problems", "write_run_transcript"]
