"""`--tasks best-of-n`: each judge picks one of a question's N candidate chains (chain score, or
min / mean / last of its step scores) against random pick (its expectation), majority vote and the oracle, for
N = 1, 2, 4, ... with seeded subsets; registered, in metrics.json (None where undefined), the report and a plot."""

import json
import os

import pytest
from helpers import chain, step

from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval import best_of_n as bon
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.runner import build_judge, evaluate


def cand(correct, answer=None, **scores):
    return {"correct": correct, "answer": answer, "scores": scores}


def test_picks_share_ties_and_rank_unscored_chains_last():
    assert bon.pick_accuracy([0.9, 0.2, 0.9], [True, False, False]) == 0.5  # two tied at the top, one right
    assert bon.pick_accuracy([None, 0.1], [True, False]) == 0.0  # a score beats no score
    assert bon.pick_accuracy([None, None], [True, False]) == 0.5  # nothing scored: a random pick
    # the same step score averaged over different step counts is no preference
    assert bon.pick_accuracy([sum([0.7] * 3) / 3, 0.7], [True, False]) == 0.5


def test_references_random_majority_and_oracle():
    assert bon.random_accuracy([True, False, False, False]) == 0.25
    assert bon.majority_accuracy(["b", "b", "a", None], [False, False, True, True]) == 0.0
    assert bon.majority_accuracy(["a", "b"], [True, False]) == 0.5  # a tie of answers shares it
    assert bon.majority_accuracy([None, None], [True, False]) is None  # nobody answers: no vote, not a random pick
    assert bon.oracle_accuracy([False, True]) == 1.0 and bon.oracle_accuracy([False]) == 0.0


def test_n_values_and_seeded_subsets():
    assert bon.n_values(5) == [1, 2, 4, 5] and bon.n_values(4) == [1, 2, 4] and bon.n_values(1) == [1]
    assert len(bon.subsets(4, 2, "q")) == 6  # C(4, 2) <= 32: every subset once
    drawn = bon.subsets(16, 8, "q", max_subsets=5, seed=0)
    assert len(drawn) == 5 and all(len(set(s)) == 8 for s in drawn)
    assert drawn == bon.subsets(16, 8, "q", max_subsets=5, seed=0)  # fixed seed: the same draws
    assert drawn != bon.subsets(16, 8, "q", max_subsets=5, seed=1)
    assert drawn != bon.subsets(16, 8, "other", max_subsets=5, seed=0)


def test_curve_by_hand():
    # one question, four chains: right ones scored 0.9 and 0.1, wrong ones 0.5 and 0.3
    q = [cand(True, "a", chain=0.9), cand(False, "b", chain=0.5), cand(False, "b", chain=0.3),
         cand(True, "a", chain=0.1)]
    result = bon.best_of_n({"q": q})
    assert result["ns"] == [1, 2, 4] and result["selectors"] == ["chain"]
    curve = result["curve"]
    # N=2, six pairs: the pick is right in {0,1}, {0,2}, {0,3}; wrong in {1,2}, {1,3} (0.5 wins), {2,3} (0.3 wins)
    assert curve["chain"]["2"] == pytest.approx(3 / 6)
    assert curve["random"]["2"] == pytest.approx(0.5)
    # oracle at N=2: every pair but {1,2} holds a right chain; majority: a tie unless both say the same
    assert curve["oracle"]["2"] == pytest.approx(5 / 6)
    assert curve["majority"]["2"] == pytest.approx((0.5 * 4 + 1 + 0) / 6)
    assert curve["chain"]["1"] == curve["random"]["1"] == curve["oracle"]["1"] == 0.5
    assert result["full"]["chain"] == 1.0 and result["full"]["majority"] == 0.5 and result["full"]["oracle"] == 1.0
    assert result["full"]["min"] is None  # no step scores: cannot pick, never a random pick


