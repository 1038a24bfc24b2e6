"""`--tasks pairwise`: accuracy, per category and subset, macro, ACC+, ties, and a generative judge asked in both
orders, through `stepcritic eval` on the reward-benchmark fixtures.

The aggregation tests: VL-RewardBench's item counts per domain (Sec. 3: 183 general, 749 hallucination, 318
reasoning) with made-up accuracies, checking the rule its tables follow (overall: over items; macro average: the mean
of the three domain accuracies), and one published row (Table 2, Gemini-1.5-Pro) whose domain accuracies give its
printed overall and macro numbers. Multimodal RewardBench's eight leaderboard rows give their overall from their areas
over items; MM-RLHF-RewardBench's ACC+ is checked on constructed items.
"""

import json

import pytest
from helpers import ShortestWins, ingest_fixture

from stepcritic.eval import pairwise as PW
from stepcritic.eval.judges.generative import GenerativeJudge, Reply
from stepcritic.eval.runner import evaluate
from stepcritic.eval.tasks import TASKS


def items(counts_and_hits: dict, field: str = "subset") -> list[dict]:
    out = []
    for name, (n, right) in counts_and_hits.items():
        out += [{"hit": float(k < right), "pairs": [float(k < right)], "category": None, "subset": None,
                 "set_id": None, field: name} for k in range(n)]
    return out


def test_vl_rewardbench_overall_is_over_items_and_macro_over_domains():
    # VL-RewardBench's domains with the paper's item counts; a judge right on 120 of 183, 400 of 749, 200 of 318
    domains = {"general": (183, 120), "hallucination": (749, 400), "reasoning": (318, 200)}
    out = PW.accuracy(items(domains))
    assert out["accuracy"] == pytest.approx((120 + 400 + 200) / 1250)
    assert out["macro"]["subset"] == pytest.approx((120 / 183 + 400 / 749 + 200 / 318) / 3)
    assert out["by_subset"]["general"] == pytest.approx(120 / 183) and out["n_items"] == 1250


def test_vl_rewardbench_gemini_row_overall_and_macro_from_its_domain_accuracies():
    """VL-RewardBench Table 2, Gemini-1.5-Pro: general 50.8, hallucination 72.5, reasoning 64.2 give the overall 67.2
    (over the 1,250 items) and the macro average 62.5 printed beside them."""
    domains = {"general": (183, round(0.508 * 183)), "hallucination": (749, round(0.725 * 749)),
               "reasoning": (318, round(0.642 * 318))}
    out = PW.accuracy(items(domains))
    assert round(100 * out["accuracy"], 1) == 67.2 and round(100 * out["macro"]["subset"], 1) == 62.5
    assert [round(100 * out["by_subset"][d], 1) for d in domains] == [50.8, 72.5, 64.2]


# Multimodal RewardBench's leaderboard (the benchmark's release README, Dec 2024): overall, then general correctness,
# general preference, knowledge, reasoning, safety, VQA
MMRB_ROWS = {
    "Claude 3.5 Sonnet": (0.720, [0.626, 0.678, 0.739, 0.668, 0.687, 0.856]),
    "Gemini 1.5 Pro": (0.720, [0.635, 0.677, 0.663, 0.618, 0.765, 0.872]),
    "GPT-4o": (0.715, [0.626, 0.690, 0.720, 0.647, 0.669, 0.872]),
    "Llama-3.2-90B-Vision-Instruct": (0.624, [0.600, 0.684, 0.612, 0.546, 0.519, 0.771]),
    "Aria": (0.573, [0.595, 0.635, 0.555, 0.524, 0.502, 0.642]),
    "Molmo-7B-D-0924": (0.543, [0.568, 0.594, 0.546, 0.521, 0.442, 0.603]),
    "Llama-3.2-11B-Vision-Instruct": (0.524, [0.578, 0.658, 0.555, 0.512, 0.355, 0.558]),
    "Llava-1.5-13B": (0.489, [0.533, 0.552, 0.505, 0.513, 0.349, 0.518]),
}
MMRB_AREAS = ("correctness", "preference", "knowledge", "reasoning", "safety", "vqa")


@pytest.mark.parametrize("model", list(MMRB_ROWS))
def test_multimodal_rewardbench_overall_is_over_items_not_areas(model):
    """Every leaderboard row's overall is its areas' accuracies weighted by their items. The paper's Table 1 gives
    four areas' sizes (623, 654, 630, 1,098 of 5,211); safety and VQA share the other 2,206, and all eight rows fit
    only when safety has 993 to 1,020 of them (1,008 here). The mean of the six areas (macro) misses most rows."""
    overall, area_accuracies = MMRB_ROWS[model]
    sizes = [623, 654, 630, 1098, 1008, 2206 - 1008]
    areas = {a: (n, round(acc * n)) for a, n, acc in zip(MMRB_AREAS, sizes, area_accuracies)}
    out = PW.accuracy(items(areas, "category"))
    assert out["n_items"] == 5211
    # each printed number is rounded to 0.001: the area accuracies and the overall both move it by up to 0.0005
    assert out["accuracy"] == pytest.approx(overall, abs=0.001)
    # whole items: an area of 623 moves by up to 0.5 / 623 from the printed accuracy
    assert [out["by_category"][a] for a in MMRB_AREAS] == pytest.approx(area_accuracies, abs=0.001)
    if model in ("Claude 3.5 Sonnet", "Gemini 1.5 Pro", "GPT-4o", "Llama-3.2-11B-Vision-Instruct"):
        assert abs(out["macro"]["category"] - overall) > 0.01


