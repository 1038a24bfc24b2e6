"""From gold labels and judges' predictions to `metrics.json` numbers, `report.md` and the plots.

`compute_metrics` applies the functions of `stepcritic.eval.metrics` to every judge, over all chains
and per `category`; `write_report` renders the numbers as a leaderboard in the papers' style (scores
x100, the best value per column in bold, direction taken from `METRICS`).

Judge scores used for correlations and ranking:
- step score: 1 - p_incorrect when the judge gives a probability, else its verdict (1 correct, 0 not).
- chain score: the judge's `chain_score`; a judge without one is scored by the fraction of steps it
  judged correct (an unparsed verdict counts as not correct). The human chain score is the mean of the
  chain's step human scores (MiCEval's 1 / 0.5 / 0 mapping).
"""

from __future__ import annotations

import os
import statistics

from stepcritic.eval import metrics as M
from stepcritic.eval.matchers import EmbeddingMatcher, LexicalMatcher

MATCHERS = {"lexical": LexicalMatcher, "embedding": EmbeddingMatcher}
CALIBRATION_BINS = 10


# ----------------------------------------------------------------------------- judge scores

def step_scores(pred: dict) -> list[float | None]:
    p_incorrect = pred.get("p_incorrect") or [None] * len(pred["verdicts"])
    return [1.0 - p if p is not None else (None if v is None else float(v))
            for v, p in zip(pred["verdicts"], p_incorrect)]


def chain_score(pred: dict) -> float:
    if pred.get("chain_score") is not None:
        return pred["chain_score"]
    return sum(v is True for v in pred["verdicts"]) / len(pred["verdicts"])


def human_chain_score(chain: dict) -> float | None:
    scores = [s["human_score"] for s in chain["steps"] if s["human_score"] is not None]
    return statistics.fmean(scores) if scores else None


# ----------------------------------------------------------------------------- metrics

def _correlations(human: list, judge: list) -> dict:
    somers = M.somers_d(human, judge)
    return {"d": somers["d"], "rho": M.spearman(human, judge)["rho"], "n": somers["n"]}


def _calibration(gold_flags: list[bool], p_incorrect: list[float]) -> dict | None:
    if len(set(gold_flags)) < 2:
        return None
    from sklearn.calibration import calibration_curve
    from sklearn.metrics import brier_score_loss

    frac_incorrect, mean_p = calibration_curve(gold_flags, p_incorrect, n_bins=CALIBRATION_BINS)
    return {"mean_predicted": mean_p.tolist(), "fraction_incorrect": frac_incorrect.tolist(),
            "brier": float(brier_score_loss(gold_flags, p_incorrect)), "n": len(gold_flags)}


def critique_metrics(gold: list[dict], preds: list[dict], matcher) -> dict:
    gold_steps = [s["correct"] for c in gold for s in c["steps"]]
    pred_steps = [v for p in preds for v in p["verdicts"]]
    step = M.step_f1(gold_steps, pred_steps)
    answer = M.answer_f1([c["answer_correct"] for c in gold], [p["answer_correct"] for p in preds])
    items = [{"gold": s["correct"], "pred": v, "references": s["explanations"],
              "explanation": (p.get("explanations") or [None] * len(p["verdicts"]))[i]}
             for c, p in zip(gold, preds) for i, (s, v) in enumerate(zip(c["steps"], p["verdicts"]))]
    explanation = M.explanation_f1(items, matcher)
    n_invalid = sum(not p["valid"] for p in preds)

    judge_steps = [step_scores(p) for p in preds]
    human_chains = [human_chain_score(c) for c in gold]
    correlation = {
        "step": _correlations([s["human_score"] for c in gold for s in c["steps"]],
                              [x for scores in judge_steps for x in scores]),
        "chain": _correlations(human_chains, [chain_score(p) for p in preds]),
    }
    if any(s["premises"] for c in gold for s in c["steps"]):
        premises = [[s["premises"] for s in c["steps"]] for c in gold]
        correlation["chain_rpts"] = _correlations(
            [M.rpts_chain(pr, [s["human_score"] for s in c["steps"]]) for pr, c in zip(premises, gold)],
            [M.rpts_chain(pr, scores) for pr, scores in zip(premises, judge_steps)])

    with_probability = [(g is False, p) for c, pred in zip(gold, preds) if pred.get("p_incorrect")
                        for g, p in zip((s["correct"] for s in c["steps"]), pred["p_incorrect"])
                        if g is not None and p is not None]
    return {
        "n_chains": len(gold), "n_invalid": n_invalid, "invalid_rate": n_invalid / len(gold),
        "step": step, "confusion": {"tp": step["tp"], "fp": step["fp"], "fn": step["fn"],
                                    "tn": step["n"] - step["tp"] - step["fp"] - step["fn"]},
        "answer": answer, "explanation": explanation,
        "viscore": M.viscore(answer["f1"], step["f1"], explanation["f1"]),
        "correlation": correlation,
        "error_propagation": M.error_propagation([[s["correct"] for s in c["steps"]] for c in gold],
                                                 [p["verdicts"] for p in preds]),
        "calibration": _calibration(*zip(*with_probability)) if with_probability else None,
    }


