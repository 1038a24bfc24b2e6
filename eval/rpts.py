"""`stepcritic eval --tasks rpts`: RPTS (Wang & Zhang, 2025) with each judge as its step scorer.

RPTS scores a chain of reasoning from its tree (`rpts_tree`): every step scored on its own, weighted
w_i = lambda^|h_f - h_i| by its height h_i in the tree (Sec. 3), the chain's RPTS their weighted mean
(`metrics.rpts`). The paper then drops right answers whose chain scores RPTS < 0.5 (right for the wrong reasons)
and reports answer accuracy before and after that filter, RPTS over conclusions drawn from visual and from textual
clues, and how RPTS moves with lambda and h_f. This module computes all of that for one judge:

- step scores: the judge's own (1 - p_incorrect, else its verdict; `scores.step_scores`). A judge built for it is
  `--rpts-scorer` (`judges.rpts_scorer`: each step against its premises, the paper's LLM scorer); any other judge's
  critiques serve as they are. With `--rpts-clues`, a conclusion read straight off the image takes its agreement
  with the data's reference clues instead (the paper's semantic-similarity scoring of such steps).
- the reference: the same trees scored with the human step scores (`human_score`), giving the gold RPTS, the gold
  filter, and how far the judge's filter and RPTS agree with them.

Defaults (`Settings`): lambda 0.5 and h_f the height of the chain's final step. The paper leaves both to the
evaluator and studies how they move the score; 0.5 halves a step's weight per level away from the focus, so every
step still counts, and focusing on the final conclusion asks what the filter asks: does the answer rest on sound
steps. The threshold 0.5 is the paper's filter.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from stepcritic.eval import metrics as M
from stepcritic.eval.rpts_tree import data_tree
from stepcritic.eval.scores import step_scores

SENSITIVITY_LAMBDAS = (0.25, 0.5, 0.75, 1.0)
SENSITIVITY_HEIGHTS = (1, 2, 3, None)  # None: each chain's final step


@dataclass(frozen=True)
class Settings:
    lam: float = M.DEFAULT_RPTS_LAMBDA
    h_f: int | None = None          # None: the height of each chain's final step
    threshold: float = M.DEFAULT_RPTS_THRESHOLD
    clues: str = "off"              # how conclusions read off the image are scored: the judge, or a clue matcher

    def as_json(self) -> dict:
        return asdict(self) | {"h_f": "final" if self.h_f is None else self.h_f}


def tree_of(chain: dict) -> dict:
    """The tree `rpts_tree.attach` gave the chain; without one (metrics computed straight from gold), the data's."""
    tree = chain.get("rpts")
    if tree is None:
        tree = data_tree(chain["steps"]) or {"source": None, "premises": None, "reads": None, "error": None}
    return tree


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


class ChainView:
    """One chain's tree, heights and two sets of step scores (the judge's, and the human reference)."""

    def __init__(self, chain: dict, judge_scores: list):
        self.tree = tree_of(chain)
        self.heights = M.step_heights(self.tree["premises"]) if self.tree.get("premises") is not None else None
        clue = self.tree.get("clue_scores") or [None] * len(judge_scores)
        self.judge = [c if c is not None else s for c, s in zip(clue, judge_scores)]
        self.human = [s["human_score"] for s in chain["steps"]]
        self.answer_correct = chain["answer_correct"]

    def score(self, scores: list, lam: float, h_f: int | None, reads: str | None = None) -> float | None:
        """RPTS over the steps (of one clue kind, with `reads`), each weighted by its height in the whole tree."""
        if self.heights is None:
            return None
        if reads is not None:
            scores = [s if reads in kinds else None for s, kinds in zip(scores, self.tree["reads"])]
        return M.rpts(self.heights, scores, lam, self.heights[-1] if h_f is None else h_f)