def test_mm_rlhf_acc_plus_counts_a_set_only_when_every_pair_is_right():
    # three questions: q1's three pairs all right, q2's one of two wrong, q3's one pair tied (a tie is not right)
    rows = [("q1", 1.0), ("q1", 1.0), ("q1", 1.0), ("q2", 1.0), ("q2", 0.0), ("q3", 0.5)]
    its = [{"hit": h, "pairs": [h], "category": None, "subset": None, "set_id": s} for s, h in rows]
    out = PW.accuracy(its)
    assert out["acc_plus"] == pytest.approx(1 / 3) and out["n_sets"] == 3
    assert out["accuracy"] == pytest.approx(4.5 / 6)
    assert PW.acc_plus([dict(i, set_id=None) for i in its])["acc_plus"] is None  # no sets: undefined


def test_score_ties_count_half_and_a_missing_score_ranks_last():
    assert PW.score_hit(0.9, 0.1) == 1.0 and PW.score_hit(0.1, 0.9) == 0.0 and PW.score_hit(0.5, 0.5) == 0.5
    assert PW.score_hit(0.2, None) == 1.0 and PW.score_hit(None, 0.2) == 0.0 and PW.score_hit(None, None) == 0.5


def test_the_task_is_opt_in():
    assert not TASKS["pairwise"].default


class AlwaysFirst(GenerativeJudge):
    """A generative judge that answers every prompt "A": the first response shown, whichever it is."""

    kind = "test-always-first"
    needs_images = False

    def generate(self, prompts):
        return [Reply("A") for _ in prompts]


def test_pairwise_through_eval_on_vl_rewardbench(tmp_path):
    chains = ingest_fixture(tmp_path, "vl-rewardbench", "test.jsonl")
    metrics = evaluate(chains, [ShortestWins("shortest"), AlwaysFirst("first")], str(tmp_path / "out"),
                       tasks=("pairwise",), progress=False, log=lambda line: None)
    shortest = metrics["judges"]["shortest"]["overall"]["pairwise"]
    # the fixture's kept items: the kite (first response preferred, the shorter: right), the boxes (two responses of
    # 22 characters: equal scores, half); the green bar's two responses are tied in the data (left out as a pair)
    assert (shortest["n_items"], shortest["n_pairs"], shortest["n_tied_pairs"]) == (2, 2, 1)
    assert shortest["accuracy"] == 0.75 and shortest["score"] == "chain"
    assert shortest["order"] == {"first": None, "swapped": None} and shortest["flip_rate"] is None
    first = metrics["judges"]["first"]["overall"]["pairwise"]
    # "A" in both orders: right once per pair, so each order's accuracy is the share of pairs whose better response
    # comes first in the data's order, the mean is 1/2, and every verdict flips
    assert first["accuracy"] == 0.5 and first["flip_rate"] == 1.0 and first["score"] == "both orders asked"
    assert first["order"]["first"] + first["order"]["swapped"] == 1.0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Pair acc." in report and "Pair flip %" in report and "tied pairs left out" in report


def test_pairwise_score_selects_the_step_aggregate(tmp_path):
    chains = ingest_fixture(tmp_path, "vl-rewardbench", "test.jsonl")
    metrics = evaluate(chains, [ShortestWins("shortest")], str(tmp_path / "out"), tasks=("pairwise",),
                       progress=False, log=lambda line: None, pairwise={"score": "min"})
    sec = metrics["judges"]["shortest"]["overall"]["pairwise"]
    # min of 1 - 1/(2+i) is the first step's 0.5 in every response: every pair a tie, counted half
    assert sec["score"] == "min" and sec["accuracy"] == 0.5


def test_acc_plus_on_the_mm_rlhf_fixture(tmp_path):
    chains = ingest_fixture(tmp_path, "mm-rlhf-rewardbench", "mm_reward_bench.jsonl")
    metrics = evaluate(chains, [ShortestWins("shortest")], str(tmp_path / "out"), tasks=("pairwise",),
                       progress=False, log=lambda line: None)
    sec = metrics["judges"]["shortest"]["overall"]["pairwise"]
    assert sec["n_sets"] >= 1 and sec["acc_plus"] is not None and sec["acc_plus"] <= sec["accuracy"]
    assert json.loads(json.dumps(sec)) == sec
