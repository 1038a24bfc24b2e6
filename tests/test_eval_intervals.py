"""Bootstrap intervals that resample questions, on the headline metrics."""

import numpy as np
import pytest

from stepcritic.eval.bootstrap import GroupBootstrap, interval
from stepcritic.eval.matchers import LexicalMatcher
from stepcritic.eval.results import JudgeData, explanation_matches, section


def gold_chain(chain_id, group_id, labels, answer_correct=False):
    return {"chain_id": chain_id, "group_id": group_id, "category": None, "source": "s", "generator": "g",
            "answer_correct": answer_correct, "chain_correct": all(labels),
            "steps": [{"type": "description", "correct": c, "human_score": float(c), "premises": None,
                       "explanations": [] if c else ["the colour is wrong"]} for c in labels]}


def pred(chain_id, verdicts, scores=None):
    return {"chain_id": chain_id, "verdicts": verdicts, "p_incorrect": scores, "explanations": None,
            "answer_correct": None, "chain_score": None, "valid": True, "extra": {}}


def run_section(gold, preds, tasks=("critique",)):
    matcher = LexicalMatcher(0.5)
    return section(JudgeData(gold, preds, [], matcher, explanation_matches(gold, preds, matcher)), tasks)


def test_the_unit_resampled_is_the_question_not_the_step():
    # the judge finds all ten errors of one question and none of the other's: with two questions a resample
    # holds the first twice (F1 1), the second twice (0) or both (2/3), so the interval spans [0, 1]; resampling
    # the twenty steps independently would give a narrow interval around 2/3
    gold = [gold_chain("a", "q1", [False] * 10), gold_chain("b", "q2", [False] * 10)]
    preds = [pred("a", [False] * 10), pred("b", [True] * 10)]
    step = run_section(gold, preds)["critique"]["step"]
    assert step["f1"] == pytest.approx(2 / 3)
    assert step["f1_ci"] == [0.0, 1.0]


def test_intervals_are_reproducible_and_need_two_questions():
    rng = np.random.default_rng(3)
    gold = [gold_chain(f"c{i}", f"q{i // 3}", [bool(v) for v in rng.random(4) > 0.4]) for i in range(30)]
    preds = [pred(c["chain_id"], [bool(v) for v in rng.random(4) > 0.4]) for c in gold]
    first, second = run_section(gold, preds), run_section(gold, preds)
    low, high = first["critique"]["step"]["f1_ci"]
    assert first["critique"]["step"]["f1_ci"] == second["critique"]["step"]["f1_ci"]  # fixed seed
    assert low < first["critique"]["step"]["f1"] < high
    one_question = [dict(c, group_id="q") for c in gold]
    assert run_section(one_question, preds)["critique"]["step"]["f1_ci"] is None


def test_undefined_metrics_get_no_interval():
    gold = [gold_chain("a", "q1", [True, False]), gold_chain("b", "q2", [True, True])]
    got = run_section(gold, [pred("a", [True, False]), pred("b", [True, True])])["critique"]
    assert got["viscore"] is None and got["viscore_ci"] is None  # no explanations: F1_e undefined
    assert got["answer"]["f1_ci"] is None  # no answer verdicts


def test_an_interval_needs_most_resamples_to_define_the_metric():
    # resamples that define no value (no incorrect step drawn, say) are left out; when they are the majority,
    # the few others would describe those lucky draws, not the metric
    assert interval(np.array([np.nan] * 6 + [0.5] * 4)) is None
    assert interval(np.array([np.nan] * 4 + [0.5] * 6)) == [0.5, 0.5]
    assert interval(np.arange(101.0)) == pytest.approx([2.5, 97.5])


def test_weighted_auroc_matches_sklearn_with_sample_weights():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    groups = [f"q{i % 7}" for i in range(60)]
    positive = rng.random(60) < 0.4
    score = np.round(rng.random(60) + 0.3 * positive, 1)  # rounded: ties between classes count a half
    boot = GroupBootstrap(groups, n_resamples=5, seed=1)
    got = boot.auroc(groups, positive, score, chunk_cells=100)  # small chunks: the chunking is exercised too
    for b in range(5):
        weights = boot.counts[b][[boot.groups.index(g) for g in groups]]
        assert got[b] == pytest.approx(roc_auc_score(positive, score, sample_weight=weights))


def test_choice_and_shiftcheck_intervals_resample_their_questions():
    # six questions of two chains; the judge is right about the first three only: 0.5, and the interval is that
    # of six coin flips (2.5% of resamples draw at most one right question, 97.5% at most five)
    gold = [gold_chain(f"q{g}-{k}", f"q{g}", [k == 0]) for g in range(6) for k in range(2)]
    right = {"q0", "q1", "q2"}
    # the correct chain scores 1 where the judge is right, the incorrect one where it is wrong
    preds = [dict(pred(c["chain_id"], [None]),
                  chain_score=float(c["chain_id"].endswith("-0") == (c["group_id"] in right))) for c in gold]
    picks = []
    for g in range(6):
        options, gold_id = [f"q{g}-0", f"q{g}-1"], f"q{g}-0"
        wanted = gold_id if f"q{g}" in right else f"q{g}-1"
        for shift, shown in enumerate([options, options[::-1]]):
            picks.append({"group_id": f"q{g}", "question_id": f"q{g}#{shift}", "options": shown, "gold": gold_id,
                          "prediction": "AB"[shown.index(wanted)]})
    matcher = LexicalMatcher(0.5)
    got = section(JudgeData(gold, preds, picks, matcher, explanation_matches(gold, preds, matcher)),
                  ("choice", "shiftcheck"))
    assert got["choice"]["accuracy"] == 0.5 and got["shiftcheck"]["circular_accuracy"] == 0.5
    assert got["choice"]["accuracy_ci"] == pytest.approx([1 / 6, 5 / 6])
    assert got["shiftcheck"]["circular_accuracy_ci"] == pytest.approx([1 / 6, 5 / 6])
