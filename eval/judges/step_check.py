"""A general VLM asked of every step whether it is correct: `step-check:MODEL_DIR[,threshold=0.5]`.

The prompted counterpart of `prm:`. Each step is its own question, "Is step k correct given the image? Answer yes or
no.", after the question and the steps before it (`prompts.step_check_messages`); P(step correct) is the probability
of "yes" against "no" as the first answer token (`train.scoring.StepCheckScorer`). A model that was never trained as
a critic can be judged this way without generating free text it may never turn into a verdict.
"""

from __future__ import annotations

from stepcritic.eval.judges.base import Critique
from stepcritic.eval.judges.scored import ScoredJudge


class StepCheckJudge(ScoredJudge):
    kind = "step-check"
    OPTIONS = {**ScoredJudge.OPTIONS, "threshold": float}
    ARTIFACT = "a vision-language model folder"

    def __init__(self, spec: str, target: str | None = None, threshold: float = 0.5, **options):
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must lie in [0, 1], got {threshold}")
        super().__init__(spec, target=target, threshold=threshold, **options)
        self.threshold = threshold

    def fingerprint_extra(self) -> dict:
        from stepcritic.data_prep.prompts import template_hash

        return {**super().fingerprint_extra(), "template": template_hash("step_check")}

    def scorer_class(self):
        from stepcritic.train.scoring import StepCheckScorer

        return StepCheckScorer

    def critique(self, chain: dict, p_correct: list[float]) -> Critique:
        return Critique(chain["chain_id"], verdicts=[p >= self.threshold for p in p_correct],
                        p_incorrect=[1.0 - p for p in p_correct], chain_score=min(p_correct, default=None),
                        extra={"p_correct": p_correct})
