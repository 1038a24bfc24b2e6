"""The evaluation computes what the papers define: an undefined metric is None (never 0), Somers' D as MiCEval
computes it, choice ranking with ties and unknown chains, the invalid rate per output, RPTS only on annotated premises.
Label and answer-letter parsing are in test_verdict_parsing.py.

Each test here failed on the code before the fix; the comment at each group says how.
"""

import json
import os
import statistics

import helpers
import pytest
from helpers import CannedVerifier, critique_section, reasoning_chain

from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval import metrics as M
from stepcritic.eval.matchers import LexicalMatcher
from stepcritic.eval.report import leaderboard, render
from stepcritic.eval.runner import build_judge, evaluate
from stepcritic.eval.shiftcheck import shiftcheck_questions
from stepcritic.eval.tasks import METRICS
from stepcritic.eval.tasks.choice import choice_metrics

# ----------------------------------------------------------------------------- undefined is None, never 0
# Before: explanation F1 and VISCore were 0.0 on data without reference critiques, even for an oracle; a
# reward model got step and answer P/R/F1 of 0.0; the report showed such zeros (and could bold them).

def unreferenced_gold():
    chains = [validate_chain(c) for c in helpers.chains(6)]
    for c in chains:
        for s in c["steps"]:
            s["explanations"] = []  # like MiCEval: labels, no reference critiques
    return results_gold(chains)


def results_gold(chains):
    return [{"chain_id": c["chain_id"], "group_id": c["group_id"], "category": c["category"],
             "answer_correct": c["answer_correct"], "chain_correct": c["chain_correct"],
             "steps": [{k: s[k] for k in ("type", "correct", "human_score", "explanations", "premises")}
                       for s in c["steps"]]} for c in chains]


def oracle_preds(gold):
    return [{"chain_id": c["chain_id"], "verdicts": [s["correct"] for s in c["steps"]], "p_incorrect": None,
             "explanations": [None if s["correct"] else "this step is wrong" for s in c["steps"]],
             "answer_correct": c["answer_correct"], "chain_score": None, "valid": True, "extra": {}}
            for c in gold]


def reward_preds(gold):
    return [{"chain_id": c["chain_id"], "verdicts": [None] * len(c["steps"]), "p_incorrect": None,
             "explanations": None, "answer_correct": None, "chain_score": 0.9 if c["chain_correct"] else 0.2,
             "valid": True, "extra": {}} for c in gold]


def test_oracle_on_data_without_references_has_no_explanation_f1_or_viscore():
    gold = unreferenced_gold()
    got = critique_section(gold, oracle_preds(gold), LexicalMatcher(0.5))
    assert got["step"]["f1"] == 1.0 and got["answer"]["f1"] == 1.0
    assert got["explanation"]["f1"] is None and got["explanation"]["precision"] is None
    assert got["viscore"] is None


def test_explanation_and_step_f1_are_none_without_anything_to_find():
    assert M.explanation_match_f1([False, True], [False, False], [None, None])["f1"] is None
    assert M.step_f1([True, True], [True, False])["f1"] is None  # no incorrect step: recall is undefined
    assert M.step_f1([True, True], [True, False])["recall"] is None


def test_a_chain_only_judge_has_no_step_or_answer_scores():
    gold = unreferenced_gold()
    got = critique_section(gold, reward_preds(gold), LexicalMatcher(0.5))
    assert {got["step"][k] for k in ("precision", "recall", "f1")} == {None}
    assert got["answer"]["f1"] is None and got["explanation"]["f1"] is None and got["viscore"] is None
    assert got["correlation"]["step"]["d"] is None
    assert got["correlation"]["chain"]["d"] == pytest.approx(1.0)  # its chain scores do count


def test_a_judge_with_no_scores_at_all_gets_no_chain_correlation_or_choice_ranking():
    gold = unreferenced_gold()
    nothing = [dict(p, chain_score=None) for p in reward_preds(gold)]
    got = critique_section(gold, nothing, LexicalMatcher(0.5))
    assert got["correlation"]["chain"]["d"] is None  # before: every chain scored 0.0, D = 0.0
    assert choice_metrics(gold, nothing)["accuracy"] is None


def test_undefined_cells_render_as_a_dash_and_are_never_bold():
    sections = {"oracle": {"critique": {"step": {"f1": 1.0}, "viscore": None}},
                "reward": {"critique": {"step": {"f1": None}, "viscore": None}},
                "weak": {"critique": {"step": {"f1": 0.4}, "viscore": 0.0}}}
    table = leaderboard(sections, ("critique",), "lexical", [METRICS["step_f1"], METRICS["viscore"]]).splitlines()
    assert table[2] == "| `oracle` | **100.0** | – |"
    assert table[3] == "| `reward` | – | – |"
    assert table[4] == "| `weak` | 40.0 | 0.0 |"


