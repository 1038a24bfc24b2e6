"""`evaluate` wrapper of `stepcritic.eval.metrics.visco_scores`: VISCO's VISCore from per-item critique results.

    metric = evaluate.load("/abs/path/eval/evaluate_modules/viscore.py")
    metric.compute(level=["answer", "step", ...], predictions=[...], references=[...],
                   explanation_match=[None, 1.0, ...])

One row per judged unit: `level` is "answer" (a final-answer verdict) or "step" (a step verdict);
predictions/references are correctness booleans (None = unparseable / unknown); `explanation_match`
(step rows) is the matcher's score in [0, 1] for the step's explanation against its reference
critiques, or None when the step has no reference (see `stepcritic.eval.metrics.explanation_f1`).
Returns answer_f1, step_f1, explanation_f1 and their geometric mean, viscore.
"""

import datasets
import evaluate

from stepcritic.eval.metrics import visco_scores


class VISCore(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=__doc__,
            citation="Wu et al., VISCO: Benchmarking Fine-Grained Critique and Correction Towards "
                     "Self-Improvement in Visual Reasoning, 2024.",
            inputs_description="level, predictions, references, explanation_match (see the module docstring).",
            features=datasets.Features({"level": datasets.Value("string"),
                                        "predictions": datasets.Value("bool"),
                                        "references": datasets.Value("bool"),
                                        "explanation_match": datasets.Value("float64")}),
        )

    def _compute(self, level, predictions, references, explanation_match):
        return visco_scores(level, references, predictions, explanation_match)
