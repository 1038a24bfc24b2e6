"""What the judges over a trained scoring model share (`prm:`, `reward:`): the model folder, its options, the
fingerprint and the scorer loaded on first use.

The training side owns the scorers (`train.scoring.PRMScorer`, `train.scoring.RewardScorer`: chains in, one score
per chain out). A judge here differs from another only in which scorer it loads and how it reads a chain's
score into a `Critique`; everything else is written once, so the two cannot drift apart.
"""

from __future__ import annotations

from stepcritic.eval.judges.artifacts import pick_device, weights_digest
from stepcritic.eval.judges.base import Critique, Judge


class ScoredJudge(Judge):
    """Base of the score-based judges. Subclasses implement `scorer_class` and `critique`."""

    needs_images = True
    OPTIONS = {"batch_size": int, "dtype": str, "device": str}
    ARTIFACT = "a trained model folder"  # what the target must be, for the error message

    def __init__(self, spec: str, target: str | None = None, batch_size: int = 8, dtype: str = "float32",
                 device: str | None = None, **options):
        if not target:
            raise ValueError(f"the {self.kind} judge needs {self.ARTIFACT}: {self.kind}:MODEL_DIR")
        super().__init__(spec, target=target, batch_size=batch_size, dtype=dtype, device=device, **options)
        self.target, self.batch_size, self.dtype, self.device = target, batch_size, dtype, device
        self._scorer = None

    def fingerprint_extra(self) -> dict:
        return {"weights": weights_digest(self.target)}

    def scorer_class(self):
        """The training side's scorer class; imported here, on first use, so checking the cache loads no model."""
        raise NotImplementedError

    @property
    def scorer(self):
        if self._scorer is None:
            self._scorer = self.scorer_class().from_pretrained(self.target, dtype=self.dtype,
                                                               device=pick_device(self.device),
                                                               batch_size=self.batch_size)
        return self._scorer

    def critique(self, chain: dict, score) -> Critique:
        """One chain's Critique from what the scorer returned for it."""
        raise NotImplementedError

    def judge_batch(self, chains: list[dict]) -> list[Critique]:
        return [self.critique(chain, score) for chain, score in zip(chains, self.scorer.score(chains))]