def choice_metrics(gold: list[dict], preds: list[dict]) -> dict:
    records = [{"group_id": c["group_id"], "chain_id": c["chain_id"], "chain_correct": c["chain_correct"],
                "score": chain_score(p)} for c, p in zip(gold, preds)]
    n_own = sum(p.get("chain_score") is not None for p in preds)
    source = ("chain_score" if n_own == len(preds) else
              "fraction of steps judged correct" if n_own == 0 else "chain_score, else fraction judged correct")
    return M.choice_ranking_accuracy(records) | {"score": source}


def section(gold: list[dict], preds: list[dict], picks: list[dict], tasks, matcher) -> dict:
    out = {}
    if "critique" in tasks:
        out["critique"] = critique_metrics(gold, preds, matcher)
    if "choice" in tasks:
        out["choice"] = choice_metrics(gold, preds)
    if "shiftcheck" in tasks:
        out["shiftcheck"] = M.shiftcheck(picks)
    return out


def compute_metrics(gold: list[dict], predictions: dict, picks: dict, tasks, matcher: str = "lexical") -> dict:
    """metrics.json: per judge, every applicable metric overall and per category, with counts.

    predictions[judge] lists one prediction per gold chain, in gold order; picks[judge] the ShiftCheck
    records (each with `category`).
    """
    match = MATCHERS[matcher]()
    categories = sorted({c["category"] for c in gold if c["category"] is not None})
    judges = {}
    for name in predictions:
        preds = predictions[name]
        result = {"overall": section(gold, preds, picks[name], tasks, match), "by_category": {}}
        for category in categories:
            keep = [i for i, c in enumerate(gold) if c["category"] == category]
            result["by_category"][category] = section(
                [gold[i] for i in keep], [preds[i] for i in keep] if preds else [],
                [q for q in picks[name] if q["category"] == category], tasks, match)
        judges[name] = result
    return {"tasks": list(tasks), "matcher": match.name, "n_chains": len(gold),
            "n_steps": sum(len(c["steps"]) for c in gold), "categories": categories, "judges": judges}


# ----------------------------------------------------------------------------- report.md

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
    ("Flagged %", "critique", ("error_propagation", "predicted_incorrect_rate"), None, 100),
    ("Gold incorrect %", "critique", ("error_propagation", "gold_incorrect_rate"), None, 100),
    ("Propagation bias", "critique", ("error_propagation", "propagation_bias"), None, 1),
    ("Spearman step", "critique", ("correlation", "step", "rho"), "spearman", 100),
    ("Spearman chain", "critique", ("correlation", "chain", "rho"), "spearman", 100),
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
        f"explanation F1 uses the `{matcher}` matcher. Somers' D compares judge scores with human scores "
        "(MiCEval). Best value per column in bold.", "",
        "## Leaderboard", "", leaderboard(overall, tasks, matcher), "",
    ]
    choice = next((r["overall"].get("choice") for r in metrics["judges"].values()), None)
    if choice:
        parts += [f"Choice ranking: {choice['n_groups']} groups, {choice['n_chains']} chains with mixed "
                  "correctness. Judges without a chain score are ranked by the fraction of steps judged "
                  "correct.", ""]
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
