"""What an evaluation produces: a status, per-case results, objectives and the evidence.

Failures are values here, never exceptions, so that a search can learn from a compile error or
a wrong result as much as from a timing, and so that every record can go into the store as is.
"""

from __future__ import annotations

import gzip
import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Mapping


class Status(str, Enum):
    OK = "OK"
    COMPILE_ERROR = "COMPILE_ERROR"  # nvcc/ptxas refused the source
    INVALID = "INVALID"              # compiled, but broke a static rule (spills, missing TMA/wgmma, smem)
    RUNTIME_ERROR = "RUNTIME_ERROR"  # launch failed or faulted (illegal address, misaligned access)
    WRONG_RESULT = "WRONG_RESULT"    # ran, but failed the correctness protocol
    TIMEOUT = "TIMEOUT"              # hung or exceeded the time limit; its worker was killed

    @property
    def ok(self) -> bool:
        return self is Status.OK


#: how the judge's message begins when the judge itself, not the candidate, ran out of device memory
#: on a case (fitness.device: after freeing everything it holds and trying once more)
JUDGE_OUT_OF_MEMORY = "judge out of device memory"


@dataclass(frozen=True)
class CaseResult:
    """One benchmark case (dtype x shape) of one candidate."""

    case: str                                   # stable id, e.g. "bf16/32768x4096"
    status: Status = Status.OK
    params: Mapping[str, Any] = field(default_factory=dict)
    time_us: float | None = None                # median
    spread_us: float | None = None              # inter-quartile range of the samples
    samples: int = 0
    tbps: float | None = None                   # fewest bytes the operation must move / time
    baselines_us: Mapping[str, float] = field(default_factory=dict)
    max_abs_err: float | None = None
    rel_l2_err: float | None = None
    message: str = ""

    @property
    def judge_ran_out_of_memory(self) -> bool:
        """The judge, not the candidate, ran out of device memory on this case: a verdict on the
        machine (an 80 GB card at a 2**31-element case beside five baselines), which the case
        judged again alone, in a new worker, may not repeat."""
        return self.status is Status.RUNTIME_ERROR and self.message.startswith(JUDGE_OUT_OF_MEMORY)

    def speedup(self, baseline: str) -> float | None:
        base = self.baselines_us.get(baseline)
        if base is None or not self.time_us:
            return None
        return base / self.time_us

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        d["params"] = dict(self.params)
        d["baselines_us"] = dict(self.baselines_us)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CaseResult":
        d = dict(d)
        d["status"] = Status(d.get("status", "OK"))
        return cls(**d)


@dataclass(frozen=True)
class Evaluation:
    """The judge's verdict on one genome. `objectives` are higher-is-better unless named `*_us`."""

    key: str
    genome: Mapping[str, Any]
    space: str
    status: Status
    objectives: Mapping[str, float] = field(default_factory=dict)
    cases: tuple[CaseResult, ...] = ()
    artifacts: Mapping[str, str] = field(default_factory=dict)
    device: str = ""
    toolkit: str = ""
    started_at: float = 0.0
    finished_at: float = 0.0
    message: str = ""
    suspect: bool = False   # faster than physics allows: recorded, never an elite

    def fitness(self, metric: str) -> float | None:
        """The value a search maximises, or None when the candidate cannot compete."""
        if self.status is not Status.OK or self.suspect:
            return None
        value = self.objectives.get(metric)
        if value is None or not math.isfinite(value):
            return None
        return float(value)

    @property
    def duration_s(self) -> float:
        return max(0.0, self.finished_at - self.started_at)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "genome": dict(self.genome),
            "space": self.space,
            "status": self.status.value,
            "objectives": dict(self.objectives),
            "cases": [c.to_dict() for c in self.cases],
            "artifacts": dict(self.artifacts),
            "device": self.device,
            "toolkit": self.toolkit,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "message": self.message,
            "suspect": self.suspect,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Evaluation":
        return cls(
            key=d["key"],
            genome=dict(d["genome"]),
            space=d["space"],
            status=Status(d["status"]),
            objectives={k: float(v) for k, v in (d.get("objectives") or {}).items()},
            cases=tuple(CaseResult.from_dict(c) for c in d.get("cases") or ()),
            artifacts=dict(d.get("artifacts") or {}),
            device=d.get("device", ""),
            toolkit=d.get("toolkit", ""),
            started_at=float(d.get("started_at", 0.0)),
            finished_at=float(d.get("finished_at", 0.0)),
            message=d.get("message", ""),
            suspect=bool(d.get("suspect", False)),
        )

    def with_times(self, started_at: float, finished_at: float | None = None) -> "Evaluation":
        return replace(self, started_at=started_at, finished_at=time.time() if finished_at is None else finished_at)


def failed(genome, status: Status, message: str, **kw: Any) -> Evaluation:
    """An Evaluation for a candidate that did not get as far as objectives."""
    now = time.time()
    return Evaluation(key=genome.key, genome=genome.as_dict(), space=genome.space, status=status,
                      message=message, started_at=kw.pop("started_at", now), finished_at=now, **kw)


def read_json(path: str | Path) -> Any:
    """A JSON file, gzip-compressed when its name ends in .gz. Recordings of finished sessions are
    kept compressed (results/sessionN/*.json.gz: 3.8 MB -> ~0.4 MB each), because every device
    call carries the whole working tree within 64 MiB; anything that reads a recording reads both."""
    path = Path(path)
    if path.name.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            return json.load(fh)
    return json.loads(path.read_text(encoding="utf-8"))


def is_json_name(path: str | Path) -> bool:
    """Whether read_json reads this file: NAME.json or NAME.json.gz."""
    name = Path(path).name
    return name.endswith(".json") or name.endswith(".json.gz")
