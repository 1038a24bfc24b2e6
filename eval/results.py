"""From gold labels and judges' predictions to the numbers of `metrics.json`: plain data, no rendering.

`compute_metrics` applies the functions of `stepcritic.eval.metrics` to every judge, over all chains
and per `category`. `report` renders these numbers (markdown, plots); anything else can render them
differently from `metrics.json` alone.

Judge scores used for correlations and ranking:
- step score: 1 - p_incorrect when the judge gives a probability, else its verdict (1 correct, 0 not).
- chain score: the judge's `chain_score`; a judge without one is scored by the fraction of steps it
  judged correct (an unparsed verdict counts as not correct), and a judge with neither has none (None).
- human scores (MiCEval Sec. 6.2, App. D): a step's `human_score` (1 / 0.5 / 0); a chain's good/bad
  MCoT label (`chain_correct`: 1 / 0), not a mean of step scores.

What a judge cannot produce is None ("–" in the report), never 0: step P/R/F1 for a judge that gives no
step verdict at all (a reward model), answer F1 for one that gives no answer verdict, explanation F1 for
one that writes no explanations or on data without reference critiques (and VISCore with it).
"""

from __future__ import annotations

import statistics

from stepcritic.eval import metrics as M
from stepcritic.eval.matchers import MATCHERS

CALIBRATION_BINS = 10


# ----------------------------------------------------------------------------- judge scores

def step_scores(pred: dict) -> list[float | None]:
    p_incorrect = pred.get("p_incorrect") or [None] * len(pred["verdicts"])
    return [1.0 - p if p is not None else (None if v is None else float(v))
            for v, p in zip(pred["verdicts"], p_incorrect)]


def chain_score(pred: dict) -> float | None:
    if pred.get("chain_score") is not None:
        return pred["chain_score"]
    if all(v is None for v in pred["verdicts"]) and pred.get("valid", True):
        return None  # a judge that gives neither a chain score nor step verdicts cannot rank chains
    return sum(v is True for v in pred["verdicts"]) / len(pred["verdicts"])


def human_chain_score(chain: dict) -> float | None:
    """MiCEval's human label of a whole MCoT (good 1 / bad 0, Sec. 2.3.3 and App. D.1), None if unknown."""
    label = chain.get("chain_correct")
    return None if label is None else float(label)


def human_step_mean(chain: dict) -> float | None:
    scores = [s["human_score"] for s in chain["steps"] if s["human_score"] is not None]
    return statistics.fmean(scores) if scores else None


def output_counts(pred: dict) -> tuple[int, int]:
    """(outputs, invalid outputs) behind one prediction: a verifier judge asks once per step, so one
    unreadable reply of four is 1 invalid output of 4 (MiCEval's invalid rate is per output, Sec. 6.1)."""
    extra = pred.get("extra") or {}
    if extra.get("n_outputs") is not None:
        return extra["n_outputs"], extra.get("n_invalid", 0)
    return 1, int(not pred["valid"])


def gives(preds: list[dict], field: str) -> bool:
    """Whether a judge produces `field` at all: some value given, or some output it failed to read that
    was meant to give it (not the unreadable reply of a judge that only scores whole chains)."""
    values = [v for p in preds for v in (p[field] if isinstance(p[field], list) else [p[field]])]
    return any(v is not None for v in values) or any(
        not p["valid"] and (p.get("extra") or {}).get("scope") != "chain" for p in preds)


def _undefined(result: dict) -> dict:
    return result | {k: None for k in ("precision", "recall", "f1")}


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


def _step_correlations(gold: list[dict], judge_steps: list[list], keep=lambda step: True) -> dict:
    human = [s["human_score"] if keep(s) else None for c in gold for s in c["steps"]]
    return _correlations(human, [x for scores in judge_steps for x in scores])


def critique_metrics(gold: list[dict], preds: list[dict], matcher) -> dict:
    from stepcritic.data_prep.schema import describes, reasons

    gold_steps = [s["correct"] for c in gold for s in c["steps"]]
    pred_steps = [v for p in preds for v in p["verdicts"]]
    step = M.step_f1(gold_steps, pred_steps)
    if not gives(preds, "verdicts"):
        step = _undefined(step)
    answer = M.answer_f1([c["answer_correct"] for c in gold], [p["answer_correct"] for p in preds])
    if not gives(preds, "answer_correct"):
        answer = _undefined(answer)
    items = [{"gold": s["correct"], "pred": v, "references": s["explanations"],
              "explanation": (p.get("explanations") or [None] * len(p["verdicts"]))[i]}
             for c, p in zip(gold, preds) for i, (s, v) in enumerate(zip(c["steps"], p["verdicts"]))]
    explanation = M.explanation_f1(items, matcher)
    if all(p.get("explanations") is None for p in preds):  # the judge kind writes no explanations
        explanation = _undefined(explanation)
    counts = [output_counts(p) for p in preds]
    n_outputs, n_invalid = sum(n for n, _ in counts), sum(k for _, k in counts)

    judge_steps = [step_scores(p) for p in preds]
    macro = M.step_macro_f1(gold_steps, pred_steps) if gives(preds, "verdicts") else {
        "f1_incorrect": None, "f1_correct": None, "macro_f1": None, "n": 0}
    step = {**step, **{k: macro[k] for k in ("f1_incorrect", "f1_correct", "macro_f1")},
            "auroc": M.step_auroc(gold_steps, [x for scores in judge_steps for x in scores])}
    correlation = {
        "step": _step_correlations(gold, judge_steps),
        # MiCEval App. D.3 reports step-level correlation per step type; a "both" step counts in each
        "step_description": _step_correlations(gold, judge_steps, describes),
        "step_reasoning": _step_correlations(gold, judge_steps, reasons),
        "chain": _correlations([human_chain_score(c) for c in gold], [chain_score(p) for p in preds]),
    }
    annotated = [i for i, c in enumerate(gold) if all(s["premises"] is not None for s in c["steps"])]
    if annotated:  # RPTS needs the premise tree; chains without premise annotations are left out
        premises = {i: [s["premises"] for s in gold[i]["steps"]] for i in annotated}
        correlation["chain_rpts"] = _correlations(
            [M.rpts_chain(premises[i], [s["human_score"] for s in gold[i]["steps"]]) for i in annotated],
            [M.rpts_chain(premises[i], judge_steps[i]) for i in annotated])

    with_probability = [(g is False, p) for c, pred in zip(gold, preds) if pred.get("p_incorrect")
                        for g, p in zip((s["correct"] for s in c["steps"]), pred["p_incorrect"])
                        if g is not None and p is not None]
    return {
        "n_chains": len(gold), "n_outputs": n_outputs, "n_invalid": n_invalid,
        "invalid_rate": n_invalid / n_outputs if n_outputs else None,
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
