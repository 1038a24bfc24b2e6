"""CMMU's ShiftCheck: circular evaluation of multiple-choice answers and a position-bias rate.

A question with k options is asked k times, each time with the options rotated one place to the right
(ABCD, DABC, CDAB, BCDA). It counts as answered only if every rotation picks the right option, which
removes lucky guesses. The failed questions then show where a judge's picks land when it does not
know: an unbiased judge spreads them evenly over the positions, a biased one piles them on a letter.
CMMU's BiasRate is the variance of those position frequencies.

In StepCritic an "option" is usually a whole reasoning chain and the question is "which is best?".
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from stepcritic.eval.sums import question_mean

# CMMU reports BiasRate for four-option questions; the headline number uses those groups only.
CMMU_OPTION_COUNT = 4
OPTION_LETTERS = "ABCD"
MAX_OPTIONS = len(OPTION_LETTERS)  # ShiftCheck asks about at most four chains per group, like A-D options


def circular_shifts(options: list) -> list[list]:
    """The k right circular shifts of `options`, starting with the original order (ABCD, DABC, CDAB, BCDA)."""
    k = len(options)
    return [list(options[k - i:]) + list(options[:k - i]) for i in range(k)]


def _letter(i: int) -> str:
    return chr(ord("A") + i)


def _position(prediction: str | None, n_options: int) -> int | None:
    """0-based position named by a letter prediction, or None when it names no shown option."""
    if not isinstance(prediction, str) or len(prediction.strip()) != 1:
        return None
    i = ord(prediction.strip().upper()) - ord("A")
    return i if 0 <= i < n_options else None


def _is_complete(records: list[dict]) -> bool:
    """One record per circular shift of one option list, and nothing else."""
    base = records[0]["options"]
    shown = sorted(tuple(r["options"]) for r in records)
    return shown == sorted(tuple(s) for s in circular_shifts(base))


def _position_percentages(groups: list[list[dict]], n_options: int) -> dict[str, float]:
    """CMMU's P_o = S_o / (m * n) on a 0-100 scale: share of all m*n answers that picked position o.

    Unparseable answers stay in the denominator (they are answers that picked no position), so the
    percentages sum to less than 100 when a judge produced some.
    """
    counts = [0] * n_options
    for records in groups:
        for r in records:
            pos = _position(r["prediction"], n_options)
            if pos is not None:
                counts[pos] += 1
    total = len(groups) * n_options
    return {_letter(i): 100.0 * c / total for i, c in enumerate(counts)}


def group_outcomes(records: list[dict]) -> tuple[dict[str, dict], int]:
    """Per complete group (see `shiftcheck`): {group_id: {correct (None without gold), consistent, reveals_bias,
    n_options, records}}, and the number of incomplete groups left out."""
    by_group: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_group[r["group_id"]].append(r)
    outcomes, n_excluded = {}, 0
    for group_id, group in by_group.items():
        if not _is_complete(group):
            n_excluded += 1
            continue
        n_options = len(group[0]["options"])
        chosen = []
        for r in group:
            pos = _position(r["prediction"], n_options)
            chosen.append(None if pos is None else r["options"][pos])
        consistent = chosen[0] is not None and all(c == chosen[0] for c in chosen)
        gold = next((r["gold"] for r in group if r.get("gold") is not None), None)
        correct = None
        if gold is not None:
            if gold not in group[0]["options"]:
                raise ValueError(f"group {group_id!r}: gold {gold!r} is not one of its options")
            correct = all(c == gold for c in chosen)
        outcomes[group_id] = {"correct": correct, "consistent": consistent, "n_options": n_options,
                              "reveals_bias": not consistent if correct is None else not correct, "records": group}
    return outcomes, n_excluded


def circular_accuracy(outcomes: dict[str, dict], weights=None):
    """Among complete groups with a gold answer (`group_outcomes`), the share where every shift picked the gold
    content; None when no group has gold. With `weights`, per resample of the groups (`sums.question_sums`)."""
    with_gold = {g: o["correct"] for g, o in outcomes.items() if o["correct"] is not None}
    return question_mean(list(with_gold), list(with_gold.values()), weights)


def shiftcheck(records: list[dict]) -> dict:
    """Circular accuracy, consistency and CMMU's BiasRate over groups of shifted multiple-choice records.

    Each record: `group_id`, `options` (option contents in the order shown), `prediction` (a letter
    "A", "B", ... or None when unparseable) and `gold` (content of the right option, or None when the
    question has no known answer). A group is every record sharing a `group_id`; it is complete when its
    records are exactly the circular shifts of one option list. Incomplete groups are left out and
    counted in `n_excluded`.

    - circular_accuracy: among complete groups with a gold answer, the share where every shift picked
      the gold content (None when no group has gold).
    - consistency: among complete groups, the share where every shift picked the same option content.
    - bias_rate: CMMU's BiasRate, the population variance (statistics.pvariance) of the position
      percentages P_o on a 0-100 scale, over the groups that reveal bias: failed groups when the group has
      gold, inconsistent groups when it has none. Computed on 4-option groups as in CMMU (None without
      any); `bias_rate_by_n_options` gives it per option count. Lower is better; 0 = no position preference.
    - position_distribution: the P_o behind `bias_rate` ({"A": %, "B": %, ...}), also per option count.
    """
    outcomes, n_excluded = group_outcomes(records)
    revealing: dict[int, list[list[dict]]] = defaultdict(list)
    for outcome in outcomes.values():
        if outcome["reveals_bias"]:
            revealing[outcome["n_options"]].append(outcome["records"])
    n_with_gold = sum(o["correct"] is not None for o in outcomes.values())
    n_consistent = sum(o["consistent"] for o in outcomes.values())

    distributions = {n: _position_percentages(groups, n) for n, groups in sorted(revealing.items())}
    bias_by_n = {n: statistics.pvariance(dist.values()) for n, dist in distributions.items()}
    return {
        "circular_accuracy": circular_accuracy(outcomes),
        "consistency": n_consistent / len(outcomes) if outcomes else None,
        "bias_rate": bias_by_n.get(CMMU_OPTION_COUNT),
        "bias_rate_by_n_options": bias_by_n,
        "position_distribution": distributions.get(CMMU_OPTION_COUNT),
        "position_distribution_by_n_options": distributions,
        "n_groups": len(outcomes),
        "n_with_gold": n_with_gold,
        "n_bias_groups": sum(len(g) for g in revealing.values()),
        "n_excluded": n_excluded,
    }


# ----------------------------------------------------------------------------- the questions asked

def shiftcheck_questions(gold: list[dict]) -> list[dict]:
    """One multiple-choice question per group of >= 2 chains: "which chain is best?".

    At most four options per group. When a group has a fully-correct chain, exactly one is kept (the
    first by chain_id) and it is the gold option; the others fill up with incorrect chains by chain_id
    (never with chains of unknown correctness).
    Groups with no (or only) correct chains still measure consistency and position bias (gold None).
    """
    groups = defaultdict(list)
    for g in gold:
        groups[g["group_id"]].append(g)
    questions = []
    for group_id, members in groups.items():
        if len(members) < 2:
            continue
        members = sorted(members, key=lambda g: g["chain_id"])
        correct = [g for g in members if g["chain_correct"] is True]
        # a chain of unknown correctness is no wrong option: it may be as good as the gold one
        others = [g for g in members if g["chain_correct"] is False]
        if correct and others:
            chosen, gold_id = [correct[0]] + others[:MAX_OPTIONS - 1], correct[0]["chain_id"]
        else:
            chosen, gold_id = members[:MAX_OPTIONS], None
        questions.append({"group_id": group_id, "category": members[0]["category"], "gold": gold_id,
                          "options": sorted(g["chain_id"] for g in chosen)})
    return questions


def shifted_questions(questions: list[dict]) -> list[dict]:
    out = []
    for q in questions:
        for shift, options in enumerate(circular_shifts(q["options"])):
            out.append(dict(q, question_id=f"{q['group_id']}#{shift}", shift=shift, options=list(options)))
    return out


def question_task(question: dict) -> str:
    """The task that asks a pick question: the pairwise task's carry their `task`, ShiftCheck's none."""
    return question.get("task") or "shiftcheck"
