"""A threshold sweep for every judge with step scores, the best-F1 threshold chosen on
a seeded dev split of the questions and step F1 at that threshold reported on the other questions only; the curve is
saved and plotted."""

import json
import os

import pytest
from helpers import chain, step

from stepcritic import cli as stepcritic_cli
from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval import sweep
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.runner import evaluate


def test_dev_split_is_by_question_seeded_and_leaves_both_sides():
    groups = [f"q{i}" for i in range(10)]
    dev = sweep.dev_groups(groups * 3, 0.3, seed=0)  # repeated ids: chains of the same questions
    assert len(dev) == 3 and dev <= set(groups)
    assert dev == sweep.dev_groups(list(reversed(groups)), 0.3, seed=0)  # the order chains come in does not matter
    assert any(sweep.dev_groups(groups, 0.3, seed=s) != dev for s in range(1, 5))
    assert len(sweep.dev_groups(groups[:2], 0.9)) == 1 and len(sweep.dev_groups(groups[:2], 0.01)) == 1
    assert sweep.dev_groups(["only"], 0.5) == frozenset()


def test_the_threshold_is_chosen_on_dev_steps_never_on_test_steps():
    # dev: wrong steps at P(incorrect) 0.7 and 0.8, right ones at 0.2 and 0.6 -> best threshold 0.7 (F1 1.0)
    # test: wrong steps at 0.4 and 0.9, right at 0.1 -> 0.4 would be best there (F1 1.0); at 0.7 only 0.9 is found
    p = [0.7, 0.8, 0.2, 0.6, 0.4, 0.9, 0.1]
    gold = [False, False, True, True, False, False, True]
    in_dev = [True] * 4 + [False] * 3
    verdicts = [x < 0.5 for x in p]
    result = sweep.threshold_sweep(gold, [1 - x for x in p], verdicts, in_dev)
    assert result["threshold"] == pytest.approx(0.7) and result["dev_f1"] == 1.0
    assert result["f1"] == pytest.approx(2 / 3) and result["precision"] == 1.0 and result["recall"] == 0.5
    # the judge's own verdicts (flag at 0.5) on the same test steps find only the 0.9 one too
    assert result["f1_default"] == pytest.approx(2 / 3)
    assert (result["n_dev"], result["n_test"]) == (4, 3)
    curve = result["curve"]
    assert len(curve["thresholds"]) == sweep.GRID_POINTS == len(curve["dev"]) == len(curve["test"])
    at_04 = curve["thresholds"].index(0.4)
    assert curve["test"][at_04] == 1.0 and curve["dev"][at_04] < 1.0  # test's best is visible, not used


def test_undefined_without_an_incorrect_dev_step_or_a_test_step():
    assert sweep.threshold_sweep([True, False], [0.9, 0.1], [True, False], [True, False])["threshold"] is None
    assert sweep.threshold_sweep([False, True], [0.1, 0.9], [False, True], [True, True])["f1"] is None
    result = sweep.threshold_sweep([False, None, True], [None, 0.5, 0.9], [False, True, True], [True, True, False])
    assert result == sweep.undefined(0, 1)  # nothing scored and labelled on the dev side


class PRMLike(Judge):
    """P(incorrect) 0.65 on wrong steps and 0.35 on right ones, but flags only above 0.9 (a badly set threshold)."""

    kind = "test-prm-like"
    needs_images = False

    def judge_batch(self, chains):
        out = []
        for c in chains:
            p = [0.35 if s["correct"] else 0.65 for s in c["steps"]]
            out.append(Critique(c["chain_id"], [x < 0.9 for x in p], p_incorrect=p, chain_score=1 - max(p)))
        return out


def many_questions(n=20):
    return [validate_chain(chain(f"q{q}-c{k}", group_id=f"q{q}", answer_correct=k == 0,
                                 steps=[step("One circle."), step("It is red.", correct=k == 0)]), f"q{q}")
            for q in range(n) for k in range(2)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    save_chains(many_questions(), str(root / "chains"))
    metrics = evaluate(str(root / "chains"), [PRMLike("prm-like")], str(root / "out"), tasks=["critique"],
                       progress=False, log=lambda line: None)
    return {"metrics": metrics, "root": root}


def test_evaluate_reports_the_swept_f1_beside_the_judges_own(run):
    result = run["metrics"]["judges"]["prm-like"]["overall"]["critique"]["step"]["sweep"]
    assert result["threshold"] == pytest.approx(0.65) and result["f1"] == 1.0 and result["f1_default"] == 0.0
    assert run["metrics"]["sweep"]["n_dev_questions"] == 6 and run["metrics"]["sweep"]["dev_fraction"] == 0.3
    dev = set(run["metrics"]["sweep"]["dev_questions"])
    assert result["n_dev"] == 4 * len(dev) and result["n_test"] == 4 * (20 - len(dev))
    report = open(run["root"] / "out" / "report.md").read()
    assert "## Threshold sweep" in report and "| Dev threshold | Step F1 @ dev thr. |" in report
    assert os.path.getsize(run["root"] / "out" / "plots" / "threshold_sweep.png") > 1000
    with open(run["root"] / "out" / "metrics.json") as f:
        saved = json.load(f)["judges"]["prm-like"]["overall"]["critique"]["step"]["sweep"]
    assert saved["curve"]["thresholds"][0] == 0.0 and saved["curve"]["thresholds"][-1] == 1.0


def test_cli_split_options(run, capsys):
    root = run["root"]
    argv = ["eval", "--chains", str(root / "chains"), "--judge", "always-correct", "--tasks", "critique",
            "--no-progress"]
    assert stepcritic_cli.main(argv + ["--out", str(root / "cli"), "--sweep-dev", "0.5", "--sweep-seed", "3"]) == 0
    with open(root / "cli" / "metrics.json") as f:
        saved = json.load(f)["sweep"]
    assert (saved["dev_fraction"], saved["seed"], saved["n_dev_questions"]) == (0.5, 3, 10)
    assert set(saved["dev_questions"]) == sweep.dev_groups([f"q{i}" for i in range(20)], 0.5, 3)
    capsys.readouterr()
    assert stepcritic_cli.main(argv + ["--out", str(root / "bad"), "--sweep-dev", "1"]) == 2
    err = capsys.readouterr().err
    assert "--sweep-dev must be between 0 and 1" in err and len(err.strip().splitlines()) == 1
