"""A progress bar over the evaluation budget showing the best fitness so far."""

from __future__ import annotations

import sys
from typing import Sequence

from tqdm import tqdm


class ProgressBar:
    def __init__(self, total: int, metric: str, enabled: bool = True):
        self.metric = metric
        self.bar = tqdm(total=total, unit="eval", dynamic_ncols=True, disable=(not enabled) or not sys.stderr.isatty(),
                        file=sys.stderr, desc="evo")

    def __call__(self, run, new_records: Sequence) -> None:
        self.bar.n = run.evaluations
        best = run.best()
        stage = run.stages[min(run.stage_index, len(run.stages) - 1)].strategy
        failed = sum(1 for r in new_records if not r.status.ok)
        post = {"stage": stage.name, "gen": stage.generation,
                "best": f"{best.fitness(self.metric):.4g}" if best else "-"}
        if failed:
            post["failed+"] = failed
        self.bar.set_postfix(post, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
