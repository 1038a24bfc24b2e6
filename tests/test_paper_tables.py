"""The papers' own tables, reproduced by our metric code.

- VISCO Table 5 (the detailed leaderboard): VISCore from each row's answer, step and explanation F1.
- MiCEval Tables 2 (Hard) and 9 (Normal): the "Avg." column from the row's nine task accuracies, and our verifier
  columns in Table 2's order.
- CMMU Sec. 4.1: BiasRate on worked cases, through `stepcritic eval --tasks shiftcheck` with judges that always
  answer "A" and that always pick the same chain.

The numbers are typed from the papers (table and row named at each); nothing here reads ../shared.
"""

import helpers
import pytest

from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval import metrics as M
from stepcritic.eval.judges.base import Judge
from stepcritic.eval.judges.generative import GenerativeJudge, Reply
from stepcritic.eval.runner import evaluate
from stepcritic.eval.tasks import metrics_for
from stepcritic.eval.verifier import TABLE_2_ORDER

# ----------------------------------------------------------------------------- VISCO Table 5

# model: (VISCore, answer F1, step F1, explanation F1), the "Total" columns of VISCO Table 5
VISCO_TABLE_5 = {
    "Qwen2-VL-2B": (9.76, 30.7, 23.0, 1.3),
    "InternVL2-2B": (13.96, 36.1, 28.2, 2.7),
    "DeepSeek-VL-7B": (7.53, 21.8, 15.7, 1.2),
    "LLaVA-v1.5-7B": (6.51, 11.9, 13.4, 1.7),
    "LLaVA-v1.6-7B": (21.80, 44.6, 33.6, 6.9),
    "LLaVA-v1.6-Vicuna-7B": (11.45, 27.7, 24.1, 2.3),
    "LLaVA-OV-7B": (7.53, 14.5, 14.9, 2.0),
    "Qwen-VL-7B": (12.69, 33.1, 26.4, 2.3),
    "Qwen2-VL-7B": (21.71, 43.0, 30.6, 7.8),
    "Molmo-7B": (13.43, 35.5, 22.0, 3.1),
    "InternVL2-8B": (23.33, 37.1, 31.1, 11.0),
    "Llama-3.2-11B": (11.44, 29.4, 21.1, 2.4),
    "LLaVA-v1.6-13B": (21.02, 40.2, 32.8, 7.1),
    "InternVL2-26B": (25.20, 39.4, 30.2, 13.4),
    "LLaVA-v1.6-34B": (11.05, 23.6, 14.3, 4.0),
    "InternVL2-40B": (28.48, 41.6, 31.4, 17.7),
    "LLaVA-OV-72B": (35.27, 47.1, 42.0, 22.2),
    "Qwen2-VL-72B": (37.44, 49.2, 41.9, 25.5),
    "NVLM-72B": (33.07, 44.0, 38.6, 21.3),
    "Molmo-72B": (35.59, 49.4, 39.8, 22.9),
    "InternVL2-76B": (26.38, 37.7, 28.6, 17.0),
    "Llama-3.2-90B": (36.40, 46.8, 42.5, 24.3),
    "Prometheus-Vision-7B": (17.67, 37.6, 35.8, 4.1),
    "LLaVA-Critic-7B": (20.02, 32.0, 28.7, 8.8),
    "Prometheus-Vision-13B": (19.32, 38.0, 37.8, 5.0),
    "LLaVA-Critic-72B": (42.60, 53.9, 50.9, 28.2),
    "Gemini-1.5-Pro": (45.01, 55.6, 51.2, 32.0),
    "Claude-3.5-Sonnet": (51.28, 61.8, 58.1, 37.6),
    "GPT-4o": (52.36, 63.0, 57.2, 39.8),
    "Human": (86.47, 100.0, 90.6, 71.4),
}


@pytest.mark.parametrize("model", VISCO_TABLE_5)
def test_viscore_from_visco_table_5(model):
    expected, f1_answer, f1_step, f1_explanation = VISCO_TABLE_5[model]
    # the F1s are printed to 0.1: that moves the geometric mean by under 0.1 on every row (most by under 0.05)
    assert M.viscore(f1_answer, f1_step, f1_explanation) == pytest.approx(expected, abs=0.1)
    # the report stores F1s on 0-1 and shows x100: the same number
    assert 100 * M.viscore(f1_answer / 100, f1_step / 100, f1_explanation / 100) == pytest.approx(expected, abs=0.1)


# ----------------------------------------------------------------------------- MiCEval Tables 2 and 9

