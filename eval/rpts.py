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

from array import array
from dataclasses import asdict, dataclass

from stepcritic.eval import metrics as M
from stepcritic.eval.rpts_tree import TEXTUAL, VISUAL, data_tree
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


def _mean(values) -> float | None:
    """The mean of the defined values (NaN: None), as `statistics.fmean` adds them."""
    import math

    import numpy as np

    values = values[~np.isnan(values)]
    return math.fsum(values.tolist()) / len(values) if len(values) else None


def _count(values) -> int:
    import numpy as np

    return int((~np.isnan(values)).sum())


class Trees:
    """Every chain's tree as flat arrays, one entry per step of every chain (chain after chain): its height (NaN
    without a tree), whether it reads a visual and a textual clue, its clue score (NaN: none) and its human score;
    per chain its focus (the final step's height), whether it has a tree, its answer label, and the tree's source and
    error. Built once for the gold chains; a breakdown `take`s the chains it holds."""

    def __init__(self, gold: list[dict] | None):
        import numpy as np

        if gold is None:  # `take` fills the fields
            return
        nan = float("nan")
        # filled chain by chain into flat buffers of numbers: a list of a million float objects, made and dropped,
        # would leave the memory it took behind
        height, clue, human, focus = array("d"), array("d"), array("d"), array("d")
        visual, textual, has_tree = bytearray(), bytearray(), bytearray()
        self.source, self.malformed = [], []
        for chain in gold:
            tree = tree_of(chain)
            n = len(chain["steps"])
            h = M.step_heights(tree["premises"]) if tree.get("premises") is not None else None
            has_tree.append(h is not None)
            height.extend(h if h is not None else [nan] * n)
            focus.append(h[-1] if h else nan)
            reads = tree.get("reads") if h is not None else None
            visual.extend([VISUAL in kinds for kinds in reads] if reads else bytes(n))
            textual.extend([TEXTUAL in kinds for kinds in reads] if reads else bytes(n))
            clue.extend([nan if x is None else x for x in tree.get("clue_scores") or [None] * n])
            human.extend([nan if x["human_score"] is None else x["human_score"] for x in chain["steps"]])
            self.source.append(tree["source"])
            self.malformed.append(tree.get("error") is not None)
        self.height, self.clue, self.human, self.focus = (np.frombuffer(a, dtype=float).copy()
                                                          for a in (height, clue, human, focus))
        self.visual, self.textual, self.has_tree = (np.frombuffer(bytes(a), dtype=bool).copy()
                                                    for a in (visual, textual, has_tree))
        self.answer = np.fromiter((nan if c["answer_correct"] is None else float(c["answer_correct"]) for c in gold),
                                  dtype=float, count=len(gold))
        self.n_steps = np.array([len(c["steps"]) for c in gold], dtype=np.int64)
        self.chain = np.repeat(np.arange(len(gold), dtype=np.int32), self.n_steps)

    def take(self, chains) -> "Trees":
        """The trees of the chains at positions `chains` (ascending)."""
        import numpy as np

        chains = np.asarray(chains, dtype=np.int64)
        if len(chains) == len(self.has_tree):  # every chain (positions are ascending and distinct)
            return self
        out = Trees(None)
        steps = np.isin(self.chain, chains)
        for name in ("height", "clue", "human", "visual", "textual"):
            setattr(out, name, getattr(self, name)[steps])
        for name in ("focus", "has_tree", "answer", "n_steps"):
            setattr(out, name, getattr(self, name)[chains])
        out.source = [self.source[i] for i in chains.tolist()]
        out.malformed = [self.malformed[i] for i in chains.tolist()]
        out.chain = np.repeat(np.arange(len(chains), dtype=np.int32), out.n_steps)
        return out

    def score(self, scores, lam: float, h_f: int | None, reads=None):
        """Per chain, RPTS over its steps (with `reads`, only the steps that read that clue), each weighted by its
        height in the whole tree; NaN for a chain without a tree or a scored step."""
        on = self.has_tree[self.chain] if reads is None else self.has_tree[self.chain] & reads
        focus = self.focus[self.chain[on]] if h_f is None else h_f
        return M.rpts_chains(self.height[on], scores[on], self.chain[on], focus, lam, len(self.has_tree))


def section(gold: list[dict], preds: list[dict], settings: Settings | None = None, trees: Trees | None = None,
            judge_scores=None) -> dict:
    """The `rpts` section of one judge's metrics (see the module docstring). `trees` (`Trees` of these chains) and
    `judge_scores` (the judge's step scores, flat, NaN for None) spare reading them again from the chains."""
    import numpy as np

    s = settings or Settings()
    trees = trees or Trees(gold)
    if judge_scores is None:
        judge_scores = np.array([np.nan if x is None else x for p in preds for x in step_scores(p)], dtype=float)
    steps = np.where(np.isnan(trees.clue), judge_scores, trees.clue)
    judge = trees.score(steps, s.lam, s.h_f)
    human = trees.score(trees.human, s.lam, s.h_f)
    answers = trees.answer
    split = {"visual": trees.score(steps, s.lam, s.h_f, trees.visual),
             "textual": trees.score(steps, s.lam, s.h_f, trees.textual)}
    # the judge's filter against the gold one, on the right answers: the only ones the filter can remove
    both = (answers == 1) & ~np.isnan(judge) & ~np.isnan(human)
    somers = M.somers_d(human, judge, pvalue=False)
    gold_filter = M.rpts_filter(answers, human, s.threshold)
    sources = trees.source
    agree = int(((judge[both] < s.threshold) == (human[both] < s.threshold)).sum())
    return {
        "mean": _mean(judge), "n_chains": _count(judge),
        "accuracy": M.rpts_filter(answers, judge, s.threshold),
        "visual": {"mean": _mean(split["visual"]), "n_chains": _count(split["visual"])},
        "textual": {"mean": _mean(split["textual"]), "n_chains": _count(split["textual"])},
        "gold": {"mean": _mean(human), "accuracy_after": gold_filter["after"], "n_chains": gold_filter["n"]},
        "filter_agreement": agree / int(both.sum()) if both.any() else None,
        "correlation": {"d": somers["d"], "n": somers["n"]},
        "trees": {"data": sources.count("data"),
                  "builder": sum(src == "builder" and not bad for src, bad in zip(sources, trees.malformed)),
                  "malformed": sum(trees.malformed), "none": sources.count(None)},
        "settings": s.as_json(),
        "sensitivity": sensitivity(trees, steps, answers, s.threshold),
    }


def sensitivity(trees: Trees, scores, answers, threshold: float) -> list[dict]:
    """Mean RPTS and accuracy after the filter over a small grid of lambda and h_f (RPTS's sensitivity study)."""
    grid = []
    for lam in SENSITIVITY_LAMBDAS:
        for h_f in SENSITIVITY_HEIGHTS:
            chain_scores = trees.score(scores, lam, h_f)
            after = M.rpts_filter(answers, chain_scores, threshold)
            grid.append({"lambda": lam, "h_f": "final" if h_f is None else h_f, "mean": _mean(chain_scores),
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
