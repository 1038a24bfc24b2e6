"""`evaluate` wrapper of `stepcritic.eval.shiftcheck.shiftcheck`: CMMU's circular evaluation and BiasRate.

    metric = evaluate.load("/abs/path/eval/evaluate_modules/shiftcheck.py")
    metric.compute(group_id=[...], options=[[...], ...], prediction=["A", None, ...], gold=[...])

One row per shown question: its group, the option contents in the order shown, the picked letter
(None when unparseable) and the content of the right option (None when unknown).
"""

import datasets
import evaluate

from stepcritic.eval.shiftcheck import shiftcheck


class ShiftCheck(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=__doc__,
            citation="He et al., CMMU: A Benchmark for Chinese Multi-modal Multi-type Question "
                     "Understanding and Reasoning, 2024.",
            inputs_description="group_id, options, prediction, gold (see the module docstring).",
            features=datasets.Features({"group_id": datasets.Value("string"),
                                        "options": datasets.Sequence(datasets.Value("string")),
                                        "prediction": datasets.Value("string"),
                                        "gold": datasets.Value("string")}),
        )

    def _compute(self, group_id, options, prediction, gold):
        records = [{"group_id": g, "options": list(o), "prediction": p, "gold": a}
                   for g, o, p, a in zip(group_id, options, prediction, gold)]
        return shiftcheck(records)
