"""A trained process reward model as a judge: `prm:MODEL_DIR[,threshold=0.5][,aggregate=min|mean|prod]`.

One teacher-forced forward pass per chain gives P(step correct) for every step (`train.prm.PRMScorer`).
A step is judged correct when that probability reaches `threshold`; `p_incorrect` is its complement and
the chain score aggregates the per-step probabilities (`min`, the usual PRM choice, by default).
"""

from __future__ import annotations

import math

from stepcritic.eval.judges.artifacts import pick_device, weights_digest
from stepcritic.eval.judges.base import Critique, Judge

AGGREGATES = {
    "min": min,
    "mean": lambda ps: sum(ps) / len(ps),
    "prod": math.prod,
}


class PRMJudge(Judge):
    kind = "prm"
    OPTIONS = {"threshold": float, "aggregate": str, "batch_size": int, "dtype": str, "device": str}

    def __init__(self, spec: str, target: str | None = None, threshold: float = 0.5, aggregate: str = "min",
                 batch_size: int = 8, dtype: str = "float32", device: str | None = None):
        if not target:
            raise ValueError("the prm judge needs a trained PRM folder: prm:MODEL_DIR")
        if aggregate not in AGGREGATES:
            raise ValueError(f"unknown aggregate {aggregate!r}; expected one of {list(AGGREGATES)}")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must lie in [0, 1], got {threshold}")
        super().__init__(spec, target=target, threshold=threshold, aggregate=aggregate, batch_size=batch_size,
                         dtype=dtype, device=device)
        self.target, self.threshold, self.aggregate = target, threshold, aggregate
        self.batch_size, self.dtype, self.device = batch_size, dtype, device
        self._scorer = None

    def fingerprint_extra(self) -> dict:
        return {"weights": weights_digest(self.target)}

    @property
    def scorer(self):
        if self._scorer is None:
            from stepcritic.train.prm import PRMScorer

            self._scorer = PRMScorer.from_pretrained(self.target, dtype=self.dtype, device=pick_device(self.device),
                                                     batch_size=self.batch_size)
        return self._scorer

    def critique(self, chain: dict, p_correct: list[float]) -> Critique:
        return Critique(chain["chain_id"], verdicts=[p >= self.threshold for p in p_correct],
                        p_incorrect=[1.0 - p for p in p_correct],
                        chain_score=AGGREGATES[self.aggregate](p_correct), extra={"p_correct": p_correct})

    def judge_batch(self, chains: list[dict]) -> list[Critique]:
        return [self.critique(chain, p) for chain, p in zip(chains, self.scorer.score(chains))]
