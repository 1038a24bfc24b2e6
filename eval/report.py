"""`report.md` and the plots, rendered from the numbers `results.compute_metrics` returns.

Every table iterates the metric registry (`stepcritic.eval.tasks`): a leaderboard in the papers' style
(scores x100, the best value per column in bold in the metric's direction, a bootstrap interval after each
headline value), VISCO's diagnostics, one table per source, generator, category and step type when the data
has more than one, and a glossary of the metrics shown. Between them, each task asked renders its own part
(`Task.render`, in the order of `Task.place`). Nothing here computes a metric.
"""

from __future__ import annotations

import os

from stepcritic import atomic
from stepcritic.eval import tasks as T
from stepcritic.eval.cache import write_json_atomic
from stepcritic.eval.plots import write_plots
from stepcritic.eval.tables import columns, leaderboard, number

# the place (`Task.place`) of the Diagnostics table: the tasks' parts before it go under the leaderboard
DIAGNOSTICS = 50
FIELD_TITLES = {"source": "source", "generator": "generator", "category": "category", "step_type": "step type",
                "step_kind": "kind of step"}
# the tables repeated per breakdown value (diagnostics and RPTS's table only overall, to keep the report readable)
BREAKDOWN_TABLES = ("leaderboard", "verifier", "sweep", "best_of_n", "correction")


def diagnostics_text(shown: list[T.Metric]) -> str:
    """The paragraph above the Diagnostics table: what its columns mean (`Task.diagnostics`), for the tasks it has
    columns of."""
    return " ".join(T.TASKS[task].diagnostics for task in dict.fromkeys(m.task for m in shown)
                    if T.TASKS[task].diagnostics)


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


def _failed_lines(metrics: dict) -> list[str]:
    """The chains and questions whose requests got no answer (`--allow-failures`), left out of every judge's metrics."""
    failed = metrics.get("failed")
    if not failed:
        return []
    chains, questions = failed["left_out_chains"], failed["left_out_questions"]
    lines = ["## Failed requests", "",
             f"Requests that got no answer are no judgments: {len(chains)} chains and {len(questions)} ShiftCheck "
             "questions are left out of every judge's metrics (`--allow-failures`; a rerun asks them again):", ""]
    for name, f in failed["judges"].items():
        named = ([f"chains {', '.join(f'`{c}`' for c in f['chains'])}"] if f["chains"] else []) + (
            [f"ShiftCheck questions {', '.join(f'`{q}`' for q in f['questions'])}"] if f["questions"] else [])
        lines.append(f"- `{name}`: {'; '.join(named)}; last error: {f['last_error']}")
    return lines + [""]


def _breakdowns(metrics: dict) -> list[str]:
    tasks, matcher, parts = metrics["tasks"], metrics["matcher"], []
    for field, spec in metrics.get("breakdowns", {}).items():
        title = FIELD_TITLES.get(field, field)
        parts += [f"## By {title}", ""]
        if field == "step_kind":
            parts += _kind_table(metrics, spec)
        if "group" not in spec["levels"]:
            parts += [(f"Step-level metrics only: a {title} is not a set of whole chains." if spec["unit"] == "steps"
                       else f"The chains of one question differ in {title}: question-level metrics (choice "
                       "ranking, ShiftCheck) are not split by it."), ""]
        for value in spec["values"]:
            sections = {name: r["breakdowns"][field][value] for name, r in metrics["judges"].items()}
            parts += [f"### {value} ({spec['counts'][value]} {spec['unit']})", ""]
            for table in BREAKDOWN_TABLES:
                shown = columns(tasks, table, levels=spec["levels"])
                if shown:
                    parts += [leaderboard(sections, tasks, matcher, shown), ""]
    return parts


def _kind_table(metrics: dict, spec: dict) -> list[str]:
    """Step AUROC per kind of step (rows) and judge (columns): where a critic reads the picture and where not."""
    judges = list(metrics["judges"])
    rows = [f"Step AUROC by kind of step ({', '.join(f'`{j}`' for j in judges)} left to right):", "",
            "| kind of step | steps | " + " | ".join(f"judge {k + 1}" for k in range(len(judges))) + " |",
            "|---|---|" + "---|" * len(judges)]
    for value in spec["values"]:
        aurocs = [T.lookup(metrics["judges"][j]["breakdowns"]["step_kind"][value], T.METRICS["step_auroc"])
                  for j in judges]
        rows.append(f"| {value} | {spec['counts'][value]} | "
                    + " | ".join("–" if a is None else f"{100 * a:.1f}" for a in aurocs) + " |")
    return rows + [""]


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
        *_failed_lines(metrics),
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
    asked = metrics.get("matcher_requests")
    if asked:
        parts += [f"Explanation matching by `{matcher}` (VISCO's LLM judge): {asked['asked']} requests asked, "
                  f"{asked['cached']} from cache, {asked['failed']} failed (no match this run; asked again on a "
                  f"rerun), {asked['unparsed']} replies without a verdict (no match).", ""]
    shown = sorted((T.TASKS[t] for t in dict.fromkeys(tasks) if T.TASKS[t].render is not None),
                   key=lambda task: task.place)
    for task in (t for t in shown if t.place < DIAGNOSTICS):
        parts += task.render(metrics, overall)
    diagnostics = columns(tasks, "diagnostics")
    if diagnostics:
        parts += ["## Diagnostics", "", diagnostics_text(diagnostics), "",
                  leaderboard(overall, tasks, matcher, diagnostics), ""]
    for task in (t for t in shown if t.place > DIAGNOSTICS):
        parts += task.render(metrics, overall)
    parts += _breakdowns(metrics)
    parts += _glossary(tasks, matcher)
    parts += ["## Plots", ""] + [f"![{name}](plots/{name}.png)" for name in metrics.get("plots", [])]
    return "\n".join(parts) + "\n"


def write_report(metrics: dict, out_dir: str) -> None:
    metrics["plots"] = write_plots(metrics, os.path.join(out_dir, "plots"))
    write_json_atomic(os.path.join(out_dir, "metrics.json"), metrics)
    atomic.write_text(os.path.join(out_dir, "report.md"), render(metrics))


def counts_line(name: str, run: dict) -> str:
    """What a judge did in this run: chains judged, from the cache, invalid (an answer that could not be read) and
    failed (no answer: not judged, asked again next run), and failed ShiftCheck questions and verifier answers."""
    critiques, picks = run.get("critiques"), run.get("picks")
    parts = []
    if critiques:
        parts.append(f"{critiques['judged']} chains judged, {critiques['cached']} from cache, "
                     f"{critiques['invalid']} invalid, {critiques['failed']} failed")
    if picks and picks.get("failed"):
        parts.append(f"{picks['failed']} ShiftCheck questions failed")
    verifier_failed = sum((c or {}).get("failed", 0) for c in (run.get("verifier") or {}).values())
    if verifier_failed:
        parts.append(f"{verifier_failed} verifier answers failed")
    return f"{name}: " + ", ".join(parts) + ";" if parts else f"{name}:"


def summary_line(name: str, result: dict) -> str:
    """One line per judge for the terminal: what it did in this run, then its headline metrics."""
    sec, run = result["overall"], result.get("run", {})
    parts = [counts_line(name, run)]
    if run.get("earlier_command"):
        parts.append("(from an earlier command's cache)")
    for m in (m for m in T.metrics_for(sec) if m.headline):
        value = T.lookup(sec, m)
        parts.append(f"{m.display.format(matcher='')} {'–' if value is None else number(value, m.scale)}")
        note = m.note and m.note(sec[m.task])
        if note:
            parts.append(note)
    return " ".join(parts)
