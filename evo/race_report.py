"""Files of a race and of a warm start (evo.race): PREFIX.json, PREFIX.md and PREFIX.png.

Figures follow evo/plots.py: matplotlib Figures built directly (no pyplot state), Agg-safe. A
result computed on a synthetic slice says so in its title and first line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure


def _label(result: dict[str, Any]) -> str:
    return "SYNTHETIC slice (no GPU measured it)" if result.get("synthetic") else f"slice {result['slice']}"


def _fmt(v: Any) -> str:
    if v is None:
        return "not reached"
    if isinstance(v, (int, float)):      # a median of an even count of seeds may end in .5: shown, not rounded
        return f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"
    return str(v)


def race_figure(result: dict[str, Any]) -> Figure:
    fig = Figure(figsize=(8.0, 4.6), layout="constrained")
    ax = fig.add_subplot()
    for name, s in result["strategies"].items():
        if not s.get("shown", True):
            continue
        c = s["curve"]
        style = "-" if s["side"] == "ours" else "--"
        line, = ax.plot(c["evals"], c["median"], style, label=name, lw=1.6)
        ax.fill_between(c["evals"], c["q1"], c["q3"], color=line.get_color(), alpha=0.12)
    ax.axhline(result["target_fraction"], color="grey", lw=0.8, ls=":")
    ax.axvline(0.05 * result["space_size"], color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_ylim(max(0.0, min(0.8, ax.get_ylim()[0])), 1.005)
    ax.set_xlabel("evaluations (unique genomes judged)")
    ax.set_ylabel("best so far / slice optimum")
    ax.set_title(f"{_label(result)}: {result['space_size']} genomes, median and quartiles over {result['seeds']} "
                 "seeds", fontsize=9)
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    return fig


def _same(flag: bool | None) -> str:
    return "-" if flag is None else ("yes" if flag else "**no**")


def race_markdown(result: dict[str, Any]) -> str:
    size = result["space_size"]
    lines = [f"# Search efficiency on a recorded slice ({_label(result)})", ""]
    if result.get("synthetic"):
        lines += ["**Synthetic**: every figure below comes from tests/data/make_synthetic_slice.py's formula, not from "
                  "a GPU. The H200 slice replaces it (the command at the end, on the recorded slice).", ""]
    lines += [f"Slice: {result['slice']} ({result['family']}, space {result['space_version'] or '-'}), "
              f"{size} genomes, varied genes: {', '.join(result['varied_genes'])}. Optimum {result['optimum']:.4g} "
              f"({result['objective']}). Budget {result['budget']} evaluations per search "
              f"({100 * result['budget'] / size:.1f} % of the slice), {result['seeds']} seeds per strategy; "
              f"target {100 * result['target_fraction']:.0f} % of the optimum. A failed genome costs an evaluation "
              "on both sides.", "",
              f"- Ours, best: **{result['ours_best']}**, median {_fmt(result['ours_best_evals_to_99'])} evaluations "
              f"to 99 % ({'within' if result['goal']['ours_within_5_percent_of_space'] else 'not within'} 5 % of the "
              f"slice = {0.05 * size:.0f}).",
              f"- Kernel Tuner, best: **{result['kernel_tuner_best']}**, median "
              f"{_fmt(result['kernel_tuner_best_evals_to_99'])}; best of the rest: "
              f"{result['kernel_tuner_best_of_the_rest']}.",
              f"- Ours in fewer evaluations than every Kernel Tuner strategy shown (medians): "
              f"{'yes' if result['goal']['ours_fewer_than_every_kernel_tuner_strategy'] else 'no'}.",
              f"- Lessons for ga+lessons: {result.get('lessons') or 'none given (left out)'}.", "",
              "| strategy | side | evaluations to 99 % (median) | quartiles | seeds reaching it | final fraction (median) "
              "| evaluations made (mean) | seed 0 again the same |", "|---|---|---:|---|---:|---:|---:|---|"]
    for name, s in result["strategies"].items():
        e = s["evals_to_99"]
        shown = "" if s.get("shown", True) else " (not shown: not the best of the rest)"
        lines.append(f"| {name}{shown} | {s['side']} | {_fmt(e['median'])} | {_fmt(e['q1'])} - {_fmt(e['q3'])} | "
                     f"{e['reached']}/{e['seeds']} | {s['final_fraction']['median']:.4f} | "
                     f"{s['mean_evaluations_made']:.0f} | {_same(s.get('reproducible'))} |")
    lines += ["", "Seeds that never reached 99 % count as beyond the budget in the medians (\"not reached\" when more "
              "than half did not). \"Seed 0 again the same\": seed 0 searched a second time gave the same trace; "
              "where it did not, that strategy's figures move from one run of the command to the next.", "",
              f"Made by: `{result.get('command') or 'evo slice race'}`", ""]
    return "\n".join(lines)


def write_race(result: dict[str, Any], prefix: str | Path) -> list[Path]:
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    out = [prefix.with_suffix(".json"), prefix.with_suffix(".md"), prefix.with_suffix(".png")]
    out[0].write_text(json.dumps(result, indent=1))
    out[1].write_text(race_markdown(result))
    race_figure(result).savefig(out[2], dpi=110)
    return out


def warm_figure(result: dict[str, Any]) -> Figure:
    fig = Figure(figsize=(7.0, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for name, s in result["curves"].items():
        c = s["curve"]
        line, = ax.plot(c["evals"], c["median"], label=f"{'warm' if 'lessons' in name else 'cold'} ({name})")
        ax.fill_between(c["evals"], c["q1"], c["q3"], color=line.get_color(), alpha=0.15)
    ax.axhline(result["target_fraction"] if "target_fraction" in result else 0.99, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel(f"evaluations on class {result['holdout_class']}")
    ax.set_ylabel("best so far / class optimum")
    ax.set_title(f"{_label(result)}: lessons of {', '.join(result['lessons_from_classes'])} warm-start "
                 f"{result['holdout_class']} ({result['seeds']} seeds)", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def _fmt_corr(v: float | None) -> str:
    return "-" if v is None else f"{v:+.2f}"


def _from_seed(result: dict[str, Any]) -> str:
    first = result.get("first_seed") or 0
    return f", seeds {first} to {first + result['seeds'] - 1}" if first else ""


def warm_markdown(result: dict[str, Any]) -> str:
    held = result.get("holdout_classes") or [result["holdout_class"]]
    group = held != [result["holdout_class"]]
    lines = [f"# Warm start on {'held-out shape classes' if group else 'a held-out shape class'} ({_label(result)})", ""]
    if result.get("synthetic"):
        lines += ["**Synthetic**: computed on tests/data/make_synthetic_slice.py's formula, not on a GPU.", ""]
    if result.get("prediction"):
        lines += [f"Predicted before the run: {result['prediction']}", ""]
    ratio = result["ratio"]
    other = result.get("lessons_from_slice") not in (None, result["slice"])
    what = (f"the classes of **{result['holdout_class']}** ({', '.join(held)})" if group
            else f"class **{result['holdout_class']}**")
    origin = (f"another slice, {result['lessons_from_slice']}, for {what}" if other else f"the slice without {what}")
    alone = ("those classes together, each run's objective the geomean of a genome's fitness on each, as the race's "
             "on a whole slice" if group else "that class alone")
    warm_seeds = [v for v in (result.get("per_seed") or {}).get("warm_evals_to_99") or []]
    same = (f" (the same in all {len(warm_seeds)} seeds)" if len(warm_seeds) > 1 and len(set(warm_seeds)) == 1
            else "")
    lines += [f"Lessons of {', '.join(result['lessons_from_classes'])}, built from {origin}, start a run on {alone} "
              f"({result['space_size']} genomes, budget {result['budget']}, {result['seeds']} seeds"
              f"{_from_seed(result)}). Cold: "
              f"{result['cold']}; warm: {result['warm']}.", "",
              f"- cold run: median {_fmt(result['cold_evals_to_99'])} evaluations to 99 % of its own final best",
              f"- warm run: median {_fmt(result['warm_evals_to_99'])} evaluations to that same value{same}",
              f"- ratio warm / cold: {'-' if ratio is None else f'{ratio:.2f}'} (goal: <= 0.30; "
              f"{'met' if result['goal_ratio_at_most_0.3'] else 'not met'})"]
    lines += _optimum_lines(result)
    lines += ["", "What the run was told:", ""]
    lines += [f"- {x}" for x in result["lessons_log"]]
    if result.get("lesson_order", "recorded") != "recorded":
        lines += [f"- search.lessons.order = {result['lesson_order']!r} (not the default): once lessons are chosen, "
                  "the rest of the first population comes in the kept lessons' own surrogate's order"]
    if result.get("holdouts"):
        opt = all("warm_evals_to_optimum" in h for h in result["holdouts"].values())
        lines += ["", "Every class held out in turn (same seeds and budget; the first row is the headline):", "",
                  "| held-out class | lessons from | cold: evaluations to 99 % (median) | warm | ratio | goal <= 0.30 |"
                  + (" to the optimum itself: cold / warm (median) |" if opt else ""),
                  "|---|---|---:|---:|---:|---|" + ("---|" if opt else "")]
        for cls, h in result["holdouts"].items():
            r = h["ratio"]
            lines.append(f"| {cls} | {', '.join(h['lessons_from_classes'])} | {_fmt(h['cold_evals_to_99'])} | "
                         f"{_fmt(h['warm_evals_to_99'])} | {'-' if r is None else f'{r:.2f}'} | "
                         f"{'met' if h['goal_ratio_at_most_0.3'] else 'not met'} |"
                         + (f" {_fmt(h['cold_evals_to_optimum'])} / {_fmt(h['warm_evals_to_optimum'])} |" if opt else ""))
    chose = [(cls, h["lessons_choice"][0]) for cls, h in (result.get("holdouts") or {}).items()
             if h.get("lessons_choice")]
    if chose:
        lines += ["", "What each held-out class's runs chose (search.lessons.choice = 'online', evo.lesson_choice):", ""]
        lines += [f"- {cls}: {line}" for cls, line in chose]
    infos = [h["transfer_information"] for h in (result.get("holdouts") or {}).values() if h.get("transfer_information")]
    infos = infos or ([result["transfer_information"]] if result.get("transfer_information") else [])
    if infos:
        lines += ["", "What the other classes' landscapes say about the held-out one (no search: the slice judged in "
                  "a source class's order, best first; where the first genome within 99 % of the held-out optimum "
                  "comes; rank correlation over genomes verified on both):", "",
                  "| held-out class | genomes within 99 % (of verified) | source class: Spearman, first hit in its "
                  "order | mean-rank order: first hit | geomean order: first hit | uniform draws among the verified: "
                  "expected first hit |",
                  "|---|---:|---|---:|---:|---:|"]
        for t in infos:
            src = "; ".join(f"{s}: {_fmt_corr(v['spearman'])}, {_fmt(v['first_hit'])}" for s, v in t["sources"].items())
            u = t["uniform_expected_first_hit"]
            lines.append(f"| {t['holdout']} | {t['genomes_within_target']} ({t['verified']}) | {src} | "
                         f"{_fmt(t['mean_rank_first_hit'])} | {_fmt(t.get('geomean_first_hit'))} | "
                         f"{'-' if u is None else f'{u:.0f}'} |")
    lines += _limits_lines(result)
    lines += ["", f"Made by: `{result.get('command') or 'evo slice warm-start'}`", ""]
    return "\n".join(lines)


def _optimum_lines(result: dict[str, Any]) -> list[str]:
    """Beside the goal's target: evaluations to the class optimum itself, and how close to it the warm
    run's best was when it reached the target (results written before these figures were kept have none)."""
    if "warm_evals_to_optimum" not in result:
        return []
    import statistics

    fr = [f for f in result["per_seed"].get("warm_fraction_of_optimum_at_target") or [] if f is not None]
    at = f"; the warm run's best when it reached the target: {statistics.median(fr):.4f} of the optimum (median)" \
        if fr else ""
    return [f"- to the optimum itself: cold median {_fmt(result['cold_evals_to_optimum'])}, warm median "
            f"{_fmt(result['warm_evals_to_optimum'])} evaluations{at}"]


