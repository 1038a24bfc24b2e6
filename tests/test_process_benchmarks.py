"""`--tasks first-error` (ProcessBench) and `--tasks prmscore` (PRMBench): the metric functions, ProcessBench's
published F1 from its own accuracy pairs, and both tasks through `stepcritic eval` on ProcessBench-layout chains.

The numbers are typed from ProcessBench (Zheng et al., 2024, arXiv:2412.06559): Table 5 (GSM8K and MATH) and Table 7
(OlympiadBench and Omni-MATH) give, per model and subset, the accuracy on erroneous samples, on correct samples and
the F1; Table 2 gives each subset's numbers of erroneous and correct samples.
"""

import json

import pytest

from stepcritic.cli import main as stepcritic
from stepcritic.eval import process as P
from stepcritic.eval import results
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.runner import evaluate
from stepcritic.eval.tasks import METRICS, TASKS

# (model, subset): (accuracy on erroneous samples, accuracy on correct samples, F1), ProcessBench Tables 5 and 7
PROCESSBENCH_ROWS = {
    ("Qwen2.5-Math-7B-PRM800K", "GSM8K"): (53.1, 95.3, 68.2),
    ("Qwen2.5-Math-7B-PRM800K", "MATH"): (48.0, 90.1, 62.6),
    ("Qwen2.5-Math-7B-PRM800K", "OlympiadBench"): (35.7, 87.3, 50.7),
    ("Qwen2.5-Math-7B-PRM800K", "Omni-MATH"): (29.8, 86.3, 44.3),
    ("Skywork-PRM-7B", "GSM8K"): (61.8, 82.9, 70.8),
    ("Skywork-PRM-7B", "MATH"): (43.8, 69.2, 53.6),
    ("Math-Shepherd-PRM-7B", "GSM8K"): (32.4, 91.7, 47.9),
    ("RLHFlow-PRM-Mistral-8B", "OlympiadBench"): (8.2, 43.1, 13.8),
    ("GPT-4o-0806", "GSM8K"): (70.0, 91.2, 79.2),
    ("GPT-4o-0806", "Omni-MATH"): (45.2, 65.6, 53.5),
    ("QwQ-32B-Preview", "MATH"): (78.1, 79.3, 78.7),
    ("o1-mini", "OlympiadBench"): (80.2, 95.6, 87.2),
    ("Qwen2.5-Coder-7B-Instruct", "Omni-MATH"): (0.9, 98.3, 1.8),
}
# subset: (erroneous samples, correct samples), ProcessBench Table 2
PROCESSBENCH_COUNTS = {"GSM8K": (207, 193), "MATH": (594, 406), "OlympiadBench": (661, 339), "Omni-MATH": (759, 241)}


@pytest.mark.parametrize("row", PROCESSBENCH_ROWS)
def test_processbench_f1_is_the_harmonic_mean_of_its_accuracy_pair(row):
    error, correct, f1 = PROCESSBENCH_ROWS[row]
    # the accuracies are printed to 0.1: the harmonic mean of the printed pair lands within 0.1 of the printed F1
    assert P.harmonic_mean(error, correct) == pytest.approx(f1, abs=0.1)
    assert 100 * P.harmonic_mean(error / 100, correct / 100) == pytest.approx(f1, abs=0.1)


@pytest.mark.parametrize("row", [r for r in PROCESSBENCH_ROWS if r[0] == "Qwen2.5-Math-7B-PRM800K"])
def test_processbench_row_from_per_chain_first_errors(row):
    # the subset's sample counts of Table 2, and a judge right on as many of each as the printed accuracies give:
    # first_error_accuracy then prints the same three numbers as the table
    error, correct, f1 = PROCESSBENCH_ROWS[row]
    n_error, n_correct = PROCESSBENCH_COUNTS[row[1]]
    hits_error, hits_correct = round(error / 100 * n_error), round(correct / 100 * n_correct)
    gold = [2] * n_error + [-1] * n_correct
    pred = [2] * hits_error + [0] * (n_error - hits_error) + [-1] * hits_correct + [3] * (n_correct - hits_correct)
    out = P.first_error_accuracy(gold, pred)
    assert round(100 * out["error_accuracy"], 1) == error and round(100 * out["correct_accuracy"], 1) == correct
    assert round(100 * out["f1"], 1) == f1 and (out["n_error"], out["n_correct"]) == (n_error, n_correct)


def test_first_error_rules():
    # an early flag and a late flag are both wrong on an erroneous chain; an unreadable output (None) is wrong on
    # either kind; with no chain of one kind its accuracy, and F1, are undefined
    out = P.first_error_accuracy([1, 1, 1, -1, -1], [1, 0, 2, -1, None])
    assert out["error_accuracy"] == pytest.approx(1 / 3) and out["correct_accuracy"] == 0.5
    assert out["f1"] == pytest.approx(2 * (1 / 3) * 0.5 / (1 / 3 + 0.5))
    assert P.first_error_accuracy([0], [0])["f1"] is None and P.harmonic_mean(0.0, 0.0) == 0.0


