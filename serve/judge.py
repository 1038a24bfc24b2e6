"""The judge behind the server: built from its spec, sized to the batcher, loaded before the first request, and
scored through `rewards.core.score_chains`, the one rule every reward path shares.

The judge's `batch_size` is set to `--max-batch`, so one batch of the batcher is one `judge_batch` call (one forward
pass) rather than several; it is a runtime option (`Judge.RUNTIME_OPTIONS`), so it changes no score and no
fingerprint. A model loads when its judge first scores, which would make the first request wait seconds and turn a
broken model folder into an error per request; the server loads it at start instead.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JudgeInfo:
    spec: str
    fingerprint: str


def build(spec: str, max_batch: int):
    """The judge of `spec` (an `EvalError`, a `UserError`, naming the spec when it cannot be built), unloaded."""
    from stepcritic.eval.judges.registry import build_judge

    judge = build_judge(spec)
    for layer in _layers(judge):
        layer.batch_size = max_batch
    return judge


def load(judge) -> JudgeInfo:
    """Load the judge's model now (a trained scoring model; other kinds load on first use) and describe it."""
    from stepcritic.eval.judges.scored import ScoredJudge

    for layer in _layers(judge):
        if isinstance(layer, ScoredJudge):
            layer.scorer  # noqa: B018 -- the property loads the model
    return JudgeInfo(judge.spec, judge.fingerprint())


def scorer(judge):
    """`score(chains, aggregate) -> list[Scored]` for the batcher's worker thread."""
    from stepcritic.rewards.core import score_chains

    def score(chains: list, aggregate: str) -> list:
        return score_chains(judge, chains, aggregate)

    return score


def _layers(judge):
    """The judge and those it wraps (`text-only:` wraps another)."""
    while judge is not None:
        yield judge
        judge = getattr(judge, "inner", None)