# ----------------------------------------------------------------------------- Somers' D as MiCEval computes it
# Before: the chain level correlated with the mean of step human scores, and there was no per-type split.

def test_chain_somers_d_uses_the_chains_human_label():
    # one good chain, two bad ones; the step means (1, 0.75, 0) would also rank the two bad chains
    labels = {"good": (True, [1.0, 1.0]), "bad1": (False, [1.0, 1.0, 1.0, 0.0]), "bad2": (False, [0.0]),
              "unknown": (None, [1.0])}
    gold = [{"chain_id": k, "group_id": k, "category": None, "answer_correct": None, "chain_correct": label,
             "steps": [{"type": "reasoning", "correct": h > 0, "human_score": h, "explanations": [], "premises": None}
                       for h in scores]} for k, (label, scores) in labels.items()]
    judge = [0.9, 0.1, 0.5, 0.0]
    preds = [dict(p, chain_score=score) for p, score in zip(reward_preds(gold), judge)]
    chain = critique_section(gold, preds, LexicalMatcher(0.5))["correlation"]["chain"]
    assert chain["d"] == pytest.approx(1.0) and chain["n"] == 3  # good above both bad chains; unknown left out
    step_means = [statistics.fmean(scores) for _, scores in labels.values()]
    assert M.somers_d(step_means, judge)["d"] != pytest.approx(1.0)  # what was reported before


def test_step_somers_d_is_split_by_step_type():
    steps = [helpers.step("The circle is red."), helpers.step("The square is blue.", correct=False),
             helpers.step("So red.", type="reasoning"), helpers.step("So blue.", correct=False, type="reasoning"),
             helpers.step("Red, so red.", type="both")]
    gold = results_gold([validate_chain(helpers.chain("t", steps=steps, chain_correct=False))])
    # right about description steps, backwards about reasoning steps
    verdicts = [True, False, False, True, True]
    pred = [{"chain_id": "t", "verdicts": verdicts, "p_incorrect": None, "explanations": None,
             "answer_correct": None, "chain_score": None, "valid": True, "extra": {}}]
    got = critique_section(gold, pred, LexicalMatcher(0.5))["correlation"]
    assert got["step_description"]["n"] == 3 and got["step_reasoning"]["n"] == 3  # the "both" step in each
    assert got["step_description"]["d"] == pytest.approx(1.0)
    assert got["step_reasoning"]["d"] == pytest.approx(-1 / 2)
    assert got["step"]["n"] == 5


# ----------------------------------------------------------------------------- choice ranking
# Before: any tie was a miss (a constant judge scored 0, below chance) and unknown chains were wrong options.

def test_a_tie_scores_its_expected_hit():
    def rec(group_id, chain_id, correct, score):
        return {"group_id": group_id, "chain_id": chain_id, "chain_correct": correct, "score": score}

    constant = [rec(g, c, c == "ok", 0.5) for g in "abcd" for c in ("ok", "bad1", "bad2")]
    assert M.choice_ranking_accuracy(constant)["accuracy"] == pytest.approx(1 / 3)  # chance
    two_way = [rec("g", "ok", True, 0.7), rec("g", "ok2", True, 0.7), rec("g", "bad", False, 0.7),
               rec("g", "low", False, 0.1)]
    assert M.choice_ranking_accuracy(two_way)["accuracy"] == pytest.approx(2 / 3)


def test_chains_of_unknown_correctness_are_not_wrong_options():
    gold = [{"chain_id": "c0", "group_id": "g", "category": None, "chain_correct": True},
            {"chain_id": "c1", "group_id": "g", "category": None, "chain_correct": None},
            {"chain_id": "c2", "group_id": "g", "category": None, "chain_correct": False}]
    [question] = shiftcheck_questions(gold)
    assert question["gold"] == "c0" and question["options"] == ["c0", "c2"]
    records = [{"group_id": "g", "chain_id": c["chain_id"], "chain_correct": c["chain_correct"],
                "score": s} for c, s in zip(gold, (0.5, 0.9, 0.1))]
    assert M.choice_ranking_accuracy(records)["accuracy"] == 1.0


# ----------------------------------------------------------------------------- invalid rate per output
# Before: one unreadable reply of a chain's four made the whole chain, 100%, invalid.

def test_invalid_rate_is_per_output():
    chains = [reasoning_chain(4, "r0"), reasoning_chain(4, "r1")]
    judge = CannedVerifier("canned", ["correct", "correct", "I cannot tell", "correct"] + ["incorrect"] * 4,
                           task="logic_correctness")
    critiques = judge.judge_batch(chains)
    preds = [dict(c.to_json()) for c in critiques]
    got = critique_section(results_gold(chains), preds, LexicalMatcher(0.5))
    assert (got["n_outputs"], got["n_invalid"]) == (8, 1)
    assert got["invalid_rate"] == pytest.approx(1 / 8)


