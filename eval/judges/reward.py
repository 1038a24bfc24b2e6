"""A trained outcome reward model as a judge: `reward:MODEL_DIR`.

It scores whole chains (`Critique.chain_score`, higher = better) and gives no step verdicts, so it takes
part in choice ranking and Somers' D but not in step-level F1.
"""

from __future__ import annotations

from stepcritic.eval.judges.base import Critique
from stepcritic.eval.judges.scored import ScoredJudge


class RewardJudge(ScoredJudge):
    kind = "reward"
    ARTIFACT = "a trained reward model folder"

    def scorer_class(self):
        from stepcritic.train.scoring import RewardScorer  # torch and transformers, when the judge loads its model

        return RewardScorer

    def critique(self, chain: dict, score: float) -> Critique:
        return Critique(chain["chain_id"], verdicts=[None] * len(chain["steps"]), chain_score=score)
