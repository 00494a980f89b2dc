"""Progress for long steps: a tqdm bar on a terminal, plain periodic lines anywhere else.

A bar redrawn with carriage returns is noise in a log file or a CI transcript, and nothing at all
is worse (`evo export` used to be silent for half a minute). So `Progress` draws a tqdm bar when
its stream is a terminal and otherwise writes one line every `every_s` seconds and one at the
end, e.g. `evo export: 12/19 kernels compiled (63%, 14 s)`.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any, Mapping, Sequence


class Progress:
    """Progress over `total` units (`total` 0: unknown). `update(n)` sets the count, `advance()`
    adds one; `info` is shown after the count (a bar's postfix, a line's tail)."""

    def __init__(self, total: int, desc: str, unit: str = "", *, enabled: bool = True,
                 stream: IO[str] | None = None, every_s: float = 10.0, tty: bool | None = None):
        self.total, self.desc, self.unit = int(total), desc, unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.every_s = every_s
        self.n = 0
        self.info: dict[str, Any] = {}
        self._start = self._last = time.monotonic()
        self._closed = False
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty())
        self._bar = None
        if enabled and tty:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total or None, unit=unit or "it", dynamic_ncols=True, file=self.stream,
                             desc=desc)

    def update(self, n: int | None = None, info: Mapping[str, Any] | None = None) -> None:
        if n is not None:
            self.n = int(n)
        if info is not None:
            self.info = dict(info)
        if not self.enabled or self._closed:
            return
        if self._bar is not None:
            self._bar.n = self.n
            self._bar.set_postfix(self.info, refresh=False)
            self._bar.refresh()
            return
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self._line()

    def advance(self, k: int = 1, info: Mapping[str, Any] | None = None) -> None:
        self.update(self.n + k, info)

    def line(self) -> str:
        """The plain line for the current state (what a log gets)."""
        count = f"{self.n}/{self.total}" if self.total else f"{self.n}"
        pct = f"{100 * self.n / self.total:.0f}%, " if self.total else ""
        tail = "".join(f", {k} {v}" for k, v in self.info.items())
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.desc}: {count}{unit} ({pct}{time.monotonic() - self._start:.0f} s{tail})"

    def _line(self) -> None:
        try:
            print(self.line(), file=self.stream, flush=True)
        except (BrokenPipeError, ValueError):   # a closed log: progress is not worth a traceback
            self.enabled = False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif self.enabled and self.n:
            self._line()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class ProgressBar:
    """A run's progress over its evaluation budget, with the best fitness so far (Run.on_progress)."""

    def __init__(self, total: int, metric: str, enabled: bool = True, *, stream: IO[str] | None = None,
                 every_s: float = 10.0, tty: bool | None = None):
        self.metric = metric
        self.progress = Progress(total, "evo", "evaluations", enabled=enabled, stream=stream, every_s=every_s, tty=tty)

    def __call__(self, run, new_records: Sequence) -> None:
        best = run.best()
        stage = run.stages[min(run.stage_index, len(run.stages) - 1)].strategy
        failed = sum(1 for r in new_records if not r.status.ok)
        info: dict[str, Any] = {"stage": stage.name, "gen": stage.generation,
                                "best": f"{best.fitness(self.metric):.4g}" if best else "-"}
        if failed:
            info["failed+"] = failed
        self.progress.update(run.evaluations, info)

    def close(self) -> None:
        self.progress.close()
