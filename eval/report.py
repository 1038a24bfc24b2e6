"""`report.md` and the plots, rendered from the numbers `results.compute_metrics` returns.

Every table iterates the metric registry (`stepcritic.eval.tasks`): a leaderboard in the papers' style
(scores x100, the best value per column in bold in the metric's direction, a bootstrap interval after each
headline value), VISCO's diagnostics, one table per source, generator, category and step type when the data
has more than one, and a glossary of the metrics shown. Nothing here computes a metric.
"""

from __future__ import annotations

import os

from stepcritic import atomic
from stepcritic.eval import tasks as T
from stepcritic.eval.best_of_n import REFERENCES, SELECTORS
from stepcritic.eval.cache import write_json_atomic
from stepcritic.eval.plots import write_plots
from stepcritic.eval.rpts import notes as rpts_notes
from stepcritic.eval.rpts import sensitivity_table


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


FIELD_TITLES = {"source": "source", "generator": "generator", "category": "category", "step_type": "step type",
                "step_kind": "kind of step"}
# the tables repeated per breakdown value (diagnostics and RPTS's table only overall, to keep the report readable)
BREAKDOWN_TABLES = ("leaderboard", "verifier", "sweep", "best_of_n", "correction")


def _pairwise_notes(metrics: dict) -> list[str]:
    """How each judge chose between responses, and its accuracy per subset (the categories have tables of their own)."""
    if "pairwise" not in metrics["tasks"]:
        return []
    lines = ["Pairwise: every two responses of an item with different preference ranks make a pair; a judge that "
             "scores responses prefers the higher score (equal scores count half), a generative judge is asked which "
             "is better in both orders (each order counts half; order accuracies and flip rate under Diagnostics); a "
             "reply naming neither response is unparseable, counted wrong in its order (as VL-RewardBench counts "
             "it) and as a flip, and counted below. Macro: the mean of the per-category (per-subset) accuracies. "
             "ACC+: sets whose every pair is right.", ""]
    for name, result in metrics["judges"].items():
        sec = result["overall"]["pairwise"]
        subsets = ", ".join(f"{k}: {_number_or_dash(v)}" for k, v in sec["by_subset"].items() if k != "None")
        lines.append(f"- `{name}`: {sec['n_items']} items, {sec['n_pairs']} pairs ({sec['n_tied_pairs']} tied pairs "
                     f"left out), by {sec['score']}" + (f"; by subset {subsets}" if subsets else "")
                     + (f"; {_unparseable(sec, 'replies')}" if sec.get("n_unparseable") is not None else ""))
    return lines + [""]


def _unparseable(sec: dict, noun: str) -> str:
    """"unparseable: 6 of 8 replies", of a judge asked the pairs (`pairwise.section`)."""
    return f"unparseable: {sec['n_unparseable']} of {sec['n_replies']} {noun}"


# what the Diagnostics table's columns of each task mean, said only of the tasks whose columns it shows
DIAGNOSTICS_TEXT = {
    "critique": "Flagged % vs gold incorrect %: VISCO's reluctance to say \"incorrect\". Propagation bias: odds ratio "
                "of flagging after an earlier flag, judge over gold (1 ideal, > 1 = assumes errors propagate). Brier: "
                "calibration of p_incorrect (lower is better).",
    "pairwise": "Pair acc. (data order) and (swapped): a generative judge's pairwise accuracy with the responses shown "
                "in the data's order and swapped (apart: a position preference). Pair flip %: share of pairs whose "
                "chosen response changes with the order, an unparseable reply a flip (lower is better). \"–\" for a "
                "judge that scores responses: its choice does not depend on the order.",
}


def diagnostics_text(shown: list[T.Metric]) -> str:
    """The paragraph above the Diagnostics table: what its columns mean, for the tasks it has columns of."""
    return " ".join(DIAGNOSTICS_TEXT[task] for task in dict.fromkeys(m.task for m in shown) if task in DIAGNOSTICS_TEXT)


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
        aurocs = [metrics["judges"][j]["breakdowns"]["step_kind"][value].get("critique", {}).get("step", {})
                  .get("auroc") for j in judges]
        rows.append(f"| {value} | {spec['counts'][value]} | "
                    + " | ".join("–" if a is None else f"{100 * a:.1f}" for a in aurocs) + " |")
    return rows + [""]


def _rpts(metrics: dict, overall: dict) -> list[str]:
    """RPTS's table (each judge as the step scorer), then each judge's sensitivity to lambda and h_f."""
    if "rpts" not in metrics["tasks"]:
        return []
    tasks = metrics["tasks"]
    parts = ["## RPTS", "", *rpts_notes(metrics.get("rpts") or {}),
             leaderboard(overall, tasks, metrics["matcher"], columns(tasks, "rpts")), ""]
    scored = {name: sec["rpts"] for name, sec in overall.items() if sec["rpts"]["mean"] is not None}
    if scored:
        parts += ["Sensitivity (RPTS's study of lambda and h_f), x100:", ""]
    for name, sec in scored.items():
        parts += sensitivity_table(name, sec)
    return parts


def _sweep(metrics: dict, overall: dict) -> list[str]:
    tasks = metrics["tasks"]
    if not columns(tasks, "sweep"):
        return []
    sweep = metrics.get("sweep") or {}
    return ["## Threshold sweep", "",
            f"Each judge's step scores flag a step when 1 - score (P(incorrect)) reaches a threshold. The threshold "
            f"with the best step F1 is chosen on the chains of {sweep.get('n_dev_questions', '?')} questions (a share "
            f"of {sweep.get('dev_fraction', '?')}, drawn with seed {sweep.get('seed', '?')}; `--sweep-dev`, "
            "`--sweep-seed`) and scored on the chains of the other questions only, beside the F1 of the judge's own "
            "verdicts on those same chains. The curves (`plots/threshold_sweep.png`) show F1 against the threshold "
            "on both parts.", "",
            leaderboard(overall, tasks, metrics["matcher"], columns(tasks, "sweep")), ""]


