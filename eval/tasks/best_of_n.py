"""Best-of-N (`eval/best_of_n.py`): the chain each judge scores highest among a question's N candidates."""

from __future__ import annotations

from stepcritic.eval import best_of_n as BON
from stepcritic.eval import plots, tables
from stepcritic.eval.tasks.base import Metric, Task, register

NO_QUESTIONS = "no question has two or more chains with a known answer label"
BON_SELECTORS = {  # selector: (column, what picks)
    "chain": ("BoN chain score", "the judge's chain score (a reward model's, a generative judge's rating, a "
              "critique's share of steps judged correct)"),
    "min": ("BoN min", "the lowest of the chain's step scores (the usual PRM aggregation)"),
    "mean": ("BoN mean", "the mean of the chain's step scores"),
    "last": ("BoN last", "the score of the chain's final step"),
}
BON_REFERENCES = {  # reference: (column, what it is)
    "random": ("Random pick", "expected accuracy of a uniform pick among the chains (the share of right answers)",
               BON.random_accuracy),
    "majority": ("Majority vote", "accuracy of the most frequent final answer among the chains (self-consistency), "
                 "ties shared", BON.majority_accuracy),
    "oracle": ("Oracle", "share of questions with at least one right chain: the ceiling of any selector",
               BON.oracle_accuracy),
}
_BON_OVER = "mean over questions with two or more chains of known answer label, each with all its chains"
METRICS = [
    Metric(f"bon_{selector}", "best-of-n", f"full.{selector}", display, True, _BON_OVER,
           f"accuracy of the answer of the chain picked by {what}; a tie for the top shares its expected accuracy",
           BON.pick_accuracy, "group",
           f"{NO_QUESTIONS}, or the judge gives no {'chain' if selector == 'chain' else 'step'} score",
           table="best_of_n", headline=selector == "chain")
    for selector, (display, what) in BON_SELECTORS.items()
] + [
    # the same for every judge (they do not depend on its scores): no direction, nothing bolded
    Metric(f"bon_{ref}", "best-of-n", f"full.{ref}", display, None, _BON_OVER, what, fn, "group",
           NO_QUESTIONS + (", or the chains of a question give no final answer" if ref == "majority" else ""),
           table="best_of_n")
    for ref, (display, what, fn) in BON_REFERENCES.items()
]


def section(d) -> dict:
    return BON.section(d.gold, d.preds, **d.settings.get("best_of_n", {}), memo=d.answers.memo)


def chain_accuracy(data, boot):
    """The bootstrap statistic of the chain score's best-of-n accuracy (`intervals`)."""
    memo = data.answers.memo  # the section just computed the same values
    questions, keys = BON.keyed_candidates(data.gold, data.preds, memo)
    return BON.full_accuracy(BON.full_values(questions, memo, keys), "chain", boot)


def render(metrics: dict, overall: dict) -> list[str]:
    """The registry's table (each question with all its chains), then accuracy against N."""
    tasks = metrics["tasks"]
    sections = {name: sec["best-of-n"] for name, sec in overall.items() if "best-of-n" in sec}
    first = next(iter(sections.values()), None)
    parts = ["## Best-of-N", "",
             "Each judge picks, among a question's chains (same `group_id`, known answer label, two or more), the one "
             "it scores highest: by its chain score, or by the minimum, mean or last of its step scores; a tie for "
             "the top counts its expected accuracy. Accuracy of the picked answer x100, against a random pick (its "
             "expectation), majority vote over final answers and the oracle (any chain right), which are the same "
             "for every judge. \"–\": the judge gives no such score.", "",
             tables.leaderboard(overall, tasks, metrics["matcher"], tables.columns(tasks, "best_of_n")), ""]
    if not first or not first["ns"]:
        return parts + ["No question has two or more chains with a known answer label.", ""]
    ns = first["ns"]
    subsets = first["subsets"]
    parts += [f"Against N: every N-subset of a question's chains when there are at most {subsets['max']}, else "
              f"{subsets['max']} drawn with seed {subsets['seed']} (`--bon-subsets`), averaged; questions with at "
              "least N chains (`plots/best_of_n.png`).", "",
              "| Picker | " + " | ".join(f"N={n}" for n in ns) + " |", "|---" * (len(ns) + 1) + "|",
              "| questions | " + " | ".join(str(first["n_questions_at"][str(n)]) for n in ns) + " |"]
    names = {"chain": "chain score", "min": "min step", "mean": "mean step", "last": "last step"}
    for name, sec in sections.items():
        for selector in BON.SELECTORS:
            curve = sec["curve"][selector]
            if any(curve.get(str(n)) is not None for n in ns):
                parts.append(f"| `{name}` {names[selector]} | "
                             + " | ".join(tables.number_or_dash(curve.get(str(n))) for n in ns) + " |")
    for ref in BON.REFERENCES:
        parts.append(f"| {ref} | "
                     + " | ".join(tables.number_or_dash(first["curve"][ref].get(str(n))) for n in ns) + " |")
    return parts + [""]


def best_of_n(metrics: dict, path: str) -> bool:
    """Accuracy of the picked answer against N: every judge's selectors, and random pick, majority vote and the
    oracle (the same for every judge, drawn once)."""
    sections = {name: r["overall"]["best-of-n"] for name, r in metrics["judges"].items()
                if (r["overall"].get("best-of-n") or {}).get("ns")}
    if not sections:
        return False
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    first = next(iter(sections.values()))
    ns = first["ns"]
    markers = {"chain": "o", "min": "v", "mean": "s", "last": "^"}
    for k, (name, sec) in enumerate(sections.items()):
        for selector in BON.SELECTORS:
            values = [sec["curve"][selector].get(str(n)) for n in ns]
            if any(v is not None for v in values):
                ax.plot(ns, [float("nan") if v is None else 100 * v for v in values], marker=markers[selector],
                        color=f"C{k % 10}", linewidth=1.2, label=f"{name} {selector}")
    for ref, style in zip(BON.REFERENCES, ("--", "-.", ":")):
        ax.plot(ns, [float("nan") if v is None else 100 * v for v in (first["curve"][ref].get(str(n)) for n in ns)],
                style, color="black", linewidth=1, label=ref)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("N (candidate chains per question)")
    ax.set_ylabel("accuracy of the picked answer x100")
    ax.set_ylim(0, 100)
    ax.set_title("Best-of-N")
    ax.legend(fontsize=6, ncol=2)
    plots.save(fig, path)
    return True


TASK = register(Task(
    "best-of-n", "critiques", "the chain each judge scores highest among N candidates of a question, against random "
    "pick, majority vote and the oracle, for N = 1, 2, 4, ... (PRM best-of-N selection)",
    section=section, statistics={"bon_chain": chain_accuracy}, render=render, place=80,
    plots={"best_of_n": best_of_n},
), METRICS)
