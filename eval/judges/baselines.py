"""Reference judges every trained critic must beat, and the text-only ablation of any judge.

- `always-correct`: the "reluctance to say no" critic; every step and the answer judged correct.
- `random`: flags each step incorrect with probability `rate`, seeded per chain so the result does not
  depend on batch order or batch size.
- `majority`: predicts the majority step class everywhere. Its class comes from `fit(train_chains)`,
  or from `prior` (the share of incorrect steps) when given; with neither it predicts "correct", which
  is the majority in every step-annotated set we use (MiCEval, VISCO).
- `text-only`: wraps another judge and swaps every image for a blank one of the same size, measuring
  how much the judge actually looks at the image.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Iterator

from stepcritic.data_prep.images import to_rgb
from stepcritic.eval.judges.base import Critique, Judge


class AlwaysCorrectJudge(Judge):
    kind = "always-correct"
    OPTIONS: dict = {}
    needs_images = False
    batch_size = 256

    def judge_batch(self, chains: list[dict]) -> list[Critique]:
        return [Critique(c["chain_id"], [True] * len(c["steps"]), p_incorrect=[0.0] * len(c["steps"]),
                         answer_correct=True, chain_score=1.0) for c in chains]


class RandomJudge(Judge):
    kind = "random"
    OPTIONS = {"rate": float, "seed": int}
    needs_images = False
    batch_size = 256

    def __init__(self, spec: str, rate: float = 0.5, seed: int = 0, **options):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be between 0 and 1, got {rate}")
        super().__init__(spec, rate=rate, seed=seed, **options)
        self.rate, self.seed = rate, seed

    def _rng(self, chain_id: str) -> random.Random:
        digest = hashlib.sha256(f"{self.seed}\x00{chain_id}".encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))

    def judge_batch(self, chains: list[dict]) -> list[Critique]:
        out = []
        for c in chains:
            rng = self._rng(c["chain_id"])
            verdicts = [rng.random() >= self.rate for _ in c["steps"]]
            answer_correct = rng.random() >= self.rate
            out.append(Critique(c["chain_id"], verdicts, p_incorrect=[self.rate] * len(verdicts),
                                answer_correct=answer_correct,
                                # a random score: ranking chains by it is the chance level of choice metrics
                                chain_score=rng.random()))
        return out


class MajorityJudge(Judge):
    kind = "majority"
    OPTIONS = {"prior": float}
    needs_images = False
    batch_size = 256

    def __init__(self, spec: str, prior: float | None = None, **options):
        if prior is not None and not 0.0 <= prior <= 1.0:
            raise ValueError(f"prior (share of incorrect steps) must be between 0 and 1, got {prior}")
        super().__init__(spec, **({"prior": prior} if prior is not None else {}), **options)
        self.p_incorrect = 0.0 if prior is None else prior

    def judge_batch(self, chains: list[dict]) -> list[Critique]:
        correct = self.p_incorrect <= 0.5
        return [Critique(c["chain_id"], [correct] * len(c["steps"]), p_incorrect=[self.p_incorrect] * len(c["steps"]),
                         answer_correct=correct, chain_score=1.0 - self.p_incorrect) for c in chains]


def blank_like(image):
    """A white RGB image of the same size as `image`."""
    from PIL import Image  # only the blank-image judge draws

    return Image.new("RGB", to_rgb(image).size, "white")


class TextOnlyJudge(Judge):
    """Any judge, shown a blank image of the same size instead of the real one."""

    kind = "text-only"

    def __init__(self, spec: str, inner: Judge):
        super().__init__(spec)
        self.inner = inner
        self.batch_size = inner.batch_size
        self.needs_images = inner.needs_images
        self.RUNTIME_OPTIONS = inner.RUNTIME_OPTIONS  # the options in this spec are the inner judge's

    def fingerprint_extra(self) -> dict:
        return {"inner": self.inner.fingerprint()}

    def _blanked(self, chains: list[dict]) -> list[dict]:
        if not self.inner.needs_images:
            return chains
        return [dict(c, image=blank_like(c["image"]), extra_images=[blank_like(i) for i in c.get("extra_images") or []])
                for c in chains]

    def judge_batch(self, chains: list[dict]) -> list[Critique]:
        return self.inner.judge_batch(self._blanked(chains))

    def judge_stream(self, chains: Iterable[dict]) -> Iterator[tuple[int, Critique]]:
        return self.inner.judge_stream(self._blanked([c])[0] for c in chains)  # the inner judge's own pace

    def pick_best(self, chains: list[dict]) -> int | None:
        return self.inner.pick_best(self._blanked(chains))

    def picks_by_chain_score(self) -> bool:
        return self.inner.picks_by_chain_score()

    def verifier(self, task: str) -> Judge | None:
        inner = self.inner.verifier(task)
        return None if inner is None else TextOnlyJudge(f"text-only:{inner.spec}", inner)

    def close(self) -> None:
        self.inner.close()