def _limits_lines(result: dict[str, Any]) -> list[str]:
    """The bound on what seeding from the lessons can give (evo.race.order_limits): per held-out
    class, the order that reaches each seed's target soonest and the ratio it implies, beside the
    recorded order of the lesson a choice would follow after its probe."""
    rows = [(cls, h["order_limits"]) for cls, h in (result.get("holdouts") or {}).items() if h.get("order_limits")]
    if not rows and result.get("order_limits"):
        rows = [(result["holdout_class"], result["order_limits"])]
    if not rows:
        return []
    ratio = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    probe = rows[0][1].get("probe")
    lines = ["", "How soon following the lessons' orders can reach each seed's target (99 % of its cold run's final "
             "best), no search (evo.race.order_limits; median over the seeds; ratio: that over the cold median). "
             "Orders: each lesson's recorded order, the same genomes in its own surrogate's order, the lessons "
             f"interleaved, and the online choice's probe ({probe} per lesson) followed by one lesson's recorded "
             "order (or its model's: search.lessons.order), the most a run that chose that lesson gets from it. A warm ratio below an order's comes from "
             "the search (mutation, the agreed genes), not from that order:", "",
             "| held-out class | cold (median) | soonest order: evaluations to the target, ratio | after the probe, "
             "per lesson followed: evaluations, ratio | every order: evaluations |",
             "|---|---:|---|---|---|"]
    for cls, lim in rows:
        orders = lim["orders"]
        best = lim.get("best")
        head = f"{best}: {_fmt(orders[best]['evals_to_99'])}, {ratio(orders[best]['ratio'])}" if best else "none reaches it"
        after = "; ".join(f"{k.split('then ', 1)[1]}: {_fmt(v['evals_to_99'])}, {ratio(v['ratio'])}"
                          for k, v in orders.items() if k.startswith("probe, then ")) or "-"
        every = "; ".join(f"{k} {_fmt(v['evals_to_99'])}" for k, v in orders.items() if not k.startswith("probe, then "))
        lines.append(f"| {cls} | {_fmt(lim.get('cold_median'))} | {head} | {after} | {every} |")
    met = [cls for cls, lim in rows if lim.get("best") and (lim["orders"][lim["best"]]["ratio"] or 1.0) <= 0.3]
    blocked = [cls for cls, lim in rows if cls not in met]
    warm = {cls: h.get("ratio") for cls, h in (result.get("holdouts") or {result["holdout_class"]: result}).items()}
    missed = [cls for cls in met if warm.get(cls) is None or warm[cls] > 0.3]
    for cls, lim in rows:
        if cls in missed:
            b = lim["orders"][lim["best"]]
            lines += ["", f"For {cls} one order, {lim['best']}, reaches the target at {_fmt(b['evals_to_99'])} "
                      f"evaluations (ratio {ratio(b['ratio'])}), but the run does not follow it: the online choice "
                      "follows the chosen lessons' own orders after its probe, and every lesson interleaved when it "
                      "makes no choice."]
    if blocked:
        lines += ["", f"No order the lessons give reaches the target within 0.30 of the cold median for "
                  f"{', '.join(blocked)}: there a warm start at <= 0.30 would have to come from the search, not from "
                  "these lessons' orders."]
    return lines


def write_warm(result: dict[str, Any], prefix: str | Path) -> list[Path]:
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    out = [prefix.with_suffix(".json"), prefix.with_suffix(".md"), prefix.with_suffix(".png")]
    out[0].write_text(json.dumps(result, indent=1))
    out[1].write_text(warm_markdown(result))
    warm_figure(result).savefig(out[2], dpi=110)
    return out
