"""Evidence of one evaluation as plain data: what the guided rules test and what an LLM prompt quotes.

An Evaluation carries its evidence as strings (fitness.cascade writes the ptxas report, the
per-kernel resources and a SASS opcode summary into `artifacts`, per-case timings into `cases`).
`Evidence.of(evaluation)` reads them once into numbers and short tables:

    ev = Evidence.of(evaluation, baseline="torch")
    ev.features()            # {"ok": 1, "spill_bytes": 0, "registers": 48, "fitness": 1.27, ...}
    ev.case_features("N <= 1024")    # median fraction of the roofline, speedup, count, over those cases

Case filters are expressions over a case's parameters in fitness.raw's whitelisted language (no
Python from a rule or a proposal ever runs). Nothing here knows a family: parameters, genes and
kernels are whatever the evaluation names.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping

from fitness.raw import ExpressionError, evaluate
from fitness.records import Evaluation, Status

#: longest excerpt of a compiler log or failure message quoted in a prompt
QUOTE_CHARS = 1500


def _json(text: str | None, default: Any) -> Any:
    try:
        return json.loads(text) if text else default
    except (TypeError, ValueError):
        return default


@dataclass(frozen=True)
class CaseEvidence:
    case: str
    params: Mapping[str, Any]
    status: str
    time_us: float | None
    tbps: float | None
    fraction: float | None          # TB/s over the measured copy ceiling (the roofline)
    speedup: float | None           # baseline time / time
    message: str = ""


@dataclass(frozen=True)
class Evidence:
    key: str
    status: str
    message: str
    genome: Mapping[str, Any]
    fitness: float | None
    suspect: bool
    resources: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)   # per kernel entry
    sass: Mapping[str, int] = field(default_factory=dict)
    compile_log: str = ""
    cases: tuple[CaseEvidence, ...] = ()
    gpu_seconds: float | None = None

    @classmethod
    def of(cls, ev: Evaluation, metric: str = "geomean_speedup", baseline: str = "torch") -> "Evidence":
        arts = ev.artifacts or {}
        ceiling = _float(arts.get("copy_ceiling_tbps"))
        cases = []
        for c in ev.cases:
            frac = c.tbps / ceiling if (c.tbps and ceiling) else None
            cases.append(CaseEvidence(c.case, dict(c.params), c.status.value, c.time_us, c.tbps, frac,
                                      c.speedup(baseline), c.message))
        return cls(key=ev.key, status=ev.status.value, message=ev.message, genome=dict(ev.genome),
                   fitness=ev.fitness(metric), suspect=ev.suspect,
                   resources=_json(arts.get("resources"), {}), sass=_json(arts.get("sass_summary"), {}),
                   compile_log=str(arts.get("compile_log", "")), cases=tuple(cases),
                   gpu_seconds=_float(arts.get("gpu_seconds")))

    # -- numbers the rules test -----------------------------------------------------------
    def features(self) -> dict[str, Any]:
        """Numbers (and 0/1 flags) over the whole evaluation, plus the genome's genes: numeric
        genes by name, a string gene as `is_<gene>_<value>` = 1."""
        res = [r for r in self.resources.values() if isinstance(r, Mapping)]
        out: dict[str, Any] = {s.value.lower(): int(self.status == s.value) for s in Status}
        out.update({
            "failed": int(self.status != Status.OK.value),
            "suspect": int(self.suspect),
            "fitness": self.fitness if self.fitness is not None else 0.0,
            "registers": max((int(r.get("registers", 0)) for r in res), default=0),
            "spill_bytes": sum(int(r.get("spill_store_bytes", 0)) + int(r.get("spill_load_bytes", 0)) for r in res),
            "stack_bytes": max((int(r.get("stack_frame_bytes", 0)) for r in res), default=0),
            "static_shared_bytes": max((int(r.get("shared_bytes", 0)) for r in res), default=0),
            "sass_instructions": int(self.sass.get("instructions", 0)),
            "cases": len(self.cases),
            "failed_cases": sum(1 for c in self.cases if c.status != Status.OK.value),
        })
        for name, value in self.genome.items():
            if isinstance(value, bool) or isinstance(value, (int, float)):
                out[name] = value
            elif isinstance(value, str):
                out[f"is_{name}_{value}"] = 1
        return out

    def case_features(self, where: str = "") -> dict[str, float]:
        """Median fraction of the roofline and median speedup over the OK cases matching `where`
        (an expression over case parameters; empty: every case), and how many there were."""
        chosen = [c for c in self.cases if c.status == Status.OK.value and _matches(where, c.params)]
        fr = [c.fraction for c in chosen if c.fraction is not None]
        sp = [c.speedup for c in chosen if c.speedup is not None]
        return {"case_count": len(chosen),
                "case_fraction": statistics.median(fr) if fr else math.nan,
                "case_speedup": statistics.median(sp) if sp else math.nan}

    # -- text a prompt quotes -----------------------------------------------------------
    def as_text(self, max_cases: int = 40) -> str:
        """The evidence as plain lines (a prompt puts it between data delimiters)."""
        lines = [f"status: {self.status}" + (" (suspect: faster than the roofline)" if self.suspect else "")]
        if self.message:
            lines.append(f"message: {self.message[:QUOTE_CHARS]}")
        if self.fitness is not None:
            lines.append(f"fitness: {self.fitness:.5g}")
        for name, r in sorted(self.resources.items()):
            if isinstance(r, Mapping):
                lines.append(f"ptxas {name}: registers {r.get('registers')}, spill stores {r.get('spill_store_bytes')} B, "
                             f"spill loads {r.get('spill_load_bytes')} B, stack {r.get('stack_frame_bytes')} B, "
                             f"static smem {r.get('shared_bytes')} B, barriers {r.get('barriers')}")
        if self.sass:
            top = sorted(((k, v) for k, v in self.sass.items() if k != "instructions"), key=lambda kv: -kv[1])[:16]
            lines.append(f"SASS: {self.sass.get('instructions', '?')} instructions; "
                         + ", ".join(f"{k} {v}" for k, v in top))
        if self.cases:
            lines.append("cases (time us | TB/s | fraction of copy roofline | speedup vs baseline | status):")
            for c in self.cases[:max_cases]:
                lines.append(f"  {c.case}: {_f(c.time_us)} | {_f(c.tbps)} | {_f(c.fraction)} | {_f(c.speedup)} | "
                             f"{c.status}" + (f" ({c.message[:200]})" if c.status != Status.OK.value and c.message else ""))
        if self.status == Status.COMPILE_ERROR.value and self.compile_log:
            lines.append("compiler output:\n" + self.compile_log[:QUOTE_CHARS])
        return "\n".join(lines)


def _matches(where: str, params: Mapping[str, Any]) -> bool:
    if not where:
        return True
    try:
        return bool(evaluate(where, params))
    except ExpressionError:
        return False


def _float(text: Any) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


__all__ = ["CaseEvidence", "Evidence", "QUOTE_CHARS"]
