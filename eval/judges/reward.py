"""A trained outcome reward model as a judge: `reward:MODEL_DIR`.

It scores whole chains (`Critique.chain_score`, higher = better) and gives no step verdicts, so it takes
part in choice ranking and Somers' D but not in step-level F1.
"""

from __future__ import annotations

from stepcritic.eval.judges.artifacts import pick_device, weights_digest
from stepcritic.eval.judges.base import Critique, Judge


class RewardJudge(Judge):
    kind = "reward"
    needs_images = True
    OPTIONS = {"batch_size": int, "dtype": str, "device": str}

    def __init__(self, spec: str, target: str | None = None, batch_size: int = 8, dtype: str = "float32",
                 device: str | None = None):
        if not target:
            raise ValueError("the reward judge needs a trained reward model folder: reward:MODEL_DIR")
        super().__init__(spec, target=target, batch_size=batch_size, dtype=dtype, device=device)
        self.target, self.batch_size, self.dtype, self.device = target, batch_size, dtype, device
        self._scorer = None

    def fingerprint_extra(self) -> dict:
        return {"weights": weights_digest(self.target)}

    @property
    def scorer(self):
        if self._scorer is None:
            from stepcritic.train.reward import RewardScorer

            self._scorer = RewardScorer.from_pretrained(self.target, dtype=self.dtype, device=pick_device(self.device),
                                                        batch_size=self.batch_size)
        return self._scorer

    def judge_batch(self, chains: list[dict]) -> list[Critique]:
        scores = self.scorer.score(chains)
        return [Critique(chain["chain_id"], verdicts=[None] * len(chain["steps"]), chain_score=score)
                for chain, score in zip(chains, scores)]