def section(gold: list[dict], preds: list[dict], settings: Settings | None = None) -> dict:
    """The `rpts` section of one judge's metrics (see the module docstring)."""
    s = settings or Settings()
    views = [ChainView(c, step_scores(p)) for c, p in zip(gold, preds)]
    judge = [v.score(v.judge, s.lam, s.h_f) for v in views]
    human = [v.score(v.human, s.lam, s.h_f) for v in views]
    answers = [v.answer_correct for v in views]
    split = {kind: [v.score(v.judge, s.lam, s.h_f, kind) for v in views] for kind in ("visual", "textual")}
    # the judge's filter against the gold one, on the right answers: the only ones the filter can remove
    both = [(j < s.threshold, h < s.threshold) for a, j, h in zip(answers, judge, human)
            if a and j is not None and h is not None]
    somers = M.somers_d(human, judge)
    gold_filter = M.rpts_filter(answers, human, s.threshold)
    sources = [v.tree["source"] for v in views]
    return {
        "mean": _mean(judge), "n_chains": sum(j is not None for j in judge),
        "accuracy": M.rpts_filter(answers, judge, s.threshold),
        "visual": {"mean": _mean(split["visual"]), "n_chains": sum(x is not None for x in split["visual"])},
        "textual": {"mean": _mean(split["textual"]), "n_chains": sum(x is not None for x in split["textual"])},
        "gold": {"mean": _mean(human), "accuracy_after": gold_filter["after"], "n_chains": gold_filter["n"]},
        "filter_agreement": sum(a == b for a, b in both) / len(both) if both else None,
        "correlation": {"d": somers["d"], "n": somers["n"]},
        "trees": {"data": sources.count("data"), "builder": sum(v.tree.get("error") is None for v in views
                                                                    if v.tree["source"] == "builder"),
                  "malformed": sum(v.tree.get("error") is not None for v in views), "none": sources.count(None)},
        "settings": s.as_json(),
        "sensitivity": sensitivity(views, answers, s.threshold),
    }


def sensitivity(views: list[ChainView], answers: list, threshold: float) -> list[dict]:
    """Mean RPTS and accuracy after the filter over a small grid of lambda and h_f (RPTS's sensitivity study)."""
    grid = []
    for lam in SENSITIVITY_LAMBDAS:
        for h_f in SENSITIVITY_HEIGHTS:
            scores = [v.score(v.judge, lam, h_f) for v in views]
            after = M.rpts_filter(answers, scores, threshold)
            grid.append({"lambda": lam, "h_f": "final" if h_f is None else h_f, "mean": _mean(scores),
                         "accuracy_after": after["after"], "filtered_rate": after["filtered_rate"]})
    return grid


# ----------------------------------------------------------------------------- report

def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def notes(block: dict) -> list[str]:
    """What the report says above the RPTS table: settings, where the trees came from, what went wrong."""
    settings = block.get("settings") or Settings().as_json()  # metrics computed without the runner: the defaults
    lines = [f"lambda {settings['lam']}, h_f {settings['h_f']}, filter RPTS < {settings['threshold']}."]
    trees = block.get("trees")
    if trees:
        lines.append(f"Trees: {trees['data']} from the data's premises, {trees['builder']} from the tree builder"
                     + (f" `{block['builder']}`" if block.get("builder") else "")
                     + f", {trees['malformed']} malformed, {trees['none']} chains without a tree (no RPTS).")
    bad = {k: n for k, n in (block.get("malformed") or {}).items() if n}
    if bad:
        lines.append("Malformed trees by kind: " + ", ".join(f"{k} {n}" for k, n in bad.items()) + "; e.g. "
                     + "; ".join(block.get("malformed_examples") or []) + ".")
    if block.get("clues", "off") != "off":
        lines.append(f"Conclusions read off the image alone are scored by `{block['clues']}` agreement with the "
                     f"data's reference clues ({block.get('clue_scored_steps', 0)} steps, in "
                     f"{block.get('chains_with_reference_clues', 0)} chains with clues), not by the judge.")
    lines.append("Acc. before / after: answer accuracy of the chains with an RPTS before and after the filter drops "
                 "right answers whose RPTS is below the threshold. RPTS (V) / (T): RPTS over the steps that read a "
                 "visual / textual clue directly (heights from the whole tree). Gold: the same trees scored with the "
                 "human step scores.")
    return [" ".join(lines), ""]


def sensitivity_table(name: str, sec: dict) -> list[str]:
    grid = sec.get("sensitivity") or []
    heights = list(dict.fromkeys(row["h_f"] for row in grid))
    lines = [f"`{name}`: mean RPTS / accuracy after the filter", "",
             "| lambda | " + " | ".join(f"h_f {h}" for h in heights) + " |", "|---" * (len(heights) + 1) + "|"]
    for lam in dict.fromkeys(row["lambda"] for row in grid):
        cells = {row["h_f"]: f"{_pct(row['mean'])} / {_pct(row['accuracy_after'])}" for row in grid
                 if row["lambda"] == lam}
        lines.append(f"| {lam:g} | " + " | ".join(cells[h] for h in heights) + " |")
    return lines + [""]
