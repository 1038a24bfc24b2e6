"""ProcessBench's first-error task (`eval/process.py`): each judge's first flagged step against the labelled one."""

from __future__ import annotations

from stepcritic.eval import process as P
from stepcritic.eval.tasks.base import Metric, Task, register

NO_FIRST_ERROR = "the judge gives no step verdicts, or no chain of that kind has a first-error label"
METRICS = [
    Metric("first_error_accuracy_error", "first-error", "error_accuracy", "FE acc. (error)", True,
           "mean over chains whose first error is labelled",
           "share of erroneous chains whose first flagged step is the labelled first error (ProcessBench Sec. 4.1); "
           "an unreadable output is wrong", P.first_error_accuracy, "chain", NO_FIRST_ERROR),
    Metric("first_error_accuracy_correct", "first-error", "correct_accuracy", "FE acc. (correct)", True,
           "mean over chains with every step labelled correct",
           "share of correct chains in which the judge flags no step (ProcessBench Sec. 4.1); an unreadable output is "
           "wrong", P.first_error_accuracy, "chain", NO_FIRST_ERROR),
    Metric("first_error_f1", "first-error", "f1", "FE F1", True, "harmonic mean of the two accuracies",
           "ProcessBench's F1 (Sec. 4.1, Table 3): 2ab / (a + b) of the accuracy on erroneous (a) and on correct (b) "
           "chains", P.first_error_accuracy, "chain", "either accuracy is undefined", headline=True),
]


def section(d) -> dict:
    import numpy as np  # loaded when a judge is scored, not for `stepcritic eval --help`

    g, a, v = d.cols, d.answers, d.view
    chain = np.searchsorted(v.chains, v.step_chain)  # each step's chain as a position in the view
    verdicts = a.verdict[v.steps]
    gives = bool(a.unread[v.chains].any() or (~np.isnan(verdicts)).any())
    return P.section_from_arrays(g.correct[v.steps], verdicts, a.unread[v.chains], chain, len(v.chains),
                                 g.step_pos[v.steps], gives)


def f1(data, boot):
    """The bootstrap statistic of ProcessBench's F1 (`intervals`)."""
    import numpy as np

    g, v, a = data.cols, data.view, data.answers
    return P.section_from_arrays(g.correct[v.steps], a.verdict[v.steps], a.unread[v.chains],
                                 np.searchsorted(v.chains, v.step_chain), len(v.chains), g.step_pos[v.steps],
                                 True, data.chain_groups(boot), boot)["f1"]


TASK = register(Task(
    "first-error", "critiques", "each judge's first flagged step against the chain's labelled first error (-1: "
    "none): accuracy on erroneous and on correct chains and their harmonic mean (ProcessBench Sec. 4.1)",
    # opt-in: the process benchmarks' scores, read off the same critiques as the critique task
    default=False, section=section, statistics={"first_error_f1": f1},
), METRICS)
