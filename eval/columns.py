"""The numbers the sections of `results` read, as flat numpy arrays: one entry per chain and one per step (every
chain's steps one after another), built once from the gold chains (`Gold`) and once per judge from its predictions
(`Answers`). A breakdown value is a `View`: the positions of its chains and of its steps in those arrays. So a metric
is computed once per view from arrays, and neither a breakdown nor a bootstrap resample reads the chains' dicts again.

Labels are floats: 1.0 correct, 0.0 incorrect, NaN unknown (None). "Incorrect" is `== 0`, "known" is `~isnan`, and a
None score is NaN, following the rules of `metrics` (a gold None removes the item; a predicted None flags nothing).
"""

from __future__ import annotations

import numpy as np

from stepcritic.data_prep.schema import describes, reasons
from stepcritic.eval import metrics as M
from stepcritic.eval.scores import chain_score, output_counts, step_scores

INDEX = np.int32


def labels(values) -> np.ndarray:
    """True / False / None (or numbers / None) as 1.0 / 0.0 / NaN."""
    return np.fromiter((np.nan if v is None else float(v) for v in values), dtype=float)


class Gold:
    """The gold chains' labels as arrays, shared by every judge evaluated on them."""

    def __init__(self, gold: list[dict]):
        self.chains = gold
        # positions as 32-bit integers: half the memory, and a billion steps away from their limit
        self.n_steps = np.array([len(c["steps"]) for c in gold], dtype=INDEX)
        self.starts = np.concatenate([[0], np.cumsum(self.n_steps)]).astype(INDEX)
        self.step_chain = np.repeat(np.arange(len(gold), dtype=INDEX), self.n_steps)
        self.step_pos = np.arange(len(self.step_chain), dtype=INDEX) - self.starts[self.step_chain]
        codes: dict = {}
        self.group = np.array([codes.setdefault(c["group_id"], len(codes)) for c in gold], dtype=INDEX)
        self.group_names = list(codes)
        self.answer = labels(c["answer_correct"] for c in gold)
        # MiCEval's human label of a whole MCoT (good 1 / bad 0, Sec. 2.3.3 and App. D.1), not a mean of step scores
        self.chain_human = labels(c.get("chain_correct") for c in gold)
        self.chain_correct = [c.get("chain_correct") for c in gold]
        steps = [s for c in gold for s in c["steps"]]
        self.correct = labels(s["correct"] for s in steps)
        self.human = labels(s["human_score"] for s in steps)
        self.describes = np.fromiter((describes(s) for s in steps), dtype=bool, count=len(steps))
        self.reasons = np.fromiter((reasons(s) for s in steps), dtype=bool, count=len(steps))
        # RPTS needs the premise tree: a chain counts when every step's premises are annotated
        self.annotated = np.fromiter((all(s["premises"] is not None for s in c["steps"]) for c in gold), dtype=bool,
                                     count=len(gold))
        self._memo: dict = {}

    def memo(self, key, make):
        """What `make()` returns, computed once for these chains (a breakdown's mask, RPTS's trees)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def heights(self) -> np.ndarray:
        """Per step, its height in the tree of the data's premises (`metrics.step_heights`); -1 where its chain is not
        annotated."""
        def make():
            out = np.full(len(self.step_chain), -1, dtype=INDEX)
            for i in np.flatnonzero(self.annotated):
                premises = [s["premises"] for s in self.chains[i]["steps"]]
                out[self.starts[i]:self.starts[i + 1]] = M.step_heights(premises)
            return out
        return self.memo("heights", make)

    def values(self, field: str, step_key: str | None = None) -> np.ndarray:
        """Each chain's value of `field`, or with `step_key` each step's value of that key (an object array)."""
        def make():
            raw = ([s.get(step_key) for c in self.chains for s in c["steps"]] if step_key
                   else [c.get(field) for c in self.chains])
            out = np.empty(len(raw), dtype=object)
            out[:] = raw
            return out
        return self.memo(("values", field, step_key), make)


class Answers:
    """One judge's predictions (one per gold chain, in order) as arrays beside its `Gold`."""

    def __init__(self, gold: Gold, preds: list[dict], matches: list[list]):
        if len(preds) != len(gold.chains) or any(len(p["verdicts"]) != n for p, n in zip(preds, gold.n_steps.tolist())):
            raise ValueError("predictions must follow the gold chains, one verdict per step")
        self.verdict = labels(v for p in preds for v in p["verdicts"])
        self.score = labels(x for p in preds for x in step_scores(p))
        self.p_incorrect = labels(x for p in preds for x in (p.get("p_incorrect") or [None] * len(p["verdicts"])))
        self.has_probability = np.fromiter((bool(p.get("p_incorrect")) for p in preds), dtype=bool, count=len(preds))
        self.match = labels(m for chain in matches for m in chain) if matches else np.full(len(self.verdict), np.nan)
        self.answer = labels(p["answer_correct"] for p in preds)
        self.chain_score = labels(chain_score(p) for p in preds)
        counts = np.array([output_counts(p) for p in preds], dtype=np.int64).reshape(-1, 2)
        self.n_outputs, self.n_invalid = counts[:, 0], counts[:, 1]
        # an output the judge failed to read that was meant to give verdicts (`scores.gives`)
        self.unread = np.fromiter((not p["valid"] and (p.get("extra") or {}).get("scope") != "chain" for p in preds),
                                  dtype=bool, count=len(preds))
        self.explained = np.fromiter((p.get("explanations") is not None for p in preds), dtype=bool, count=len(preds))
        self.memo: dict = {}  # what a section keeps for the same judge's breakdowns (`best_of_n.section`)


class View:
    """Some chains (positions in `Gold`, ascending) and some of their steps: every step of those chains, or for a
    step breakdown (`sliced`) only the steps of one value, each chain then read as the sequence of its kept steps."""

    def __init__(self, gold: Gold, chains: np.ndarray, steps: np.ndarray, sliced: bool = False):
        self.gold, self.chains, self.steps, self.sliced = gold, chains, steps, sliced

    @classmethod
    def whole(cls, gold: Gold) -> "View":
        return cls(gold, np.arange(len(gold.chains), dtype=INDEX), np.arange(len(gold.step_chain), dtype=INDEX))

    def of_chains(self, keep) -> "View":
        """The chains at positions `keep` of this view, with all their steps."""
        chains = self.chains[np.asarray(keep, dtype=INDEX)]
        mask = np.zeros(len(self.gold.chains), dtype=bool)
        mask[chains] = True
        return View(self.gold, chains, np.flatnonzero(mask[self.gold.step_chain]).astype(INDEX))

    def of_steps(self, mask: np.ndarray) -> "View":
        """Only the steps where `mask` (one entry per step of `Gold`) holds; chains left without one are dropped."""
        steps = self.steps[mask[self.steps]]
        return View(self.gold, np.unique(self.gold.step_chain[steps]), steps, sliced=True)

    @property
    def step_chain(self) -> np.ndarray:
        return self.gold.step_chain[self.steps]

    def first_steps(self) -> np.ndarray:
        """Per step of the view, whether it is the first kept step of its chain."""
        chain = self.step_chain
        return np.concatenate([[True], chain[1:] != chain[:-1]]) if len(chain) else np.zeros(0, dtype=bool)

    def group_ids(self) -> list:
        """The questions of the view's chains, sorted."""
        return sorted(self.gold.group_names[g] for g in np.unique(self.gold.group[self.chains]).tolist())
