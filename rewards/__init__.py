"""Critics as rewards: a trained (or prompted) critic scoring a policy's answers, in-process or over HTTP.

`StepReward` wraps any judge spec that gives step scores and is callable with TRL's reward-function signature;
`verl.compute_score` has verl's; `stepcritic serve` answers the same scores over HTTP. All of them read a judge's
critiques through `core.score_chains`, so a score means the same thing wherever it is computed.
"""

from __future__ import annotations

__all__ = ["StepReward", "split_steps"]


def __getattr__(name: str):
    # resolved on first use: importing the package loads no judge, no torch and no transformers
    if name == "StepReward":
        from stepcritic.rewards.step_reward import StepReward

        return StepReward
    if name == "split_steps":
        from stepcritic.rewards.splitting import split_steps

        return split_steps
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