# (table, setting, model): the nine accuracies in Table 2's column order, then Avg.
MICEVAL_AVG = {
    ("Table 2", "zero-shot", "LLaVA-1.6-Mistral-7B"): (0.653, 0.456, 0.203, 0.175, 0.901, 0.487, 0.922, 0.354, 0.379,
                                                       0.503),
    ("Table 2", "zero-shot", "MiniCPM-V-2.6"): (0.121, 0.693, 0.702, 0.248, 0.918, 0.664, 0.837, 0.836, 0.564, 0.620),
    # Llama-3.2-11B zero-shot is left out: its nine printed accuracies average 0.476, not the printed 0.493
    ("Table 2", "zero-shot", "LLaVA-1.6-Yi-34B"): (0.348, 0.575, 0.704, 0.443, 0.949, 0.693, 0.917, 0.690, 0.508,
                                                   0.647),
    ("Table 2", "zero-shot", "GPT-4o"): (0.672, 0.768, 0.631, 0.545, 0.903, 0.649, 0.732, 0.765, 0.726, 0.710),
    ("Table 2", "zero-shot", "Qwen-VL-Max"): (0.433, 0.853, 0.630, 0.455, 0.931, 0.691, 0.910, 0.227, 0.580, 0.634),
    ("Table 2", "zero-shot", "Gemini-1.5-Pro"): (0.868, 0.838, 0.674, 0.398, 0.926, 0.584, 0.330, 0.827, 0.670,
                                                 0.679),
    ("Table 2", "few-shot", "LLaVA-1.6-Mistral-7B"): (0.452, 0.310, 0.255, 0.371, 0.934, 0.688, 0.812, 0.863, 0.584,
                                                      0.585),
    ("Table 2", "few-shot", "MiniCPM-V-2.6"): (0.104, 0.413, 0.719, 0.401, 0.873, 0.679, 0.764, 0.811, 0.547, 0.590),
    ("Table 2", "few-shot", "Llama-3.2-11B"): (0.044, 0.257, 0.601, 0.004, 0.638, 0.670, 0.069, 0.220, 0.376, 0.320),
    ("Table 2", "few-shot", "LLaVA-1.6-Yi-34B"): (0.703, 0.206, 0.638, 0.488, 0.939, 0.670, 0.927, 0.751, 0.716,
                                                  0.671),
    ("Table 2", "few-shot", "GPT-4o"): (0.871, 0.455, 0.642, 0.687, 0.891, 0.671, 0.784, 0.773, 0.742, 0.724),
    ("Table 2", "few-shot", "Qwen-VL-Max"): (0.359, 0.262, 0.603, 0.370, 0.924, 0.776, 0.749, 0.650, 0.689, 0.598),
    # Table 9 (MiCEval-Normal; Sec. 6.1.2 quotes its LLaVA-1.6-Mistral-7B averages, 0.575 zero-shot)
    ("Table 9", "zero-shot", "LLaVA-1.6-Mistral-7B"): (0.719, 0.484, 0.144, 0.260, 0.866, 0.541, 0.860, 0.729, 0.574,
                                                       0.575),
    ("Table 9", "zero-shot", "GPT-4o"): (0.767, 0.763, 0.748, 0.650, 0.938, 0.753, 0.568, 0.812, 0.765, 0.752),
    ("Table 9", "zero-shot", "Gemini-1.5-Pro"): (0.838, 0.921, 0.778, 0.490, 0.935, 0.671, 0.291, 0.979, 0.646,
                                                 0.728),
    ("Table 9", "few-shot", "MiniCPM-V-2.6"): (0.277, 0.428, 0.795, 0.607, 0.879, 0.807, 0.717, 0.930, 0.724, 0.685),
    ("Table 9", "few-shot", "Llama-3.2-11B"): (0.005, 0.223, 0.716, 0.010, 0.805, 0.760, 0.130, 0.271, 0.251, 0.352),
    ("Table 9", "few-shot", "LLaVA-1.6-Yi-34B"): (0.744, 0.164, 0.752, 0.590, 0.955, 0.805, 0.866, 0.938, 0.735,
                                                  0.728),
    ("Table 9", "few-shot", "GPT-4o"): (0.856, 0.530, 0.739, 0.730, 0.908, 0.726, 0.623, 0.773, 0.785, 0.741),
    ("Table 9", "few-shot", "Qwen-VL-Max"): (0.679, 0.437, 0.725, 0.530, 0.921, 0.808, 0.654, 0.521, 0.704, 0.664),
}


@pytest.mark.parametrize("row", MICEVAL_AVG)
def test_miceval_avg_is_the_mean_of_the_nine_task_accuracies(row):
    *accuracies, avg = MICEVAL_AVG[row]
    # nine values and the mean each rounded to 0.001: at most 0.0005 + 0.0005 apart
    assert M.verifier_average(accuracies) == pytest.approx(avg, abs=0.001)


