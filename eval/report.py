"""`report.md` and the plots, rendered from the numbers `results.compute_metrics` returns.

Every table iterates the metric registry (`stepcritic.eval.tasks`): a leaderboard in the papers' style
(scores x100, the best value per column in bold in the metric's direction, a bootstrap interval after each
headline value), VISCO's diagnostics, one table per source, generator, category and step type when the data
has more than one, and a glossary of the metrics shown. Nothing here computes a metric.
"""

from __future__ import annotations

import os

from stepcritic.eval import tasks as T


def columns(tasks, table: str = "leaderboard", levels=None) -> list[T.Metric]:
    """The registered metrics of `tasks` shown in `table`, optionally only those of some levels."""
    return [m for m in T.metrics_for(tasks, table) if levels is None or m.level in levels]


def _number(value: float, scale: int) -> str:
    return f"{value * scale:.{1 if scale == 100 else 2}f}"


def cell(value, ci, scale: int, bold: bool) -> str:
    """"53.0 [47.0, 59.0]": the value (bold when best) and its interval; "–" when undefined, never bold."""
    if value is None:
        return "–"
    text = _number(value, scale)
    text = f"**{text}**" if bold else text
    return f"{text} [{_number(ci[0], scale)}, {_number(ci[1], scale)}]" if ci else text


def leaderboard(sections: dict, tasks, matcher_name: str, metrics: list[T.Metric] | None = None) -> str:
    """A markdown table, one row per judge; the best value of each column in bold."""
    cols = [m for m in (columns(tasks) if metrics is None else metrics) if m.task in tasks]
    values = {name: [T.lookup(sec, m) for m in cols] for name, sec in sections.items()}
    best = []
    for j, m in enumerate(cols):
        shown = [round(v[j] * m.scale, 1) for v in values.values() if v[j] is not None]
        if m.higher_is_better is None or len(set(shown)) < 2:  # no direction, or nothing to single out
            best.append(None)
        else:
            best.append((max if m.higher_is_better else min)(shown))
    lines = ["| Judge | " + " | ".join(m.display.format(matcher=matcher_name) for m in cols) + " |",
             "|---" * (len(cols) + 1) + "|"]
    for name, sec in sections.items():
        row = [cell(v, T.lookup(sec, m, ci=True), m.scale, top is not None and v is not None
                    and round(v * m.scale, 1) == top) for v, m, top in zip(values[name], cols, best)]
        lines.append(f"| `{name}` | " + " | ".join(row) + " |")
    return "\n".join(lines)


def _shiftcheck_notes(metrics: dict) -> list[str]:
    lines = []
    for name, result in metrics["judges"].items():
        sc = result["overall"].get("shiftcheck")
        if not sc:
            continue
        by_n = ", ".join(f"{n} options: {rate:.1f}" for n, rate in sc["bias_rate_by_n_options"].items()) or "none"
        lines.append(f"- `{name}`: {sc['n_groups']} groups ({sc['n_with_gold']} with one correct chain), "
                     f"BiasRate by option count: {by_n}")
    return lines


FIELD_TITLES = {"source": "source", "generator": "generator", "category": "category", "step_type": "step type"}


def _judges_line(metrics: dict) -> list[str]:
    earlier = metrics.get("earlier_judges") or {}
    lines = []
    if earlier.get("included"):
        lines.append("From earlier commands into this folder, read back from their cached judgments: "
                     + ", ".join(f"`{n}`" for n in earlier["included"]) + ".")
    if earlier.get("left_out"):
        lines.append("Left out, their cache lacks some of these chains or questions (rerun them to include them): "
                     + ", ".join(f"`{n}`" for n in earlier["left_out"]) + ".")
    return [" ".join(lines), ""] if lines else []


def _breakdowns(metrics: dict) -> list[str]:
    tasks, matcher, parts = metrics["tasks"], metrics["matcher"], []
    for field, spec in metrics.get("breakdowns", {}).items():
        title = FIELD_TITLES.get(field, field)
        parts += [f"## By {title}", ""]
        if "group" not in spec["levels"]:
            parts += [("Step-level metrics only: a step type is not a set of whole chains." if field == "step_type"
                       else f"The chains of one question differ in {title}: question-level metrics (choice "
                       "ranking, ShiftCheck) are not split by it."), ""]
        for value in spec["values"]:
            sections = {name: r["breakdowns"][field][value] for name, r in metrics["judges"].items()}
            parts += [f"### {value} ({spec['counts'][value]} {spec['unit']})", ""]
            for table in ("leaderboard", "verifier"):
                shown = columns(tasks, table, levels=spec["levels"])
                if shown:
                    parts += [leaderboard(sections, tasks, matcher, shown), ""]
    return parts


def _rpts(metrics: dict, overall: dict) -> list[str]:
    """RPTS's table (each judge as the step scorer), then each judge's sensitivity to lambda and h_f."""
    if "rpts" not in metrics["tasks"]:
        return []
    from stepcritic.eval.rpts import notes, sensitivity_table

    tasks = metrics["tasks"]
    parts = ["## RPTS", "", *notes(metrics.get("rpts") or {}),
             leaderboard(overall, tasks, metrics["matcher"], columns(tasks, "rpts")), ""]
    scored = {name: sec["rpts"] for name, sec in overall.items() if sec["rpts"]["mean"] is not None}
    if scored:
        parts += ["Sensitivity (RPTS's study of lambda and h_f), x100:", ""]
    for name, sec in scored.items():
        parts += sensitivity_table(name, sec)
    return parts


