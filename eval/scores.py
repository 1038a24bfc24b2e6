"""A judge's scores read off its predictions, one prediction (a chain's judgment, `runner.prediction_record`) at a
time: what every task's section and every bootstrap statistic builds on (`results`, `intervals`, `rpts`,
`best_of_n`, `correction`). Stdlib only; the rules are stated in `results`' docstring.
"""

from __future__ import annotations


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


def choice_records(gold: list[dict], preds: list[dict]) -> list[dict]:
    return [{"group_id": c["group_id"], "chain_id": c["chain_id"], "chain_correct": c["chain_correct"],
             "score": chain_score(p)} for c, p in zip(gold, preds)]