def test_miceval_avg_is_undefined_without_all_nine_and_our_columns_follow_table_2():
    assert M.verifier_average([0.5] * 8 + [None]) is None and M.verifier_average([]) is None
    # Table 2: Step Type | Description: Relevance, Correctness, Error Types | Logic: Relevance, Correctness,
    # Informativeness, Error Types | MCoT | Avg.
    assert TABLE_2_ORDER == ("step_type", "description_relevance", "description_correctness", "description_error",
                             "logic_relevance", "logic_correctness", "informativeness", "logic_error",
                             "chain_correctness")
    columns = [m.key.split(".")[0] for m in metrics_for(["verifier"])]
    assert columns[:10] == [*TABLE_2_ORDER, "avg"]


# ----------------------------------------------------------------------------- CMMU BiasRate

class AlwaysA(GenerativeJudge):
    """A generative judge whose every reply is "A": the listwise question, read back as CMMU reads answers."""

    kind = "test-always-a"
    needs_images = False

    def generate(self, prompts):
        return [Reply("A") for _ in prompts]


class SameChain(Judge):
    """Always picks the same chain, wherever it is shown: consistent, and unbiased as to position."""

    kind = "test-same-chain"
    needs_images = False

    def judge_batch(self, chains):
        raise NotImplementedError  # only asked ShiftCheck questions

    def pick_best(self, chains):
        return min(range(len(chains)), key=lambda i: chains[i]["chain_id"])

    def picks_by_chain_score(self):
        return False


def shiftcheck_chains(n_options: int, n_questions: int = 3) -> list[dict]:
    """Questions of `n_options` chains each: one correct, the others wrong; the correct one sorts last by id."""
    chains = []
    for g in range(n_questions):
        chains.append(helpers.chain(f"q{g}-z-ok", group_id=f"q{g}"))
        chains += [helpers.chain(f"q{g}-{k}-bad", group_id=f"q{g}", answer="blue", answer_correct=False)
                   for k in range(n_options - 1)]
    return [validate_chain(c) for c in chains]


def shiftcheck_section(tmp_path, judge, n_options):
    save_chains(shiftcheck_chains(n_options), str(tmp_path / "chains"))
    metrics = evaluate(str(tmp_path / "chains"), [judge], str(tmp_path / "out"), tasks=("shiftcheck",),
                       progress=False, log=lambda line: None)
    return metrics["judges"][judge.name]["overall"]["shiftcheck"]


def test_cmmu_bias_rate_of_a_judge_that_always_answers_a(tmp_path):
    # CMMU Sec. 4.1: m failed questions of n = 4 options give m * n answers, all "A": P = (100, 0, 0, 0) % and
    # BiasRate = variance(P) = ((100 - 25)^2 + 3 * (0 - 25)^2) / 4 = 1875, the largest a 4-option judge can have
    sc = shiftcheck_section(tmp_path, AlwaysA("always-a"), 4)
    assert sc["circular_accuracy"] == 0.0  # the right chain moves through every position, "A" catches it once
    assert sc["position_distribution"] == {"A": 100.0, "B": 0.0, "C": 0.0, "D": 0.0}
    assert sc["bias_rate"] == pytest.approx(1875.0) and sc["n_bias_groups"] == 3


def test_cmmu_bias_rate_of_three_options_is_reported_apart(tmp_path):
    # the same judge on 3-option questions: P = (100, 0, 0), variance ((200/3)^2 + 2 * (100/3)^2) / 3 = 2222.2;
    # CMMU's headline BiasRate is for 4-option questions, so it stays undefined
    sc = shiftcheck_section(tmp_path, AlwaysA("always-a"), 3)
    assert sc["bias_rate"] is None and sc["bias_rate_by_n_options"] == {3: pytest.approx(20000 / 9)}


def test_cmmu_bias_rate_of_a_judge_that_always_picks_the_same_wrong_chain(tmp_path):
    # the picked chain rotates with the options, so its letter is A, B, C and D once each: P = 25 % everywhere,
    # BiasRate 0 (no position preference) although every question is failed; and every shift agrees
    sc = shiftcheck_section(tmp_path, SameChain("same-chain"), 4)
    assert sc["circular_accuracy"] == 0.0 and sc["consistency"] == 1.0
    assert sc["position_distribution"] == {"A": 25.0, "B": 25.0, "C": 25.0, "D": 25.0}
    assert sc["bias_rate"] == 0.0
