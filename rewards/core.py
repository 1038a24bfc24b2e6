"""From a judge's critiques to rewards: one score per step and one per chain, the rule every reward path shares.

A step's score is what `eval.scores.step_scores` reads from a critique (1 - P(incorrect), else the verdict as 1/0,
None when the judge gives none), so a reward equals what `stepcritic eval` reports for the same chain. A chain's
score aggregates its step scores:
- `min`: the weakest step, Lightman et al. (2023), Sec. 2.6, the usual PRM reduction;
- `mean`, `prod`: over the steps that have a score;
- `last`: the final step's score (None when it has none).
A judge that scores whole chains and no steps (`reward:`, an outcome reward model) gives its chain score under
every aggregate, and no step scores.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

AGGREGATES = ("min", "mean", "last", "prod")


@dataclass
class Scored:
    step_scores: list        # per step: a score in [0, 1], higher = more likely correct, or None
    score: float | None      # the chain's score under the aggregate; None when the judge gives nothing to read


def aggregate_steps(step_scores: list, aggregate: str) -> float | None:
    if aggregate not in AGGREGATES:
        raise ValueError(f"unknown aggregate {aggregate!r}; expected one of {list(AGGREGATES)}")
    if aggregate == "last":
        return step_scores[-1] if step_scores else None
    known = [s for s in step_scores if s is not None]
    if not known:
        return None
    return {"min": min, "mean": statistics.fmean, "prod": math.prod}[aggregate](known)


def scored(critique, aggregate: str = "min") -> Scored:
    """A critique read as rewards (see the module docstring)."""
    from stepcritic.eval.scores import step_scores

    pred = critique.to_json()
    steps = step_scores(pred)
    if all(s is None for s in steps) and critique.chain_score is not None:
        return Scored([], float(critique.chain_score))
    return Scored(steps, aggregate_steps(steps, aggregate))


def score_chains(judge, chains: list[dict], aggregate: str = "min") -> list[Scored]:
    """Every chain scored by `judge` (any `eval.judges` Judge), in order.

    A chain the judge could not judge (an API call that failed after its retries) raises `RuntimeError` naming it:
    a reward must never be made up."""
    out: list[Scored | None] = [None] * len(chains)
    for index, critique in judge.judge_stream(chains):
        if critique.failed:
            raise RuntimeError(f"chain {chains[index].get('chain_id')!r} was not judged: {critique.error}")
        out[index] = scored(critique, aggregate)
    return out


def make_chain(question: str, steps: list[str], images: list | None = None, chain_id: str = "chain") -> dict:
    """A canonical chain (`data_prep.schema`) from a question, its steps' texts and its images (any value
    `schema.load_image_bytes` reads: bytes, a PIL image, a data URL, base64; a path only where the caller has
    checked it), unlabelled. Raises `schema.SchemaError` naming `chain_id` and the field."""
    from stepcritic.data_prep.schema import validate_chain

    record = {"chain_id": chain_id, "question": question, "steps": [{"text": s} for s in steps],
              "image": list(images) if images else None}
    return validate_chain(record, where=chain_id)