def test_gold_first_errors_from_step_labels():
    import numpy as np

    nan = np.nan
    # chains: error at step 1; all correct; unlabelled before the error (no label); error first, unlabelled after
    # (ProcessBench's own layout); a chain of unknown steps only
    steps = [[1, 0, nan], [1, 1], [nan, 0], [0, nan, nan], [nan]]
    gold = np.array([x for c in steps for x in c], dtype=float)
    chain = np.repeat(np.arange(len(steps)), [len(c) for c in steps])
    pos = np.concatenate([np.arange(len(c)) for c in steps])
    assert P.gold_first_errors(gold, chain, len(steps), pos).tolist() == [1, -1, P.NO_LABEL, 0, P.NO_LABEL]


def test_prmscore_is_the_mean_of_the_two_classes_f1():
    # PRMBench Sec. 4.1: 0.5 F1 (erroneous steps) + 0.5 F1 (correct steps). Gold: 2 wrong, 4 right; the judge flags
    # one wrong and one right step: F1_neg = 2*1/(2+2) = 0.5, F1_pos = 2*3/(4+4) = 0.75, PRMScore 0.625
    gold = [False, False, True, True, True, True]
    pred = [False, True, False, True, True, True]
    out = P.prm_score(gold, pred)
    assert (out["f1_negative"], out["f1_positive"], out["prmscore"]) == (0.5, 0.75, 0.625)
    assert P.prm_score([True, True], [True, False])["prmscore"] is None  # one class only


def test_tasks_are_registered_opt_in():
    for task in ("first-error", "prmscore"):
        assert not TASKS[task].default
    assert METRICS["first_error_f1"].headline and METRICS["prmscore"].headline


class FlagsStep(Judge):
    """Flags one scripted step per chain (by chain id; -1 flags none), every other step correct; a chain scripted
    None gets an unreadable output."""

    kind = "test-flags-step"
    needs_images = False

    def __init__(self, spec, flags):
        super().__init__(spec)
        self.flags = flags

    def judge_batch(self, chains):
        out = []
        for c in chains:
            k = self.flags[c["chain_id"]]
            if k is None:
                out.append(Critique(c["chain_id"], [None] * len(c["steps"]), valid=False, raw="?"))
            else:
                out.append(Critique(c["chain_id"], [i != k for i in range(len(c["steps"]))]))
        return out


def processbench_chains(tmp_path) -> str:
    records = [{"id": f"gsm8k-{i}", "generator": "g", "problem": f"What is {i} + 1?",
                "steps": [f"Take {i}.", "Add one.", f"The answer is {i + 1 + (label >= 0)}."],
                "final_answer_correct": label < 0, "label": label}
               for i, label in enumerate([1, 2, 0, -1, -1, -1])]
    source = tmp_path / "pb.json"
    source.write_text(json.dumps(records))
    assert stepcritic(["data", "ingest", "--format", "processbench", "--input", str(source),
                       "--out", str(tmp_path / "chains")]) == 0
    return str(tmp_path / "chains")


def test_first_error_and_prmscore_through_eval(tmp_path):
    chains = processbench_chains(tmp_path)
    # erroneous chains 0-2 (labels 1, 2, 0): right, flags too early, flags nothing; correct chains 3-5: right,
    # flags a step, unreadable
    ids = [f"processbench-gsm8k-{i}" for i in range(6)]
    judge = FlagsStep("flags", dict(zip(ids, [1, 1, -1, -1, 0, None])))
    metrics = evaluate(chains, [judge], str(tmp_path / "out"), tasks=("first-error", "prmscore"), progress=False,
                       log=lambda line: None)
    fe = metrics["judges"]["flags"]["overall"]["first-error"]
    assert (fe["n_error"], fe["n_correct"], fe["n_unlabelled"]) == (3, 3, 0)
    assert fe["error_accuracy"] == pytest.approx(1 / 3) and fe["correct_accuracy"] == pytest.approx(1 / 3)
    assert fe["f1"] == pytest.approx(1 / 3) and len(fe["f1_ci"]) == 2
    assert metrics["judges"]["flags"]["overall"]["prmscore"]["prmscore"] is not None
    report = (tmp_path / "out" / "report.md").read_text()
    assert "FE F1" in report and "PRMScore" in report and "ProcessBench" in report


def test_a_judge_without_step_verdicts_has_no_first_error_score():
    import numpy as np

    chains = [{"chain_id": "a", "group_id": "a", "answer_correct": True, "chain_correct": True,
               "steps": [{"correct": True, "human_score": None, "type": None, "explanations": [], "premises": None}]},
              {"chain_id": "b", "group_id": "b", "answer_correct": False, "chain_correct": False,
               "steps": [{"correct": False, "human_score": None, "type": None, "explanations": [], "premises": None}]}]
    preds = [{"chain_id": c["chain_id"], "verdicts": [None], "p_incorrect": None, "explanations": None,
              "answer_correct": None, "chain_score": 0.5, "valid": True, "extra": {}} for c in chains]
    data = results.JudgeData(chains, preds, [], None, [[None], [None]])
    assert results.TASK_SECTIONS["first-error"](data)["f1"] is None
    assert results.TASK_SECTIONS["prmscore"](data)["prmscore"] is None
    assert np.isnan(data.answers.verdict).all()
