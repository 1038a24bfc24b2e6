"""`evaluate` wrapper of `stepcritic.eval.metrics.step_f1`: VISCO step-level F1, incorrect = positive class.

    metric = evaluate.load("/abs/path/eval/evaluate_modules/step_f1.py")
    metric.compute(predictions=[False, True, None], references=[False, False, True])

Labels are booleans (True = step correct); pass the steps of all chains flattened. A prediction None
(unparseable) counts as not flagged; a reference None is skipped.
"""

import datasets
import evaluate

from stepcritic.eval.metrics import step_f1


class StepF1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=__doc__,
            citation="Wu et al., VISCO: Benchmarking Fine-Grained Critique and Correction Towards "
                     "Self-Improvement in Visual Reasoning, 2024.",
            inputs_description="predictions, references: per-step correctness (bool or None).",
            features=datasets.Features({"predictions": datasets.Value("bool"),
                                        "references": datasets.Value("bool")}),
        )

    def _compute(self, predictions, references):
        return step_f1(references, predictions)
