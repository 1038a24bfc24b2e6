"""ShiftCheck (CMMU): "which chain is best?" asked under every circular shift of the options."""

from __future__ import annotations

from stepcritic.eval import metrics as M
from stepcritic.eval import plots
from stepcritic.eval import shiftcheck as SC
from stepcritic.eval.tasks.base import Metric, Task, register

METRICS = [
    Metric("circular_accuracy", "shiftcheck", "circular_accuracy", "ShiftCheck acc", True,
           "mean over complete shift groups with a correct option",
           "right under every circular shift of the options (CMMU ShiftCheck)", M.shiftcheck, "group",
           "no question has exactly one fully correct option", headline=True),
    Metric("consistency", "shiftcheck", "consistency", "Consistency", True, "mean over complete shift groups",
           "the same option content chosen under every shift (CMMU)", M.shiftcheck, "group",
           "no question has two or more chains"),
    Metric("bias_rate", "shiftcheck", "bias_rate", "BiasRate", False,
           "variance over positions of failed 4-option questions",
           "CMMU's BiasRate: variance of the pick percentages (0-100 scale) per position", M.shiftcheck, "group",
           "no 4-option question was failed", scale=1),
]


def shiftcheck_picks(picks: list[dict]) -> list[dict]:
    """The ShiftCheck answers among a judge's picks (the pairwise task's questions are picks too)."""
    return [q for q in picks if q.get("task") is None]


def section(d) -> dict:
    return M.shiftcheck(shiftcheck_picks(d.picks))


def circular_accuracy(data, boot):
    """The bootstrap statistic of the circular accuracy (`intervals`)."""
    return SC.circular_accuracy(SC.group_outcomes(shiftcheck_picks(data.picks))[0], boot)


def render(metrics: dict, overall: dict) -> list[str]:
    """A note under the leaderboard: each judge's groups and its BiasRate by option count."""
    lines = []
    for name, result in metrics["judges"].items():
        sc = result["overall"].get("shiftcheck")
        if not sc:
            continue
        by_n = ", ".join(f"{n} options: {rate:.1f}" for n, rate in sc["bias_rate_by_n_options"].items()) or "none"
        lines.append(f"- `{name}`: {sc['n_groups']} groups ({sc['n_with_gold']} with one correct chain), "
                     f"BiasRate by option count: {by_n}")
    return ["ShiftCheck (every circular shift of up to 4 chains per group must pick the one fully "
            "correct chain):", *lines, ""]


def shiftcheck_positions(metrics: dict, path: str) -> bool:
    """Where each judge's picks land on failed ShiftCheck questions (flat = no position preference)."""
    dists = {}
    for name, r in metrics["judges"].items():
        by_n = (r["overall"].get("shiftcheck") or {}).get("position_distribution_by_n_options") or {}
        if by_n:
            n = max(by_n, key=int)
            dists[f"{name} ({n} options)"] = by_n[n]
    if not dists:
        return False
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(dists)), 3.5))
    letters = sorted({letter for d in dists.values() for letter in d})
    width = 0.8 / len(letters)
    for k, letter in enumerate(letters):
        xs = [i + (k - (len(letters) - 1) / 2) * width for i in range(len(dists))]
        ax.bar(xs, [d.get(letter, 0) for d in dists.values()], width, label=letter)
    ax.set_xticks(range(len(dists)), list(dists), rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("% of picks")
    ax.set_title("ShiftCheck position of picks (failed questions)")
    ax.legend(title="position", fontsize=8)
    plots.save(fig, path)
    return True


TASK = register(Task(
    "shiftcheck", "picks", "\"which chain is best?\" asked under every circular shift of the options (CMMU)",
    section=section, statistics={"circular_accuracy": circular_accuracy}, render=render, place=20,
    plots={"shiftcheck_positions": shiftcheck_positions},
    questions=lambda gold: SC.shifted_questions(SC.shiftcheck_questions(gold)),
), METRICS)
