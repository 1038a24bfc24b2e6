"""The pairwise task (`eval/pairwise.py`): reward-model benchmarks' preference items."""

from __future__ import annotations

from stepcritic.eval import pairwise as PW
from stepcritic.eval import tables
from stepcritic.eval.tasks.base import Metric, Task, register


def _unparseable(sec: dict, noun: str) -> str:
    """"unparseable: 6 of 8 replies", of a judge asked the pairs (`pairwise.section`)."""
    return f"unparseable: {sec['n_unparseable']} of {sec['n_replies']} {noun}"


def _accuracy_note(sec: dict) -> str | None:
    """A low accuracy from unreadable output, told apart in the terminal from one of wrong choices where it is read."""
    return f"({_unparseable(sec, 'pair replies')})" if sec.get("n_unparseable") else None


NO_PAIRS = "no group has two responses of different preference rank, or the judge gives no such score"
_ITEMS = "mean over items (groups of ranked responses), an item the mean over its pairs"
NOT_ASKED = ("the judge scores responses (its choice does not depend on the order), or no pair has both orders "
             "answered")
METRICS = [
    Metric("pairwise_accuracy", "pairwise", "accuracy", "Pair acc.", True, _ITEMS,
           "share of items whose preferred response the judge prefers (VL-RewardBench's overall accuracy, Multimodal "
           "RewardBench's accuracy); equal scores count half, a generative judge's two orders count half each",
           PW.accuracy, "group", NO_PAIRS, headline=True, note=_accuracy_note),
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


def render(metrics: dict, overall: dict) -> list[str]:
    """How each judge chose between responses, and its accuracy per subset (the categories have tables of their own)."""
    lines = ["Pairwise: every two responses of an item with different preference ranks make a pair; a judge that "
             "scores responses prefers the higher score (equal scores count half), a generative judge is asked which "
             "is better in both orders (each order counts half; order accuracies and flip rate under Diagnostics); a "
             "reply naming neither response is unparseable, counted wrong in its order (as VL-RewardBench counts "
             "it) and as a flip, and counted below. Macro: the mean of the per-category (per-subset) accuracies. "
             "ACC+: sets whose every pair is right.", ""]
    for name, result in metrics["judges"].items():
        sec = result["overall"]["pairwise"]
        subsets = ", ".join(f"{k}: {tables.number_or_dash(v)}" for k, v in sec["by_subset"].items() if k != "None")
        lines.append(f"- `{name}`: {sec['n_items']} items, {sec['n_pairs']} pairs ({sec['n_tied_pairs']} tied pairs "
                     f"left out), by {sec['score']}" + (f"; by subset {subsets}" if subsets else "")
                     + (f"; {_unparseable(sec, 'replies')}" if sec.get("n_unparseable") is not None else ""))
    return lines + [""]


TASK = register(Task(
    "pairwise", "pairwise", "reward-model benchmarks' preference items: each judge prefers one of two responses "
    "(higher score, or asked in both orders); accuracy, per category, macro, ACC+ (VL-RewardBench, Multimodal "
    "RewardBench, MM-RLHF-RewardBench)",
    # opt-in: a generative judge is asked each pair in both orders, two requests more per pair
    default=False, section=section, statistics={"pairwise_accuracy": accuracy}, render=render, place=30,
    # each pair in both orders, asked of a generative judge, of the others answered from their scores
    questions=PW.questions, settings=lambda config: {"score": PW.DEFAULT_SELECTOR, **(config.pairwise or {})},
    diagnostics="Pair acc. (data order) and (swapped): a generative judge's pairwise accuracy with the responses "
                "shown in the data's order and swapped (apart: a position preference). Pair flip %: share of pairs "
                "whose chosen response changes with the order, an unparseable reply a flip (lower is better). \"–\" "
                "for a judge that scores responses: its choice does not depend on the order.",
), METRICS)
