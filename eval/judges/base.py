"""The judge interface: chains in, one `Critique` per chain out.

Every judge kind (trained model, prompted model, API, baselines) implements `Judge`, so the runner,
the cache and the metrics never care which kind produced a critique.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field


@dataclass
class Critique:
    chain_id: str
    verdicts: list                  # per step: True (correct) / False (incorrect) / None (unknown)
    p_incorrect: list | None = None  # per step probability that the step is incorrect, when the judge has one
    explanations: list | None = None  # per step explanation (for steps judged incorrect), or None
    answer_correct: bool | None = None
    chain_score: float | None = None  # higher = better chain; used for choice ranking and Somers' D
    raw: str | None = None            # the judge's raw output (never contains secrets)
    valid: bool = True                # whether the raw output parsed into a verdict for every step
    error: str | None = None
    extra: dict = field(default_factory=dict)
    # No answer came back for a request of this chain (refused, timed out, an HTTP error after the retries): then
    # nothing was judged, so the runner does not cache it and the next run asks again. An answer that cannot be
    # read is a judgment (valid=False), not a failure.
    failed: bool = False

    def to_json(self) -> dict:
        out = asdict(self)
        if not out["failed"]:  # only failures carry the flag, so cached judgments read as they always have
            del out["failed"]
        return out

    @classmethod
    def from_json(cls, d: dict) -> "Critique":
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__ if k in d})


class RequestFailed(RuntimeError):
    """A request got no answer (refused, timed out, an HTTP error after the retries), so nothing was judged: the
    runner leaves the question unanswered and uncached, and the next run asks it again."""


class Judge:
    """Base class. Subclasses set `kind` and implement `judge_batch`; that is all a `py:` judge needs.

    The runner calls `judge_stream`, which by default runs `judge_batch` on `batch_size` chains at a time.
    A judge that can finish chains one by one (the OpenAI-compatible judge) overrides it, so that every
    judgment is saved as soon as it exists and a killed run loses no more than what was in flight.
    """

    kind = "base"
    batch_size = 8
    needs_images = True  # False lets the runner skip decoding images (baselines)
    # under several ranks each asks this judge its share of the questions; False (a server's judge): rank 0 asks all
    # of them, so the server sees the judge's own `concurrency` whatever the number of ranks
    shards = True
    # options that change speed or placement, not answers: kept out of the fingerprint and of the cache
    # folder's name, so a larger batch or another device reuses the cache. Subclasses add their own.
    RUNTIME_OPTIONS = frozenset({"batch_size", "device"})

    def __init__(self, spec: str, **options):
        self.spec = spec
        self.options = options

    @property
    def name(self) -> str:
        return self.spec

    @property
    def cache_name(self) -> str:
        """The spec without its runtime options: the readable half of the judge's cache folder name."""
        head, *pairs = self.spec.split(",")
        return ",".join([head] + [p for p in pairs if p.partition("=")[0].strip() not in self.RUNTIME_OPTIONS])

    def fingerprint(self) -> str:
        """Hash of everything that determines this judge's output (the cache key): its kind, every option
        but `RUNTIME_OPTIONS`, and `fingerprint_extra`. The one rule for every judge kind."""
        settings = {k: v for k, v in self.options.items() if k not in self.RUNTIME_OPTIONS}
        blob = json.dumps({"kind": self.kind, "settings": settings, "extra": self.fingerprint_extra()},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @classmethod
    def option_choices(cls) -> dict[str, tuple]:
        """The values an option of `OPTIONS` takes, for options that take few (a mode): `--list-judges` shows them."""
        return {}

    def fingerprint_extra(self) -> dict:
        """Subclasses add what the spec does not show (prompt template text, model weights hash...)."""
        return {}

    def judge_batch(self, chains: list[dict]) -> list[Critique]:
        raise NotImplementedError

    def judge_stream(self, chains: Iterable[dict]) -> Iterator[tuple[int, Critique]]:
        """`(index, critique)` for every chain, `index` being its position in `chains`, as each is finished.

        Critiques may come in any order. `chains` is read lazily (images are decoded as they are needed).
        The consumer saves each critique before asking for the next one, so an override should not hold
        back finished critiques, nor start more work than it is willing to lose when the process is killed.
        This default judges `batch_size` chains at a time with `judge_batch` and yields them in order.
        """
        chains = iter(chains)
        start = 0
        while batch := list(itertools.islice(chains, max(1, self.batch_size))):
            for offset, critique in enumerate(self.judge_batch(batch)):
                yield start + offset, critique
            start += len(batch)

    def pick_best(self, chains: list[dict]) -> int | None:
        """Listwise choice (ShiftCheck over chains): index of the best chain in the order shown, or None.

        Score-based judges pick the highest chain score; on ties the earliest position wins, which is
        exactly the kind of position preference ShiftCheck exposes. Generative judges override this
        with a "which chain is best?" prompt.
        """
        return best_index([c.chain_score for c in self.judge_batch(chains)])

    def verifier(self, task: str) -> "Judge | None":
        """The judge that answers MiCEval's verifier prompt for `task` (`stepcritic eval --tasks verifier`), or None
        when this judge cannot answer one (score-based judges, baselines): its verifier accuracies are then "–".

        The returned judge's critique of a chain carries, in `extra["labels"]`, the label read for each step (None
        where the task was not asked or the reply names no label; for the chain-level task, a one-item list), as a
        generative judge in mode=verifier writes it. The task applies where `prompts.verifier_target` gives a label.
        Its `fingerprint` keys the cache of its answers. A `py:` judge can override this to answer them.
        """
        return None

    def picks_by_chain_score(self) -> bool:
        """Whether `pick_best` is the highest of this judge's own chain scores (it is not overridden). Then the
        runner answers ShiftCheck from the chain scores of the critiques it already has, instead of scoring
        every chain again under every shift. A judge whose score of a chain depends on the other chains shown
        with it (a listwise judge) overrides `pick_best`."""
        return type(self).pick_best is Judge.pick_best

    def close(self) -> None:
        pass


def best_index(scores: list) -> int | None:
    """The position of the highest score, the earliest on ties (the position preference ShiftCheck exposes);
    None when no chain has a score."""
    if all(s is None for s in scores):
        return None
    best = max(s for s in scores if s is not None)
    return next(i for i, s in enumerate(scores) if s == best)
