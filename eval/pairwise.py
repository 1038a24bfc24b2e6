"""`--tasks pairwise`: reward-model benchmarks' preference items, each judge choosing the better response.

An item is a group of chains (one per response) with a `preference_rank` (`docs/data.md`); every two responses of
different rank make a pair, the better one known. Responses of equal rank (a tie in the data) make no pair: none of
VL-RewardBench, Multimodal RewardBench and MM-RLHF-RewardBench scores a tie, and the count of those pairs is reported.

How a judge chooses:
- a judge that scores chains (reward model, PRM, critic) scores each response and prefers the higher score. Which score
  is `--pairwise-score`, the selectors of best-of-n (`best_of_n.selector_scores`): `chain` (its chain score), or its
  step scores aggregated by `min`, `mean` or `last`. Equal scores count half (the expectation of a coin toss, as
  best-of-n counts ties); a response without a score ranks below any score.
- a generative judge is shown the two responses and asked which is better (the listwise prompt of ShiftCheck,
  `Judge.pick_best`), in both orders, as JudgeBench and CMMU's circular evaluation ask. Each order has its accuracy;
  the pair's accuracy is their mean (what an evaluation that shows one random order measures on average), and the
  flip rate is the share of pairs whose chosen response changes with the order. An unparseable reply (naming neither
  response) chooses nothing: wrong in that order, as VL-RewardBench's scoring counts a reply that names no answer, and
  a flip, even when the other order's reply is unparseable too (no choice held in both orders). How many replies were
  unparseable is counted beside the accuracy (`n_unparseable` of `n_replies`), so that a low accuracy from unreadable
  output is told apart from one of wrong choices.

An item's accuracy is the mean over its pairs (one pair for two responses). Accuracy is the mean over items;
per category and per subset the same within each; macro accuracy the mean of the per-category (per-subset)
accuracies, each category counting once (VL-RewardBench's macro average over its domains); ACC+ (MM-RLHF-RewardBench)
the share of sets (`set_id`) whose every pair is right, where the data has sets.

Only the standard library at the top: `tasks` imports this module for the registry.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from itertools import combinations

SELECTORS = ("chain", "min", "mean", "last")
DEFAULT_SELECTOR = "chain"
TASK = "pairwise"  # the `task` of a pairwise question among a judge's picks (ShiftCheck's have none)


# ----------------------------------------------------------------------------- the metric functions

def score_hit(better: float | None, worse: float | None) -> float:
    """1 when the better response scores higher, 0 when lower, 1/2 on equal scores (or none on both)."""
    better, worse = (None if s is None else round(s, 9) for s in (better, worse))
    if better == worse:
        return 0.5
    if worse is None:
        return 1.0
    return float(better is not None and better > worse)


def accuracy(items: list[dict]) -> dict:
    """Accuracies of items `{"hit" (the item's mean over its pairs), "category", "subset", "set_id", "pairs": [hit per
    pair]}`: overall, per category and subset, their macro means, and ACC+ over sets (None without sets)."""
    out = {"accuracy": item_accuracy(items), "n_items": len(items)}
    for field in ("category", "subset"):
        by = defaultdict(list)
        for i in items:
            by[i[field]].append(i["hit"])
        per = {str(k): statistics.fmean(v) for k, v in sorted(by.items(), key=lambda kv: str(kv[0]))}
        out[f"by_{field}"] = per
        out.setdefault("macro", {})[field] = _mean(list(per.values()))
    out.update(acc_plus(items))
    return out


def item_accuracy(items: list[dict], weights=None):
    """The mean of the items' hits, None without items; with `weights`, per resample of their questions
    (`metrics.question_sums`)."""
    from stepcritic.eval.metrics import question_mean

    return question_mean([i.get("group_id") for i in items], [i["hit"] for i in items], weights)


def acc_plus(items: list[dict]) -> dict:
    """MM-RLHF-RewardBench's ACC+: the share of sets (items sharing a `set_id`) in which every pair is right (a half
    hit, a tie, is not right). None when no item has a set."""
    sets = defaultdict(list)
    for i in items:
        if i.get("set_id") is not None:
            sets[i["set_id"]].extend(i["pairs"])
    ok = [all(h == 1.0 for h in pairs) for pairs in sets.values()]
    return {"acc_plus": _mean([float(x) for x in ok]), "n_sets": len(sets)}


def order_stats(pairs: list[tuple[float, float, bool]]) -> dict:
    """From per pair (hit in the first order, hit in the swapped order, whether the chosen response changed): each
    order's accuracy and the flip rate, None without pairs."""
    return {"order": {"first": _mean([a for a, _, _ in pairs]), "swapped": _mean([b for _, b, _ in pairs])},
            "flip_rate": _mean([float(f) for _, _, f in pairs])}


def _mean(values: list) -> float | None:
    return statistics.fmean(values) if values else None


# ----------------------------------------------------------------------------- questions for generative judges

