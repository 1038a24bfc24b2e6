"""`evaluate` wrapper of `stepcritic.eval.metrics.somers_d`: Somers' D(judge | human), as in MiCEval.

    metric = evaluate.load("/abs/path/eval/evaluate_modules/somers_d.py")
    metric.compute(predictions=judge_scores, references=human_scores)

Pairs where either score is None are skipped.
"""

import datasets
import evaluate

from stepcritic.eval.metrics import somers_d


class SomersD(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=__doc__,
            citation="Somers, A new asymmetric measure of association for ordinal variables, 1962; "
                     "Zhou et al., MiCEval, 2024.",
            inputs_description="predictions: judge scores; references: human scores (float or None).",
            features=datasets.Features({"predictions": datasets.Value("float64"),
                                        "references": datasets.Value("float64")}),
        )

    def _compute(self, predictions, references):
        return somers_d(references, predictions)