def test_a_constant_judge_is_exactly_random_pick_and_no_question_means_none():
    q = {"q1": [cand(True, chain=1.0), cand(False, chain=1.0), cand(False, chain=1.0)],
         "q2": [cand(True, chain=1.0), cand(True, chain=1.0)]}
    result = bon.best_of_n(q)
    for n in ("1", "2", "3"):
        assert result["curve"]["chain"][n] == result["curve"]["random"][n]
    no_answers = bon.best_of_n({"q": [cand(True, chain=0.2), cand(False, chain=0.1)]})  # MiCEval: no final answers
    assert no_answers["full"]["majority"] is None and no_answers["curve"]["majority"]["2"] is None
    assert no_answers["full"]["chain"] == 1.0
    empty = bon.best_of_n({})
    assert empty["ns"] == [] and all(v is None for v in empty["full"].values())


class OracleScorer(Judge):
    """Scores a chain 1 when its answer is right and 0 otherwise (chain score), and every step 1 - (wrong step)."""

    kind = "test-oracle-scorer"
    needs_images = False

    def judge_batch(self, chains):
        return [Critique(c["chain_id"], [s["correct"] for s in c["steps"]],
                         p_incorrect=[0.0 if s["correct"] else 1.0 for s in c["steps"]],
                         chain_score=float(c["answer_correct"])) for c in chains]


class RewardOnly(Judge):
    kind = "test-reward-only"
    needs_images = False

    def judge_batch(self, chains):
        return [Critique(c["chain_id"], [None] * len(c["steps"]), chain_score=len(c["chain_id"]) / 10)
                for c in chains]


def questions():
    """Three questions of 2, 3 and 5 chains (one right chain each but the last, with two) and a lone chain."""
    out = []
    for q, (n, right) in {"q1": (2, {0}), "q2": (3, {2}), "q3": (5, {1, 4}), "q4": (1, {0})}.items():
        for k in range(n):
            ok = k in right
            out.append(validate_chain(chain(f"{q}-c{k}", group_id=q, answer="red" if ok else f"colour{k % 2}",
                                            answer_correct=ok, steps=[step("One circle."),
                                                                      step("It is red.", correct=ok)]), q))
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bon")
    save_chains(questions(), str(root / "chains"))
    judges = [OracleScorer("oracle"), RewardOnly("reward"), build_judge("always-correct")]
    metrics = evaluate(str(root / "chains"), judges, str(root / "out"), tasks=["best-of-n"], progress=False,
                       log=lambda line: None)
    return {"metrics": metrics, "out": root / "out"}


def test_evaluate_reports_every_judge_against_the_references(run):
    judges = run["metrics"]["judges"]
    oracle = judges["oracle"]["overall"]["best-of-n"]
    assert oracle["n_questions"] == 3 and oracle["ns"] == [1, 2, 4, 5]  # q4 has one chain: not a choice
    assert oracle["n_questions_at"] == {"1": 3, "2": 3, "4": 1, "5": 1}
    for selector in ("chain", "min", "mean", "last"):
        assert oracle["full"][selector] == 1.0  # a perfect scorer picks as well as the oracle
    assert oracle["full"]["random"] == pytest.approx((1 / 2 + 1 / 3 + 2 / 5) / 3)
    always = judges["always-correct"]["overall"]["best-of-n"]
    assert always["full"]["chain"] == pytest.approx(always["full"]["random"])
    reward = judges["reward"]["overall"]["best-of-n"]
    assert reward["full"]["chain"] is not None and reward["full"]["min"] is None and reward["curve"]["min"]["2"] is None
    assert oracle["full"]["chain_ci"] is not None  # the headline's bootstrap interval, beside it
    with open(run["out"] / "metrics.json") as f:
        saved = json.load(f)["judges"]["reward"]["overall"]["best-of-n"]["full"]
    assert saved["min"] is None and saved["mean"] is None  # null, never 0


def test_report_table_and_plot(run):
    report = open(run["out"] / "report.md").read()
    assert "## Best-of-N" in report and "| Picker | N=1 | N=2 | N=4 | N=5 |" in report
    assert "| questions | 3 | 3 | 1 | 1 |" in report
    row = next(line for line in report.splitlines() if line.startswith("| `reward` |"))
    assert row.count("–") == 3  # min, mean, last: undefined, shown as "–"
    assert "| `oracle` min step |" in report and "| `reward` min step |" not in report
    assert os.path.getsize(run["out"] / "plots" / "best_of_n.png") > 1000
    assert "best_of_n" in run["metrics"]["plots"]