def items_of(gold: list[dict]) -> dict[str, dict]:
    """Per group with two or more ranked responses: its responses (chain dicts) and its pairs (better, worse) by
    position, and its count of tied pairs."""
    groups = defaultdict(list)
    for c in gold:
        if c.get("preference_rank") is not None:
            groups[c["group_id"]].append(c)
    out = {}
    for g, members in groups.items():
        members = sorted(members, key=lambda c: c["chain_id"])
        pairs, ties = [], 0
        for a, b in combinations(members, 2):
            if a["preference_rank"] == b["preference_rank"]:
                ties += 1
            else:
                pairs.append((a, b) if a["preference_rank"] < b["preference_rank"] else (b, a))
        if pairs or ties:
            out[g] = {"first": members[0], "pairs": pairs, "ties": ties}
    return out


def questions(gold: list[dict]) -> list[dict]:
    """Every pair asked in both orders, as ShiftCheck questions are (`runner.judge_picks` asks and caches them):
    options in the data's order (by chain id) first, then swapped."""
    out = []
    for g, item in items_of(gold).items():
        for better, worse in item["pairs"]:
            options = sorted([better["chain_id"], worse["chain_id"]])
            pair = "|".join(options)
            for shift, shown in enumerate((options, options[::-1])):
                out.append({"group_id": g, "category": item["first"].get("category"), "gold": better["chain_id"],
                            "options": list(shown), "task": TASK, "pair": pair,
                            "question_id": f"{g}#pair:{pair}#{shift}", "shift": shift})
    return out


def _picked(record: dict) -> str | None:
    letter = record.get("prediction")
    if not isinstance(letter, str) or len(letter.strip()) != 1:
        return None
    k = ord(letter.strip().upper()) - ord("A")
    return record["options"][k] if 0 <= k < len(record["options"]) else None


def _answered_pairs(picks: list[dict]) -> dict[str, tuple[float, float, bool, int]] | None:
    """Per pair a generative judge was asked in both orders: (hit in the first order, in the swapped, flipped, how
    many of its two replies were unparseable); None when the judge's pairwise picks came from its chain scores (it
    scores chains: compared by `--pairwise-score`)."""
    mine = [p for p in picks if p.get("task") == TASK]
    if not mine or any(p.get("answered_from") == "chain_score" for p in mine):
        return None
    by_pair: dict[str, dict] = defaultdict(dict)
    for p in mine:
        by_pair[(p["group_id"], p["pair"])][p["shift"]] = p
    out = {}
    for key, shifts in by_pair.items():
        if set(shifts) != {0, 1}:
            continue
        first, swapped = _picked(shifts[0]), _picked(shifts[1])
        gold = shifts[0]["gold"]
        out[key] = (float(first == gold), float(swapped == gold), first != swapped or first is None,
                    (first is None) + (swapped is None))
    return out


# ----------------------------------------------------------------------------- the section

def section(gold: list[dict], preds: list[dict], picks: list[dict], selector: str = DEFAULT_SELECTOR) -> dict:
    """The pairwise section of one judge (`results.TASK_SECTIONS`)."""
    items, orders, n_pairs, n_ties, asked, scored, n_unparseable = judged_items(gold, preds, picks, selector)
    out = accuracy(items)
    if not asked and not scored:  # the judge gives no such score
        out.update(accuracy=None, macro={"category": None, "subset": None}, acc_plus=None,
                   by_category={k: None for k in out["by_category"]}, by_subset={k: None for k in out["by_subset"]})
    # a judge that scores responses writes no reply to read: no count, rather than a count of 0
    return {**out, **order_stats(orders), "n_pairs": n_pairs, "n_tied_pairs": n_ties,
            "n_unparseable": n_unparseable if asked else None, "n_replies": 2 * len(orders) if asked else None,
            "score": "both orders asked" if asked else selector}


def judged_items(gold: list[dict], preds: list[dict], picks: list[dict], selector: str = DEFAULT_SELECTOR):
    """Per item the judge's hits (`accuracy`'s items), the per-order hits of a generative judge's pairs, the counts of
    pairs and of tied pairs, whether the judge was asked (generative), whether it scored any response, and how many
    of the replies to the pairs counted were unparseable."""
    from stepcritic.eval.best_of_n import selector_scores

    if selector not in SELECTORS:
        raise ValueError(f"pairwise score must be one of {SELECTORS}, got {selector!r}")
    asked = _answered_pairs(picks)
    scores = {c["chain_id"]: selector_scores(p)[selector] for c, p in zip(gold, preds)} if asked is None else {}
    items, orders, n_pairs, n_ties, n_unparseable = [], [], 0, 0, 0
    for g, item in sorted(items_of(gold).items()):
        n_ties += item["ties"]
        hits = []
        for better, worse in item["pairs"]:
            if asked is None:
                hits.append(score_hit(scores.get(better["chain_id"]), scores.get(worse["chain_id"])))
                continue
            found = asked.get((g, "|".join(sorted([better["chain_id"], worse["chain_id"]]))))
            if found is not None:
                orders.append(found[:3])
                n_unparseable += found[3]
                hits.append((found[0] + found[1]) / 2)
        if hits:
            n_pairs += len(hits)
            first = item["first"]
            items.append({"group_id": g, "hit": statistics.fmean(hits), "pairs": hits,
                          "category": first.get("category"), "subset": first.get("subset"),
                          "set_id": first.get("set_id")})
    return (items, orders, n_pairs, n_ties, asked is not None,
            any(s is not None for s in scores.values()), n_unparseable)
