"""Figures of a run (matplotlib, no pyplot): each function takes RunFrames and, optionally, the
Axes to draw into, and returns the Figure. Figures are built with `matplotlib.figure.Figure`
directly, so nothing leaks into pyplot's global state and they render on any backend (Agg);
in a notebook, a returned Figure displays itself.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from evo.analysis import RunFrames, copy_ceiling, gene_effects_table, operator_table, per_generation
from fitness.family import DispatchKey

DEFAULT_COPY_CEILING_TBPS = 4.27   # H200, read + write (DESIGN.md); the run's measured value wins


def _axes(ax: Axes | None, figsize=(7.5, 4.0)) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def _no_data(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this run", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _case_labels(cases, keys: DispatchKey) -> list[str]:
    """Short x labels from the family's dispatch key: the ordered field's value (e.g. a row width,
    4K) when every other key column is the same for all cases, else the groups' values and the
    shape ("<group> 32768x4K"); the case id when the key names no column."""
    cols = [c for c in keys.columns if c in cases.columns]
    if not cols:
        return [str(c) for c in cases["case"]]
    ordered = keys.ordered.name if keys.ordered is not None else None

    def short(col, v):
        return _short(v) if col == ordered else str(v)

    if ordered in cols and all(cases[c].nunique() <= 1 for c in cols if c != ordered):
        return [_short(v) for v in cases[ordered]]
    labels = []
    for _, row in cases.iterrows():
        shape = "x".join(short(c, row[c]) for c in keys.shape if c in cases.columns)
        labels.append(" ".join([*(str(row[f.name]) for f in keys.exact if f.name in cases.columns), shape]).strip())
    return labels


def _short(n) -> str:
    try:
        n = int(n)
    except (TypeError, ValueError):
        return str(n)
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def fitness_curve(frames: RunFrames, ax: Axes | None = None) -> Figure:
    """Per generation: best and median fitness, and the share that cannot compete (twin axis)."""
    fig, ax = _axes(ax)
    table = per_generation(frames)
    if table.empty:
        _no_data(ax, "evaluations")
        return fig
    x = table["generation"].to_numpy()
    ax.plot(x, table["best"], marker="o", label="best")
    ax.plot(x, table["median"], marker=".", linestyle="--", label="median")
    ax.set_xlabel("generation")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(frames.metric)
    twin = ax.twinx()
    twin.bar(x, table["invalid_share"], width=0.6, alpha=0.2, color="tab:red", label="share invalid")
    twin.set_ylim(0, 1)
    twin.set_ylabel("share failed or suspect")
    ax.set_zorder(twin.get_zorder() + 1)
    ax.patch.set_visible(False)
    handles = ax.get_legend_handles_labels()
    th = twin.get_legend_handles_labels()
    ax.legend(handles[0] + th[0], handles[1] + th[1], loc="lower right")
    ax.set_title(f"{frames.run['run_id']}: {frames.metric} per generation", fontsize="medium")
    return fig


def best_so_far(frames: RunFrames, ax: Sequence[Axes] | None = None) -> Figure:
    """Best fitness so far against evaluations (left) and against cumulative time (right): GPU
    seconds when the records carry them, else evaluation wall time. `ax`: a pair of Axes."""
    if ax is None:
        fig = Figure(figsize=(10, 3.8), layout="constrained")
        left, right = fig.subplots(1, 2)
    else:
        left, right = ax
        fig = left.figure
    ev = frames.evaluations.sort_values("seq")
    if ev.empty:
        _no_data(left, "evaluations")
        _no_data(right, "evaluations")
        return fig
    best = ev["fitness"].cummax().to_numpy()   # NaN until the first scored evaluation
    n = np.arange(1, len(ev) + 1)
    left.step(n, best, where="post")
    left.set_xlabel("evaluations")
    left.set_ylabel(f"best {frames.metric} so far")
    if ev["gpu_seconds"].notna().any():
        t, label = ev["gpu_seconds"].fillna(0.0).cumsum(), "cumulative GPU seconds"
    else:
        t, label = ev["duration_s"].fillna(0.0).cumsum(), "cumulative evaluation seconds"
    right.step(t.to_numpy(), best, where="post", color="tab:green")
    right.set_xlabel(label)
    right.set_ylabel(f"best {frames.metric} so far")
    return fig


def speedup_per_case(frames: RunFrames, ax: Axes | None = None) -> Figure:
    """The best genome's speedup per benchmark case against every baseline (grouped bars)."""
    fig, ax = _axes(ax, figsize=(9, 4))
    cases = frames.best_cases()
    names = frames.baselines
    if cases.empty or not names:
        _no_data(ax, "timed cases with baselines")
        return fig
    x = np.arange(len(cases))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        ax.bar(x + (i - (len(names) - 1) / 2) * width, cases[f"speedup.{name}"].fillna(0.0), width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, _case_labels(cases, frames.keys), rotation=45, ha="right")
    ax.set_ylabel("speedup (baseline time / kernel time)")
    ax.set_title(f"best genome {frames.best()['key']}: speedup per case", fontsize="medium")
    ax.legend(title="vs")
    return fig


