"""`StepReward`: a critic (any judge spec that gives step scores) as a reward function for RL of a policy.

    from stepcritic.rewards import StepReward
    critic = StepReward("prm:runs/prm", aggregate="min")
    trainer = GRPOTrainer(model=policy, reward_funcs=[critic, format_reward], ...)

Each completion is cut into steps (`splitting`), becomes a canonical chain with its prompt's question and images
(`trl`), and is judged; its reward is the aggregate of its step scores (`core`: `min` by default, the usual PRM
reduction). The judge is the same object `stepcritic eval` builds from the spec, and the scores are read by the same
rule (`core.scored`), so a reward equals the score `stepcritic eval` reports for the same chain.

Two cases have no score to give, and get a fallback rather than an invented number:
- a completion with no steps (blank text) gets `empty_reward`, 0.0 by default: the lowest a step score can be, so
  writing nothing never pays better than writing something;
- a completion the judge gives no score (every step verdict unknown: a generative critic whose reply could not be
  read, or more steps than a critic scores, `train.limits.MAX_STEPS`) gets `unscored_reward`, None by default.
  TRL 1.16 turns None into NaN: it is left out of this function's logged mean, the completion's total reward is the
  sum of the other reward functions' (`nansum`), and a completion that every reward function leaves at None gets
  no advantage at all. Give a number where the caller cannot take None.
A chain the judge could not judge at all (an API call that failed after its retries, `Critique.failed`) raises
`RuntimeError` (`core.score_chains`): a reward is never made up.
"""

from __future__ import annotations

import re
import statistics

from stepcritic.rewards import core
from stepcritic.rewards.splitting import Split, check_split, split_steps
from stepcritic.rewards.trl import Completion, completions_from_trl
from stepcritic.train.limits import MAX_STEPS

EMPTY_REWARD = 0.0  # a blank answer's reward: the lowest a step score can be (see the module docstring)


class StepReward:
    """A judge as a reward function with TRL's signature (see the module docstring).

    `judge`: a judge spec (anything `eval.judges.registry.build_judge` accepts: `prm:DIR`, `reward:DIR`,
    `hf:DIR,mode=...`, `openai:MODEL,...`, `py:module.Class`) or a built `Judge`. `aggregate`: how step scores
    become one reward (`core.AGGREGATES`). `split`: how a completion is cut into steps (`splitting.split_steps`).
    `batch_size`: chains per call of the judge (None keeps the judge's own).
    """

    def __init__(self, judge, aggregate: str = "min", split: Split = None, batch_size: int | None = None,
                 empty_reward: float = EMPTY_REWARD, unscored_reward: float | None = None):
        from stepcritic.eval.judges.base import Judge

        if aggregate not in core.AGGREGATES:
            raise ValueError(f"aggregate: unknown {aggregate!r}; expected one of {list(core.AGGREGATES)}")
        check_split(split)
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise ValueError(f"batch_size must be a positive whole number or None, got {batch_size!r}")
        for name, value, optional in (("empty_reward", empty_reward, False),
                                      ("unscored_reward", unscored_reward, True)):
            if not (value is None and optional) and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"{name} must be a number{' or None' if optional else ''}, got {value!r}")
        if isinstance(judge, (str, dict)):
            from stepcritic.eval.judges.registry import build_judge

            judge = build_judge(judge)
        elif not isinstance(judge, Judge):
            raise ValueError(f"judge must be a judge spec (e.g. 'prm:runs/prm') or a Judge, got {type(judge).__name__}")
        if batch_size is not None:
            judge.batch_size = batch_size
        self.judge, self.aggregate, self.split = judge, aggregate, split
        self.empty_reward = float(empty_reward)
        self.unscored_reward = None if unscored_reward is None else float(unscored_reward)
        # TRL names the reward's metrics after it (`rewards/<__name__>/mean`)
        kind = re.sub(r"\W+", "_", str(getattr(judge, "kind", "judge"))).strip("_") or "judge"
        self.__name__ = f"stepcritic_{kind}_{aggregate}"

    def __repr__(self) -> str:
        return f"StepReward({self.judge.name!r}, aggregate={self.aggregate!r})"

    # ------------------------------------------------------------------------- TRL's signature

    def __call__(self, prompts, completions, **kwargs) -> list[float | None]:
        """One reward per completion, in order (TRL's reward-function call; `kwargs` are the dataset's columns and
        TRL's extras). Logs the mean number of steps per completion through TRL's `log_metric` when given: a policy
        rewarded by the weakest step can learn to write fewer steps, and this shows it."""
        items = completions_from_trl(prompts, completions, self.split, **kwargs)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and items:
            log_metric(f"rewards/{self.__name__}/steps", statistics.fmean(len(item.steps) for item in items))
        return self.rewards(items)

    def step_scores(self, prompts, completions, **kwargs) -> list[list[float | None]]:
        """Every step's score, per completion (empty for a completion with no steps, or a judge that scores whole
        chains only)."""
        items = completions_from_trl(prompts, completions, self.split, **kwargs)
        return [s.step_scores for s in self.score_completions(items)]

    # ------------------------------------------------------------------------- direct use

    def score(self, question: str, steps_or_text, images=None) -> core.Scored:
        """One answer scored: `steps_or_text` is its steps (a list of strings) or its text (cut by `split`); `images`
        one image or a list (PIL images, bytes, `{"bytes", "path"}`), or None. No steps: `Scored([], None)`."""
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"question must be a non-empty string, got {question!r}")
        if isinstance(steps_or_text, str):
            steps = split_steps(steps_or_text, self.split)
        elif isinstance(steps_or_text, (list, tuple)) and all(isinstance(s, str) for s in steps_or_text):
            steps = list(steps_or_text)
        else:
            raise ValueError(f"steps_or_text must be a string or a list of strings, got {steps_or_text!r:.80}")
        if images is not None and not isinstance(images, (list, tuple)):
            images = [images]
        return self.score_completions([Completion(question.strip(), "\n".join(steps), steps, list(images or []))])[0]

    def score_chains(self, chains: list[dict]) -> list[core.Scored]:
        """Canonical chains (`data_prep.schema`) scored as `stepcritic eval` scores them (`core.score_chains`)."""
        return core.score_chains(self.judge, chains, self.aggregate)

    def rewards(self, items: list[Completion]) -> list[float | None]:
        """Each completion's reward, with the fallbacks of the module docstring."""
        return [self.empty_reward if not item.steps else self.unscored_reward if scored.score is None
                else float(scored.score) for item, scored in zip(items, self.score_completions(items))]

    def score_completions(self, items: list[Completion]) -> list[core.Scored]:
        """Judge the completions that have steps, in one pass (the judge batches them); the others score nothing.
        A completion longer than a critic scores (`MAX_STEPS`) is unscored too: one rambling sample must not stop
        a policy's RL run."""
        judgeable = [bool(item.steps) and len(item.steps) <= MAX_STEPS for item in items]
        chains = [core.make_chain(item.question, item.steps, item.images, chain_id=f"completion-{i}")
                  for i, (item, ok) in enumerate(zip(items, judgeable)) if ok]
        judged = iter(self.score_chains(chains))
        return [next(judged) if ok else core.Scored([None] * len(item.steps), None)
                for item, ok in zip(items, judgeable)]

    def close(self) -> None:
        self.judge.close()
