"""The most steps a chain may have for a critic to score it: one rule for `stepcritic eval`, the Python scorers and
`stepcritic serve`. Stdlib only: `stepcritic serve --help` shows it.

A critic reads a chain's steps in one context, so the context grows with the chain. Scoring costs time linear in the
steps (`train.scoring`), but a chain of hundreds of steps is far past what benchmarks hold (tens of steps) and the
contexts critics are trained on, so it is refused in one line naming the chain rather than scored for minutes into a
context the critic never saw. `stepcritic serve --max-steps` defaults to this limit and may lower it, not raise it.
"""

from __future__ import annotations

from stepcritic.errors import UserError

MAX_STEPS = 256


class TooManySteps(UserError, ValueError):
    """A chain with more steps than a critic scores; the message names the chain and its `steps` field."""


def check_steps(chains, limit: int = MAX_STEPS) -> None:
    """Refuse the first chain with more than `limit` steps (one line: the chain, the field, the count)."""
    for chain in chains:
        n = len(chain["steps"])
        if n > limit:
            raise TooManySteps(f"chain {chain.get('chain_id')!r}: steps: {n} steps, more than the {limit} a critic "
                               "scores (stepcritic.train.limits.MAX_STEPS)")
