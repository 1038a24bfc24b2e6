"""ProcessBench's first-error task (`eval/process.py`): each judge's first flagged step against the labelled one."""

from __future__ import annotations

from stepcritic.eval import process as P
from stepcritic.eval.tasks.base import Metric, Task, register

NO_FIRST_ERROR = "the judge gives no step verdicts, or no chain of that kind has a first-error label"
# opt-in: the process benchmarks' scores, read off the same critiques as the critique task
TASK = Task("first-error", "critiques", "each judge's first flagged step against the chain's labelled first error (-1: "
            "none): accuracy on erroneous and on correct chains and their harmonic mean (ProcessBench Sec. 4.1)",
            default=False)
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
register(TASK, METRICS)
