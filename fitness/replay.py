"""Answer evaluations from a recording instead of the GPU (Kernel Tuner's simulation mode).

A recorded table makes every strategy runnable and testable on a laptop or in CI: the search
sees exactly the verdicts the GPU gave. A genome that was never recorded is an error by default
(silently inventing a verdict would make comparisons between strategies meaningless); set
`missing="invalid"` to treat unrecorded points as INVALID, e.g. when the table covers only part
of a space on purpose.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from genomes import Genome, GeneSpace
from fitness.evaluator import Evaluator
from fitness.records import Evaluation, Status, failed, is_json_name, read_json


class NotRecorded(LookupError):
    """The replay table has no verdict for a genome."""


class ReplayEvaluator(Evaluator):
    def __init__(self, evaluations: Iterable[Evaluation], *, missing: str = "error",
                 latency_s: float = 0.0, source: str = "", batch_size: int = 1):
        if missing not in ("error", "invalid"):
            raise ValueError("missing must be 'error' or 'invalid'")
        self._table: dict[str, Evaluation] = {}
        for ev in evaluations:
            self._table.setdefault(ev.key, ev)
        self.missing = missing
        # Simulated time per evaluation, so wall-time budgets and interruptions can be exercised.
        self.latency_s = float(latency_s)
        self.source = source
        self.batch_size = batch_size

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, key: str) -> bool:
        return key in self._table

    def evaluations(self) -> list[Evaluation]:
        """Every recorded verdict, one per genome key."""
        return list(self._table.values())

    def best(self, metric: str) -> Evaluation | None:
        scored = [e for e in self._table.values() if e.fitness(metric) is not None]
        return max(scored, key=lambda e: (e.fitness(metric), e.key)) if scored else None

    def evaluate(self, genomes: Sequence[Genome]) -> list[Evaluation]:
        out = []
        for g in genomes:
            start = time.time()
            if self.latency_s:
                time.sleep(self.latency_s)
            ev = self._table.get(g.key)
            if ev is None:
                if self.missing == "error":
                    raise NotRecorded(f"genome {g.key} ({g.as_dict()}) is not in the replay table {self.source!r}")
                out.append(failed(g, Status.INVALID, "not in replay table", started_at=start))
                continue
            artifacts = dict(ev.artifacts)
            artifacts["replayed_from"] = self.source or "table"
            out.append(Evaluation(**{**ev.__dict__, "artifacts": artifacts,
                                     "started_at": start, "finished_at": time.time()}))
        return out

    def accepts_evidence(self, evaluation: Evaluation) -> str:
        """The recorded run's own decision: "" where the recording answered this genome from earlier
        evidence (search.carry_seeds: its verdict has `carried_from`), else why not. The facts the
        recorded judge compared (device, driver, kernel source) are not here to compare again, and a
        replay must ask in the recorded order: carried seeds are recorded before the judged ones."""
        ev = self._table.get(evaluation.key)
        if ev is None:
            return "not in the replay table"
        if "carried_from" not in ev.artifacts:
            return "the recorded run judged it again"
        return ""

    def describe(self) -> dict[str, Any]:
        any_ev = next(iter(self._table.values()), None)
        return {"device": f"replay of {any_ev.device if any_ev else '?'}",
                "toolkit": any_ev.toolkit if any_ev else "", "source": self.source}

    # -- loading -----------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | Path, space: GeneSpace | None = None, **kw: Any) -> "ReplayEvaluator":
        """A JSON file (list of Evaluation dicts, or {"evaluations": [...]}; gzipped as .json.gz) or a CSV table.

        CSV columns: one per gene, then `status`, then objective columns (any other numeric
        column). A `space` is needed for CSV so gene columns can be typed and keyed.
        """
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"replay table {path} does not exist")
        kw.setdefault("source", str(path))
        if is_json_name(path):
            data = read_json(path)
            rows = data["evaluations"] if isinstance(data, Mapping) else data
            return cls((Evaluation.from_dict(r) for r in rows), **kw)
        if path.suffix == ".csv":
            if space is None:
                raise ValueError("a CSV replay table needs the gene space to type its columns")
            return cls(_read_csv(path, space), **kw)
        raise ValueError(f"replay table {path}: expected .json, .json.gz or .csv")


def _read_csv(path: Path, space: GeneSpace) -> Iterable[Evaluation]:
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            values = {}
            for gene in space.genes:
                raw = row[gene.name]
                legal = gene.values()
                values[gene.name] = next(v for v in legal if str(v) == raw)
            genome = space.make(values)
            status = Status(row["status"])
            objectives = {k: float(v) for k, v in row.items()
                          if k not in values and k not in ("status", "message") and v not in ("", None)}
            yield Evaluation(key=genome.key, genome=genome.as_dict(), space=space.name, status=status,
                             objectives=objectives if status is Status.OK else {},
                             message=row.get("message", ""), device="synthetic", toolkit="none")


def write_csv(path: str | Path, space: GeneSpace, evaluations: Iterable[Evaluation]) -> None:
    evaluations = list(evaluations)
    objective_names = sorted({k for e in evaluations for k in e.objectives})
    with Path(path).open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([*space.names, "status", "message", *objective_names])
        for e in evaluations:
            w.writerow([*(e.genome[n] for n in space.names), e.status.value, e.message,
                        *(repr(e.objectives[k]) if k in e.objectives else "" for k in objective_names)])
