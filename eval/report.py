"""`report.md` and the plots, rendered from the numbers `results.compute_metrics` returns.

A leaderboard in the papers' style (scores x100, the best value per column in bold, direction taken from
`metrics.METRICS`), VISCO's diagnostics and one table per category. Nothing here computes a metric.
"""

from __future__ import annotations

import os

from stepcritic.eval import metrics as M


def columns(matcher_name: str) -> list[tuple]:
    """Leaderboard columns: (header, task, path in the task's metrics, METRICS entry giving the
    direction or None for no bold, scale)."""
    return [
        ("Step P", "critique", ("step", "precision"), "step_f1", 100),
        ("Step R", "critique", ("step", "recall"), "step_f1", 100),
        ("Step F1", "critique", ("step", "f1"), "step_f1", 100),
        ("Answer F1", "critique", ("answer", "f1"), "answer_f1", 100),
        (f"Expl. F1 ({matcher_name})", "critique", ("explanation", "f1"), "explanation_f1", 100),
        ("VISCore", "critique", ("viscore",), "viscore", 100),
        ("Invalid %", "critique", ("invalid_rate",), "invalid_rate", 100),
        ("Somers' D step", "critique", ("correlation", "step", "d"), "somers_d", 100),
        ("Somers' D chain", "critique", ("correlation", "chain", "d"), "somers_d", 100),
        ("Choice rank.", "choice", ("accuracy",), "choice_ranking_accuracy", 100),
        ("ShiftCheck acc", "shiftcheck", ("circular_accuracy",), "circular_accuracy", 100),
        ("Consistency", "shiftcheck", ("consistency",), "consistency", 100),
        ("BiasRate", "shiftcheck", ("bias_rate",), "bias_rate", 1),
    ]


# VISCO's failure patterns and the secondary correlations; a propagation bias of 1 is ideal, so no bold there.
DIAGNOSTIC_COLUMNS = [
    ("Step macro-F1", "critique", ("step", "macro_f1"), "step_macro_f1", 100),
    ("Step AUROC", "critique", ("step", "auroc"), "step_auroc", 100),
    ("Flagged %", "critique", ("error_propagation", "predicted_incorrect_rate"), None, 100),
    ("Gold incorrect %", "critique", ("error_propagation", "gold_incorrect_rate"), None, 100),
    ("Propagation bias", "critique", ("error_propagation", "propagation_bias"), None, 1),
    ("Spearman step", "critique", ("correlation", "step", "rho"), "spearman", 100),
    ("Spearman chain", "critique", ("correlation", "chain", "rho"), "spearman", 100),
    ("Somers' D desc. steps", "critique", ("correlation", "step_description", "d"), "somers_d", 100),
    ("Somers' D reas. steps", "critique", ("correlation", "step_reasoning", "d"), "somers_d", 100),
    ("Somers' D RPTS chain", "critique", ("correlation", "chain_rpts", "d"), "somers_d", 100),
    ("Brier", "critique", ("calibration", "brier"), None, 1),
]


def lookup(sec: dict, task: str, path: tuple):
    value = sec.get(task)
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def leaderboard(sections: dict, tasks, matcher_name: str, cols: list[tuple] | None = None) -> str:
    """A markdown table, one row per judge; the best value of each column in bold."""
    cols = [c for c in (cols or columns(matcher_name)) if c[1] in tasks]
    cells = {name: [lookup(sec, task, path) for _, task, path, _, _ in cols] for name, sec in sections.items()}
    best = []
    for j, (_, _, _, metric, scale) in enumerate(cols):
        values = [round(v[j] * scale, 1) for v in cells.values() if v[j] is not None]
        if metric is None or len(set(values)) < 2:  # no direction, or nothing to single out
            best.append(None)
        else:
            best.append((max if M.METRICS[metric].higher_is_better else min)(values))
    lines = ["| Judge | " + " | ".join(c[0] for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, values in cells.items():
        row = []
        for value, (_, _, _, _, scale), top in zip(values, cols, best):
            text = "–" if value is None else f"{value * scale:.{1 if scale == 100 else 2}f}"
            row.append(f"**{text}**" if top is not None and value is not None and round(value * scale, 1) == top
                       else text)
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


def render(metrics: dict) -> str:
    tasks, matcher = metrics["tasks"], metrics["matcher"]
    overall = {name: r["overall"] for name, r in metrics["judges"].items()}
    parts = [
        "# StepCritic evaluation report", "",
        f"{metrics['n_chains']} chains, {metrics['n_steps']} steps; tasks: {', '.join(tasks)}.", "",
        "Scores x100 (BiasRate: CMMU's variance of 0-100 position percentages over failed 4-option groups, "
        "lower is better). Step/answer/explanation F1 take an incorrect step as the positive class (VISCO); "
        f"explanation F1 uses the `{matcher}` matcher. Somers' D compares judge step scores with human step "
        "scores and judge chain scores with the chain's human good/bad label (MiCEval). \"–\": the metric "
        "cannot be computed for that judge or data (no step verdicts, no reference critiques...). Best "
        "value per column in bold.", "",
        "## Leaderboard", "", leaderboard(overall, tasks, matcher), "",
    ]
    choice = next((r["overall"].get("choice") for r in metrics["judges"].values()), None)
    if choice:
        parts += [f"Choice ranking: {choice['n_groups']} groups, {choice['n_chains']} chains with mixed "
                  "correctness (unknown ones left out). Judges without a chain score are ranked by the fraction of "
                  "steps judged correct; a tie for the top scores its share of correct chains.", ""]
    if "shiftcheck" in tasks:
        parts += ["ShiftCheck (every circular shift of up to 4 chains per group must pick the one fully "
                  "correct chain):", *_shiftcheck_notes(metrics), ""]
    if "critique" in tasks:
        parts += ["## Diagnostics", "",
                  "Flagged % vs gold incorrect %: VISCO's reluctance to say \"incorrect\". Propagation bias: odds "
                  "ratio of flagging after an earlier flag, judge over gold (1 ideal, > 1 = assumes errors "
                  "propagate). Brier: calibration of p_incorrect (lower is better).", "",
                  leaderboard(overall, tasks, matcher, DIAGNOSTIC_COLUMNS), ""]
    for category in metrics["categories"] if len(metrics["categories"]) > 1 else []:
        sections = {name: r["by_category"][category] for name, r in metrics["judges"].items()}
        parts += [f"## Category: {category}", "", leaderboard(sections, tasks, matcher), ""]
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
    """One line per judge for the terminal."""
    sec, run = result["overall"], result.get("run", {})
    parts = [f"{name}:"]
    counts = run.get("critiques")
    if counts:
        parts.append(f"{counts['judged']} chains judged, {counts['cached']} from cache;")
    shown = [("step F1", "critique", ("step", "f1")), ("answer F1", "critique", ("answer", "f1")),
             ("VISCore", "critique", ("viscore",)), ("invalid %", "critique", ("invalid_rate",)),
             ("Somers' D chain", "critique", ("correlation", "chain", "d")), ("choice", "choice", ("accuracy",)),
             ("ShiftCheck", "shiftcheck", ("circular_accuracy",))]
    for label, task, path in shown:
        if task in sec:
            value = lookup(sec, task, path)
            parts.append(f"{label} {'–' if value is None else f'{100 * value:.1f}'}")
    return " ".join(parts)
