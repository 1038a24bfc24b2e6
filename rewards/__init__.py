"""Critics as rewards: a trained (or prompted) critic scoring a policy's answers, in-process or over HTTP.

`StepReward` wraps any judge spec that gives step scores and is callable with TRL's reward-function signature;
`verl.compute_score` has verl's; `stepcritic serve` answers the same scores over HTTP. All of them read a judge's
critiques through `core.score_chains`, so a score means the same thing wherever it is computed.
"""
