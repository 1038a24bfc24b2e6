"""`evaluate` wrapper of VISCO's VISCore from per-item critique results.

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

from stepcritic.eval.metrics import answer_f1, explanation_match_f1, step_f1, viscore


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
        unknown = set(level) - {"answer", "step"}
        if unknown:
            raise ValueError(f"level must be 'answer' or 'step', got {sorted(unknown)}")
        rows = list(zip(level, predictions, references, explanation_match))
        answers = [(p, r) for lv, p, r, _ in rows if lv == "answer"]
        steps = [(p, r, m) for lv, p, r, m in rows if lv == "step"]
        f1_a = answer_f1([r for _, r in answers], [p for p, _ in answers])["f1"]
        f1_s = step_f1([r for _, r, _ in steps], [p for p, _, _ in steps])["f1"]
        f1_e = explanation_match_f1([r for _, r, _ in steps], [p for p, _, _ in steps],
                                    [m for _, _, m in steps])["f1"]
        return {"answer_f1": f1_a, "step_f1": f1_s, "explanation_f1": f1_e, "viscore": viscore(f1_a, f1_s, f1_e)}
