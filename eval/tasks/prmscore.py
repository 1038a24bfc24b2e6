"""PRMBench's PRMScore (`eval/process.py`), read off the same critiques as the critique task."""

from __future__ import annotations

from stepcritic.eval import process as P
from stepcritic.eval.tasks.base import Metric, Task, register

METRICS = [
    Metric("prmscore", "prmscore", "prmscore", "PRMScore", True, "pooled over all steps with a gold label",
           "PRMBench's PRMScore (Sec. 4.1): 0.5 F1 of flagging erroneous steps + 0.5 F1 of passing correct ones; a "
           "step without a verdict counts as passed", P.prm_score, "step",
           "the judge gives no step verdicts, or the steps are all of one class", headline=True),
]


def section(d) -> dict:
    import numpy as np  # loaded when a judge is scored, not for `stepcritic eval --help`

    a, v = d.answers, d.view
    verdicts = a.verdict[v.steps]
    out = P.prm_score(d.cols.correct[v.steps], verdicts)
    if not (a.unread[v.chains].any() or (~np.isnan(verdicts)).any()):  # a judge without step verdicts
        out.update(prmscore=None, f1_negative=None, f1_positive=None)
    return out


def prmscore(data, boot):
    """The bootstrap statistic of PRMScore (`intervals`)."""
    steps = data.view.steps
    return P.prm_score(data.cols.correct[steps], data.answers.verdict[steps], data.step_groups(boot),
                       boot)["prmscore"]


TASK = register(Task(
    "prmscore", "critiques", "PRMBench's PRMScore: the F1 of finding erroneous steps and of finding correct ones, "
    "weighted equally (PRMBench Sec. 4.1)",
    default=False, section=section, steps=True, statistics={"prmscore": prmscore},
), METRICS)