def _number_or_dash(value, scale: int = 100) -> str:
    return "–" if value is None else _number(value, scale)


def _best_of_n(metrics: dict, overall: dict) -> list[str]:
    """The registry's table (each question with all its chains), then accuracy against N."""
    tasks = metrics["tasks"]
    if "best-of-n" not in tasks:
        return []
    sections = {name: sec["best-of-n"] for name, sec in overall.items() if "best-of-n" in sec}
    first = next(iter(sections.values()), None)
    parts = ["## Best-of-N", "",
             "Each judge picks, among a question's chains (same `group_id`, known answer label, two or more), the one "
             "it scores highest: by its chain score, or by the minimum, mean or last of its step scores; a tie for "
             "the top counts its expected accuracy. Accuracy of the picked answer x100, against a random pick (its "
             "expectation), majority vote over final answers and the oracle (any chain right), which are the same "
             "for every judge. \"–\": the judge gives no such score.", "",
             leaderboard(overall, tasks, metrics["matcher"], columns(tasks, "best_of_n")), ""]
    if not first or not first["ns"]:
        return parts + ["No question has two or more chains with a known answer label.", ""]
    ns = first["ns"]
    subsets = first["subsets"]
    parts += [f"Against N: every N-subset of a question's chains when there are at most {subsets['max']}, else "
              f"{subsets['max']} drawn with seed {subsets['seed']} (`--bon-subsets`), averaged; questions with at "
              "least N chains (`plots/best_of_n.png`).", "",
              "| Picker | " + " | ".join(f"N={n}" for n in ns) + " |", "|---" * (len(ns) + 1) + "|",
              "| questions | " + " | ".join(str(first["n_questions_at"][str(n)]) for n in ns) + " |"]
    names = {"chain": "chain score", "min": "min step", "mean": "mean step", "last": "last step"}
    for name, sec in sections.items():
        for selector in SELECTORS:
            curve = sec["curve"][selector]
            if any(curve.get(str(n)) is not None for n in ns):
                parts.append(f"| `{name}` {names[selector]} | "
                             + " | ".join(_number_or_dash(curve.get(str(n))) for n in ns) + " |")
    for ref in REFERENCES:
        parts.append(f"| {ref} | " + " | ".join(_number_or_dash(first["curve"][ref].get(str(n))) for n in ns) + " |")
    return parts + [""]


def _correction(metrics: dict, overall: dict) -> list[str]:
    tasks = metrics["tasks"]
    if "correction" not in tasks:
        return []
    info = metrics.get("correction") or {}
    notes = []
    for name in overall:
        corrector = (info.get("correctors") or {}).get(name)
        requests = (info.get("requests") or {}).get(name)
        sec = overall[name]["correction"]
        if corrector is None:
            notes.append(f"- `{name}`: no corrector")
            continue
        failed = sec["gold"]["n_failed"] + sec["own"]["n_failed"]
        no_answer = sec["gold"]["n_no_answer"] + sec["own"]["n_no_answer"]
        notes.append(f"- `{name}`: corrected by `{corrector}` ({requests['asked']} requests asked and "
                     f"{requests['cached']} answered from the cache by that corrector in this run, for all the judges "
                     f"it corrects); {sec['n_chains']} chains with a reference answer; {no_answer} replies without a "
                     f"readable answer (counted wrong), {failed} failed requests (left out, asked again on a rerun)")
    return ["## Correction", "",
            "VISCO's correction (Sec. 3.1.2): a corrector is shown each chain with a critique and asked for the "
            "answer. PCR: share of wrong answers made right; NCR: share of right answers made wrong (lower is "
            "better); gain = PCR - NCR. With the gold critique (the data's step labels, first reference "
            "explanation and answer label) and with the judge's own critique. `corrections.jsonl` holds every "
            "corrected answer; `plots/correction.png` the rates.", "",
            leaderboard(overall, tasks, metrics["matcher"], columns(tasks, "correction")), "", *notes, ""]


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
    choice = next((r["overall"].get("choice") for r in metrics["judges"].values()), None)
    if choice:
        parts += [f"Choice ranking: {choice['n_groups']} groups, {choice['n_chains']} chains with mixed "
                  "correctness (unknown ones left out). Judges without a chain score are ranked by the fraction of "
                  "steps judged correct; a tie for the top scores its share of correct chains.", ""]
    if "shiftcheck" in tasks:
        parts += ["ShiftCheck (every circular shift of up to 4 chains per group must pick the one fully "
                  "correct chain):", *_shiftcheck_notes(metrics), ""]
    parts += _pairwise_notes(metrics)
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
        parts += ["## Diagnostics", "", diagnostics_text(diagnostics), "",
                  leaderboard(overall, tasks, matcher, diagnostics), ""]
    parts += _rpts(metrics, overall)
    parts += _sweep(metrics, overall)
    parts += _best_of_n(metrics, overall)
    parts += _correction(metrics, overall)
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
        parts.append(f"{m.display.format(matcher='')} {'–' if value is None else _number(value, m.scale)}")
        if m.name == "pairwise_accuracy" and sec["pairwise"].get("n_unparseable"):
            # a low accuracy from unreadable output, told apart from one of wrong choices where it is read
            parts.append(f"({_unparseable(sec['pairwise'], 'pair replies')})")
    return " ".join(parts)
