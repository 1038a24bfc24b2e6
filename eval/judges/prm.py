"""A trained process reward model as a judge: `prm:MODEL_DIR[,threshold=0.5][,aggregate=min|mean|prod]`.

One teacher-forced forward pass per chain gives P(step correct) for every step (`train.scoring.PRMScorer`).
A step is judged correct when that probability reaches `threshold`; `p_incorrect` is its complement and
the chain score aggregates the per-step probabilities (`min`, the usual PRM choice, by default).

A PRM that writes notes is scored step by step (a generation per step, each reusing the cache of the steps before):
it hands each chain over as soon as it is scored, so progress and the saved critiques advance chain by chain. A
chain longer than `train.limits.MAX_STEPS` is refused by the scorer in one line, before it is scored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from stepcritic.eval.judges.base import Critique
from stepcritic.eval.judges.scored import ScoredJudge

AGGREGATES = {
    "min": min,
    "mean": lambda ps: sum(ps) / len(ps),
    "prod": math.prod,
}


class PRMJudge(ScoredJudge):
    kind = "prm"
    OPTIONS = {**ScoredJudge.OPTIONS, "threshold": float, "aggregate": str}
    ARTIFACT = "a trained PRM folder"

    def __init__(self, spec: str, target: str | None = None, threshold: float = 0.5, aggregate: str = "min",
                 **options):
        if aggregate not in AGGREGATES:
            raise ValueError(f"unknown aggregate {aggregate!r}; expected one of {list(AGGREGATES)}")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must lie in [0, 1], got {threshold}")
        super().__init__(spec, target=target, threshold=threshold, aggregate=aggregate, **options)
        self.threshold, self.aggregate = threshold, aggregate

    @classmethod
    def option_choices(cls) -> dict[str, tuple]:
        return {"aggregate": tuple(AGGREGATES)}

    def scorer_class(self):
        from stepcritic.train.scoring import PRMScorer  # torch and transformers, when the judge loads its model

        return PRMScorer

    def judge_stream(self, chains: Iterable[dict]) -> Iterator[tuple[int, Critique]]:
        if not self.scorer.notes:
            yield from super().judge_stream(chains)
            return
        for index, chain in enumerate(chains):  # minutes per long chain: each is saved and counted when done
            yield index, self.judge_batch([chain])[0]

    def critique(self, chain: dict, p_correct: list[float]) -> Critique:
        return Critique(chain["chain_id"], verdicts=[p >= self.threshold for p in p_correct],
                        p_incorrect=[1.0 - p for p in p_correct],
                        chain_score=AGGREGATES[self.aggregate](p_correct), extra={"p_correct": p_correct})
