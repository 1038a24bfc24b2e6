"""The choice task: the chains of one question ranked by the judge's chain scores."""

from __future__ import annotations

from stepcritic.eval import metrics as M
from stepcritic.eval.scores import choice_records
from stepcritic.eval.tasks.base import Metric, Task, register

METRICS = [
    Metric("choice_ranking_accuracy", "choice", "accuracy", "Choice rank.", True,
           "mean over questions with a correct and an incorrect chain",
           "share of questions whose top-scored chain is fully correct; a tie scores its share of correct "
           "chains (MiCEval App. D.1)", M.choice_ranking_accuracy, "group",
           "no question has both a correct and an incorrect chain, or the judge scores no chain", headline=True),
]


def choice_metrics(gold: list[dict], preds: list[dict]) -> dict:
    n_own = sum(p.get("chain_score") is not None for p in preds)
    source = ("chain_score" if n_own == len(preds) else
              "fraction of steps judged correct" if n_own == 0 else "chain_score, else fraction judged correct")
    return M.choice_ranking_accuracy(choice_records(gold, preds)) | {"score": source}


def section(d) -> dict:
    return choice_metrics(d.gold, d.preds)


def accuracy(data, boot):
    """The bootstrap statistic of the choice ranking accuracy (`intervals`)."""
    return M.choice_ranking_accuracy(choice_records(data.gold, data.preds), boot)["accuracy"]


def render(metrics: dict, overall: dict) -> list[str]:
    """A note under the leaderboard: which chains were ranked, and by what."""
    choice = next((sec.get("choice") for sec in overall.values()), None)
    if not choice:
        return []
    return [f"Choice ranking: {choice['n_groups']} groups, {choice['n_chains']} chains with mixed "
            "correctness (unknown ones left out). Judges without a chain score are ranked by the fraction of "
            "steps judged correct; a tie for the top scores its share of correct chains.", ""]


TASK = register(Task(
    "choice", "critiques", "the chains of one question ranked by the judge's chain scores (MiCEval App. D.1)",
    section=section, statistics={"choice_ranking_accuracy": accuracy}, render=render, place=10,
), METRICS)