def _glossary(tasks, matcher: str) -> list[str]:
    lines = ["## Metrics", ""]
    direction = {True: ", higher is better", False: ", lower is better", None: ""}
    for m in T.metrics_for(tasks):
        lines.append(f"- **{m.display.format(matcher=matcher)}** ({m.task}): {m.description}; {m.aggregation}"
                     f"{direction[m.higher_is_better]}. \"–\" when {m.undefined}.")
    return lines + [""]


def render(metrics: dict) -> str:
    tasks, matcher = metrics["tasks"], metrics["matcher"]
    overall = {name: r["overall"] for name, r in metrics["judges"].items()}
    boot = metrics.get("bootstrap") or {}
    parts = [
        "# StepCritic evaluation report", "",
        f"{metrics['n_chains']} chains, {metrics['n_steps']} steps, {metrics.get('n_questions', '?')} questions; "
        f"tasks: {', '.join(tasks)}.", "",
        *_judges_line(metrics),
        "Scores x100 (BiasRate: CMMU's variance of 0-100 position percentages over failed 4-option groups, "
        "lower is better). Step/answer/explanation F1 take an incorrect step as the positive class (VISCO); "
        f"explanation F1 uses the `{matcher}` matcher. Somers' D compares judge step scores with human step "
        "scores and judge chain scores with the chain's human good/bad label (MiCEval). \"–\": the metric "
        "cannot be computed for that judge or data (no step verdicts, no reference critiques...). Best "
        "value per column in bold."
        + (f" Brackets: {100 * boot['level']:.0f}% bootstrap interval of a headline metric, resampling whole "
           f"questions ({boot['resamples']} resamples, seed {boot['seed']}, percentile method)." if boot else ""), "",
    ]
    if columns(tasks):  # not when only tasks with tables of their own run (verifier)
        parts += ["## Leaderboard", "", leaderboard(overall, tasks, matcher), ""]
    choice = next((r["overall"].get("choice") for r in metrics["judges"].values()), None)
    if choice:
        parts += [f"Choice ranking: {choice['n_groups']} groups, {choice['n_chains']} chains with mixed "
                  "correctness (unknown ones left out). Judges without a chain score are ranked by the fraction of "
                  "steps judged correct; a tie for the top scores its share of correct chains.", ""]
    if "shiftcheck" in tasks:
        parts += ["ShiftCheck (every circular shift of up to 4 chains per group must pick the one fully "
                  "correct chain):", *_shiftcheck_notes(metrics), ""]
    verifier = columns(tasks, "verifier")
    if verifier:
        parts += ["## Verifier tasks", "",
                  "MiCEval's nine single-label questions (Table 2's columns), each asked where the human labels "
                  "apply; accuracy with a reply naming no label counted wrong, Avg. their mean, invalid % per "
                  "reply. \"–\" for a judge that cannot answer verifier prompts. Somers' D MiCEval chain: the "
                  "geometric-mean chain score of the aspect answers against the human good/bad label.", "",
                  leaderboard(overall, tasks, matcher, verifier), ""]
    diagnostics = columns(tasks, "diagnostics")
    if diagnostics:
        parts += ["## Diagnostics", "",
                  "Flagged % vs gold incorrect %: VISCO's reluctance to say \"incorrect\". Propagation bias: odds "
                  "ratio of flagging after an earlier flag, judge over gold (1 ideal, > 1 = assumes errors "
                  "propagate). Brier: calibration of p_incorrect (lower is better).", "",
                  leaderboard(overall, tasks, matcher, diagnostics), ""]
    parts += _rpts(metrics, overall)
    parts += _breakdowns(metrics)
    parts += _glossary(tasks, matcher)
    parts += ["## Plots", ""] + [f"![{name}](plots/{name}.png)" for name in metrics.get("plots", [])]
    return "\n".join(parts) + "\n"


def write_report(metrics: dict, out_dir: str) -> None:
    from stepcritic.eval.cache import write_json_atomic
    from stepcritic.eval.plots import write_plots

    metrics["plots"] = write_plots(metrics, os.path.join(out_dir, "plots"))
    write_json_atomic(os.path.join(out_dir, "metrics.json"), metrics)
    tmp = os.path.join(out_dir, "report.md.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(render(metrics))
    os.replace(tmp, os.path.join(out_dir, "report.md"))


def summary_line(name: str, result: dict) -> str:
    """One line per judge for the terminal: its headline metrics."""
    sec, run = result["overall"], result.get("run", {})
    parts = [f"{name}:"]
    counts = run.get("critiques")
    if counts:
        parts.append(f"{counts['judged']} chains judged, {counts['cached']} from cache;")
    if run.get("earlier_command"):
        parts.append("(from an earlier command's cache)")
    for m in (m for m in T.metrics_for(sec) if m.headline):
        value = T.lookup(sec, m)
        parts.append(f"{m.display.format(matcher='')} {'–' if value is None else _number(value, m.scale)}")
    return " ".join(parts)
