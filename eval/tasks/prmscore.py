"""PRMBench's PRMScore (`eval/process.py`), read off the same critiques as the critique task."""

from __future__ import annotations

from stepcritic.eval import process as P
from stepcritic.eval.tasks.base import Metric, Task, register

TASK = Task("prmscore", "critiques", "PRMBench's PRMScore: the F1 of finding erroneous steps and of finding "
            "correct ones, weighted equally (PRMBench Sec. 4.1)", default=False)
METRICS = [
    Metric("prmscore", "prmscore", "prmscore", "PRMScore", True, "pooled over all steps with a gold label",
           "PRMBench's PRMScore (Sec. 4.1): 0.5 F1 of flagging erroneous steps + 0.5 F1 of passing correct ones; a "
           "step without a verdict counts as passed", P.prm_score, "step",
           "the judge gives no step verdicts, or the steps are all of one class", headline=True),
]
register(TASK, METRICS)
