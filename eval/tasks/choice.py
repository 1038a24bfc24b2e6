"""The choice task: the chains of one question ranked by the judge's chain scores."""

from __future__ import annotations

from stepcritic.eval import metrics as M
from stepcritic.eval.tasks.base import Metric, Task, register

TASK = Task("choice", "critiques", "the chains of one question ranked by the judge's chain scores (MiCEval App. D.1)")
METRICS = [
    Metric("choice_ranking_accuracy", "choice", "accuracy", "Choice rank.", True,
           "mean over questions with a correct and an incorrect chain",
           "share of questions whose top-scored chain is fully correct; a tie scores its share of correct "
           "chains (MiCEval App. D.1)", M.choice_ranking_accuracy, "group",
           "no question has both a correct and an incorrect chain, or the judge scores no chain", headline=True),
]
register(TASK, METRICS)