def test_invalid_rate_of_one_output_judges_is_per_chain():
    gold = unreferenced_gold()
    preds = oracle_preds(gold)
    preds[0] = dict(preds[0], valid=False, verdicts=[None] * len(gold[0]["steps"]))
    got = critique_section(gold, preds, LexicalMatcher(0.5))
    assert got["invalid_rate"] == pytest.approx(1 / 6)


# ----------------------------------------------------------------------------- RPTS premises
# Before: a chain without premise links was read as a linear tree (heights 1, 2, 3, ...).

def test_unannotated_premises_give_no_tree():
    assert M.step_heights([None, None, None]) is None
    assert M.rpts_chain([None, None], [1.0, 0.0]) is None
    assert M.step_heights([[], [], []]) == [1, 1, 1]  # every step rests only on the image
    assert M.rpts_chain([[], [], []], [1.0, 0.0, 0.5]) == pytest.approx(0.5)  # all at the focus height


def test_schema_keeps_not_annotated_apart_from_image_only():
    chain = helpers.chain("p", steps=[helpers.step("The circle is red.", premises=[]),
                                      helpers.step("It is round.")])
    steps = validate_chain(chain)["steps"]
    assert steps[0]["premises"] == [] and steps[1]["premises"] is None


def test_rpts_correlation_uses_only_annotated_chains():
    chains = [validate_chain(c) for c in helpers.chains(6)]
    for c in chains[:4]:
        c["steps"][0]["premises"], c["steps"][1]["premises"], c["steps"][2]["premises"] = [], [0], [1]
    gold = results_gold(chains)
    got = critique_section(gold, oracle_preds(gold), LexicalMatcher(0.5))
    assert got["correlation"]["chain_rpts"]["n"] == 4
    unannotated = critique_section(gold[4:], oracle_preds(gold[4:]), LexicalMatcher(0.5))
    assert unannotated["correlation"]["chain_rpts"] == {"d": None, "rho": None, "n": 0}


# ----------------------------------------------------------------------------- end to end

def test_report_of_a_run_shows_dashes_for_what_cannot_be_computed(tmp_path):
    chains = [validate_chain(c) for c in helpers.chains(6)]
    for c in chains:
        for s in c["steps"]:
            s["explanations"] = []
    save_chains(chains, str(tmp_path / "chains"))
    out = str(tmp_path / "out")
    metrics = evaluate(str(tmp_path / "chains"), [build_judge("always-correct")], out,
                       tasks=("critique", "choice"), progress=False, log=lambda line: None)
    always = metrics["judges"]["always-correct"]["overall"]
    assert always["critique"]["explanation"]["f1"] is None and always["critique"]["viscore"] is None
    assert always["choice"]["accuracy"] == 0.5  # every chain tied: chance, not 0
    with open(os.path.join(out, "metrics.json")) as f:
        assert json.load(f)["judges"]["always-correct"]["overall"]["critique"]["viscore"] is None
    lines = render(metrics).splitlines()
    header = next(line for line in lines if line.startswith("| Judge |"))
    row = next(line for line in lines if line.startswith("| `always-correct`"))
    cells = dict(zip([h.strip() for h in header.split("|")[2:-1]], [c.strip() for c in row.split("|")[2:-1]]))
    assert cells["Expl. F1 (lexical@0.5)"] == "–" and cells["VISCore"] == "–"


# ----------------------------------------------------------------------------- real MiCEval (skipped without ../shared)

def test_miceval_normal_oracle_and_baselines(miceval_jsonl, tmp_path):
    from stepcritic.data_prep.ingest import ingest

    ingest("miceval", miceval_jsonl, str(tmp_path / "mic"))
    out = str(tmp_path / "out")
    metrics = evaluate(str(tmp_path / "mic"), [build_judge("always-correct"), build_judge("random,seed=0")], out,
                       tasks=("critique", "choice"), progress=False, log=lambda line: None)
    for name in ("always-correct", "random,seed=0"):
        crit = metrics["judges"][name]["overall"]["critique"]
        assert crit["explanation"]["f1"] is None and crit["viscore"] is None  # MiCEval has no reference critiques
        assert crit["correlation"]["chain"]["n"] == 446
        assert crit["correlation"]["step_description"]["n"] + crit["correlation"]["step_reasoning"]["n"] == 1144 + 4
        assert crit["correlation"]["chain_rpts"]["d"] is None  # MiCEval annotates no premises
    always = metrics["judges"]["always-correct"]["overall"]
    assert always["critique"]["correlation"]["chain"]["d"] == 0.0  # constant: no association