def bandwidth(frames: RunFrames, ax: Axes | None = None,
              ceiling_tbps: float = DEFAULT_COPY_CEILING_TBPS) -> Figure:
    """Achieved TB/s per case of the best genome (bars), each baseline's TB/s on the same bytes
    (markers), and the copy ceiling (line; the run's measured one when recorded)."""
    fig, ax = _axes(ax, figsize=(9, 4))
    cases = frames.best_cases()
    if cases.empty:
        _no_data(ax, "timed cases")
        return fig
    x = np.arange(len(cases))
    ax.bar(x, cases["tbps"].fillna(0.0), 0.6, label="best genome")
    for name in frames.baselines:
        implied = cases["tbps"] * cases["time_us"] / cases[f"base.{name}_us"]
        ax.plot(x, implied, linestyle="none", marker="_", markersize=14, markeredgewidth=2.5, zorder=3, label=name)
    ceiling = copy_ceiling(frames, ceiling_tbps)
    ax.axhline(ceiling, color="tab:red", linestyle="--", label=f"copy ceiling {ceiling:.2f} TB/s")
    ax.set_xticks(x, _case_labels(cases, frames.keys), rotation=45, ha="right")
    ax.set_ylabel("TB/s (fewest bytes moved / time)")
    ax.set_ylim(0, max(ceiling, float(np.nanmax(cases["tbps"]))) * 1.1)
    ax.legend(loc="lower right", fontsize="small")
    return fig


def gene_effects(frames: RunFrames, ax: Axes | None = None, cols: int = 4) -> Figure:
    """Small multiples, one per gene: mean fitness of the scored evaluations per gene value
    (bar labels: how many evaluations). With `ax`, the panels replace it in its grid slot."""
    table = gene_effects_table(frames)
    genes = [g for g in frames.genes if g in set(table["gene"])]
    if not genes:
        fig, ax = _axes(ax)
        _no_data(ax, "scored evaluations")
        return fig
    cols = max(1, min(cols, len(genes)))
    rows = math.ceil(len(genes) / cols)
    if ax is None:
        fig = Figure(figsize=(3.0 * cols, 2.3 * rows), layout="constrained")
        grid = fig.add_gridspec(rows, cols)
    else:
        fig = ax.figure
        grid = ax.get_subplotspec().subgridspec(rows, cols)
        ax.remove()
    for i, gene in enumerate(genes):
        sub = fig.add_subplot(grid[i // cols, i % cols])
        t = table[table["gene"] == gene]
        bars = sub.bar([str(v) for v in t["value"]], t["mean_fitness"], color="tab:blue")
        sub.bar_label(bars, labels=[str(c) for c in t["count"]], fontsize="x-small")
        sub.set_title(gene, fontsize="small")
        sub.tick_params(labelsize="x-small")
        if i % cols == 0:
            sub.set_ylabel(f"mean {frames.metric}", fontsize="x-small")
    return fig


def operator_success(frames: RunFrames, ax: Axes | None = None) -> Figure:
    """Per variation operator: the share of children better than their best parent (bars) and
    how many children it made (bar labels)."""
    fig, ax = _axes(ax)
    table = operator_table(frames)
    if table.empty:
        _no_data(ax, "children with parents")
        return fig
    bars = ax.bar(table["operator"], table["share_better"], color="tab:purple")
    ax.bar_label(bars, labels=[f"{b}/{n}" for b, n in zip(table["better"], table["children"])], fontsize="small")
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("share better than best parent")
    ax.tick_params(axis="x", labelrotation=20)
    ax.set_title("operator success (better / children)", fontsize="medium")
    return fig


ALL = {"fitness_curve": fitness_curve, "best_so_far": best_so_far, "speedup_per_case": speedup_per_case,
       "bandwidth": bandwidth, "gene_effects": gene_effects, "operator_success": operator_success}
