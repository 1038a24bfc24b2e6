"""The pairwise task (`eval/pairwise.py`): reward-model benchmarks' preference items."""

from __future__ import annotations

from stepcritic.eval import pairwise as PW
from stepcritic.eval.tasks.base import Metric, Task, register

NO_PAIRS = "no group has two responses of different preference rank, or the judge gives no such score"
_ITEMS = "mean over items (groups of ranked responses), an item the mean over its pairs"
NOT_ASKED = ("the judge scores responses (its choice does not depend on the order), or no pair has both orders "
             "answered")
METRICS = [
    Metric("pairwise_accuracy", "pairwise", "accuracy", "Pair acc.", True, _ITEMS,
           "share of items whose preferred response the judge prefers (VL-RewardBench's overall accuracy, Multimodal "
           "RewardBench's accuracy); equal scores count half, a generative judge's two orders count half each",
           PW.accuracy, "group", NO_PAIRS, headline=True),
    Metric("pairwise_macro_category", "pairwise", "macro.category", "Pair macro (category)", True,
           "mean of the per-category accuracies", "each category's accuracy counting once, however many items it "
           "holds (VL-RewardBench's macro average accuracy)", PW.accuracy, "group", NO_PAIRS),
    Metric("pairwise_macro_subset", "pairwise", "macro.subset", "Pair macro (subset)", True,
           "mean of the per-subset accuracies", "the same over the data's `subset` (VL-RewardBench's domains: "
           "general, hallucination, reasoning)", PW.accuracy, "group", NO_PAIRS),
    Metric("pairwise_acc_plus", "pairwise", "acc_plus", "ACC+", True, "mean over sets (`set_id`)",
           "share of sets whose every pair the judge gets right, a tie not right (MM-RLHF-RewardBench's ACC+)",
           PW.acc_plus, "group", NO_PAIRS + ", or no item belongs to a set"),
    Metric("pairwise_accuracy_first", "pairwise", "order.first", "Pair acc. (data order)", True,
           "mean over pairs asked in both orders", "accuracy of a generative judge shown the responses in the "
           "data's order (by chain id)", PW.order_stats, "group", NOT_ASKED, table="diagnostics"),
    Metric("pairwise_accuracy_swapped", "pairwise", "order.swapped", "Pair acc. (swapped)", True,
           "mean over pairs asked in both orders", "accuracy of the same judge shown them swapped", PW.order_stats,
           "group", NOT_ASKED, table="diagnostics"),
    Metric("pairwise_flip_rate", "pairwise", "flip_rate", "Pair flip %", False, "mean over pairs asked in both orders",
           "share of pairs whose chosen response changes when the order is swapped (JudgeBench's and CMMU's position "
           "consistency); an unreadable reply is a flip", PW.order_stats, "group", NOT_ASKED, table="diagnostics"),
]


def _selector(d) -> str:
    return d.settings.get("pairwise", {}).get("score", PW.DEFAULT_SELECTOR)


def section(d) -> dict:
    return PW.section(d.gold, d.preds, d.picks, _selector(d))


def accuracy(data, boot):
    """The bootstrap statistic of the pairwise accuracy (`intervals`)."""
    return PW.item_accuracy(PW.judged_items(data.gold, data.preds, data.picks, _selector(data))[0], boot)


TASK = register(Task(
    "pairwise", "pairwise", "reward-model benchmarks' preference items: each judge prefers one of two responses "
    "(higher score, or asked in both orders); accuracy, per category, macro, ACC+ (VL-RewardBench, Multimodal "
    "RewardBench, MM-RLHF-RewardBench)",
    # opt-in: a generative judge is asked each pair in both orders, two requests more per pair
    default=False, section=section, statistics={"pairwise_accuracy": accuracy},
), METRICS)
