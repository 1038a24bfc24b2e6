"""From gold labels and judges' predictions to the numbers of `metrics.json`: plain data, no rendering.

`compute_metrics` applies the functions of `stepcritic.eval.metrics` to every judge, over all chains
and per `category`. `report` renders these numbers (markdown, plots); anything else can render them
differently from `metrics.json` alone.

Judge scores used for correlations and ranking:
- step score: 1 - p_incorrect when the judge gives a probability, else its verdict (1 correct, 0 not).
- chain score: the judge's `chain_score`; a judge without one is scored by the fraction of steps it
  judged correct (an unparsed verdict counts as not correct). The human chain score is the mean of the
  chain's step human scores (MiCEval's 1 / 0.5 / 0 mapping).
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
