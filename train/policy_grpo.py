"""`method: grpo` on `policy-sft` rows: reinforcement learning of a policy, with a critic as its reward.

The prompts are the rows' user turns (question and image); each row's gold answer is read off its assistant turn (a
clean chain ends by stating it) and handed to the rewards as the `gold_answer` column. Rewards, by `policy_rewards`:
- `outcome`: 1 when the sampled chain's answer is the gold answer (`data_prep.answers`), else 0: a verifiable
  reward, the only place the gold answer goes;
- `critic`: `reward_critic` (any judge spec that gives step scores) through `rewards.StepReward`, its step scores
  aggregated by `reward_aggregate` (`min` by default: the sum form lets a policy farm many small rewards, PURE,
  arXiv 2504.15275); with `critic_requires_answer`, 0 for a completion that states no answer.
Both together are summed by TRL (`reward_weights` weighs them).

Every evaluation (`eval_strategy`, and `eval_on_start` for the starting policy) writes greedy answers to the held-out
questions and logs, side by side, their true answer accuracy and the critic's mean reward for them. A critic can be
gamed: when its reward rose at each of the last `hacking_patience` evaluations while accuracy fell over them, the
run logs one warning line and keeps `eval_reward_hacking` at 1 for the rest of the run (its model card shows it).
"""

from __future__ import annotations

import statistics

from stepcritic.data_prep import answers, contract
from stepcritic.train import common, modality
from stepcritic.train.grpo import completion_text


def gold_answer_row(row: dict) -> dict:
    """A policy-sft row as a GRPO row: its user turn as the prompt, the answer its chain states as `gold_answer`."""
    *prompt, chain = row["messages"]
    gold = answers.answer_of_text(completion_text([chain]))
    if gold is None:
        raise contract.DataContractError(f"policy-sft row {row.get('chain_id')!r}: messages: the assistant turn "
                                         "states no answer (a policy's chain ends with 'So the answer is ...')")
    return {"prompt": prompt, "gold_answer": gold}


def as_prompts(dataset):
    if dataset is None:
        return None
    return dataset.map(gold_answer_row, remove_columns=["messages"], desc="prompts for GRPO")


def answer_right(text: str, gold: str) -> bool:
    return answers.answers_match(answers.answer_of_text(text), gold)


def outcome_reward(completions, gold_answer, **_) -> list[float]:
    """1 for a completion whose stated answer is the gold answer, else 0 (no answer stated is wrong)."""
    return [float(answer_right(completion_text(c), gold)) for c, gold in zip(completions, gold_answer)]


def reward_hacking(history: list[tuple[float, float]], patience: int) -> bool:
    """Whether the critic's reward rose at each of the last `patience` evaluations while held-out accuracy ended
    lower than before them. `history`: (critic reward, accuracy) per evaluation, in order."""
    if patience < 1 or len(history) <= patience:
        return False
    window = history[-(patience + 1):]
    rewards = [reward for reward, _ in window]
    return all(b > a for a, b in zip(rewards, rewards[1:])) and window[-1][1] < window[0][1]


def critic_reward(spec: str, aggregate: str, requires_answer: bool = False):
    """The critic's reward through `StepReward`; with `requires_answer`, 0 for a completion that states no answer
    (whatever its steps score), read by `answers.answer_of_text` as the outcome reward reads it, no gold needed."""
    from stepcritic.rewards.step_reward import StepReward

    critic = StepReward(spec, aggregate=aggregate)
    if not requires_answer:
        return critic

    def reward(prompts, completions, **kwargs) -> list[float | None]:
        given = critic(prompts, completions, **kwargs)
        return [0.0 if answers.answer_of_text(completion_text(c)) is None else r for r, c in zip(given, completions)]

    reward.__name__ = f"{critic.__name__}_answered"
    return reward


def held_out_metrics(model, processor, rows, critic, max_new_tokens: int, batch_size: int = 16) -> dict:
    """Greedy answers to the held-out `rows` (GRPO rows: `prompt`, `images`, `gold_answer`): their accuracy, the
    share that state an answer, their mean steps, and the critic's mean reward for them (None without a critic or
    when it scores none)."""
    from stepcritic.eval.judges.hf import generate_texts
    from stepcritic.eval.judges.prompting import Prompt
    from stepcritic.rewards.splitting import split_steps

    prompts = [Prompt(messages=row["prompt"], images=list(row.get("images") or [])) for row in rows]
    training = model.training
    model.eval()
    try:
        texts = generate_texts(model, processor, prompts, max_new_tokens, batch_size=batch_size)
    finally:
        model.train(training)
    golds = [row["gold_answer"] for row in rows]
    metrics = {"accuracy": statistics.fmean(answer_right(t, g) for t, g in zip(texts, golds)),
               "answered": statistics.fmean(answers.answer_of_text(t) is not None for t in texts),
               "steps": statistics.fmean(len(split_steps(t)) for t in texts), "critic_reward": None}
    if critic is not None:
        given = [r for r in critic([row["prompt"] for row in rows], texts,
                                   images=[list(row.get("images") or []) for row in rows]) if r is not None]
        metrics["critic_reward"] = statistics.fmean(given) if given else None
    return metrics


def trainer_class():
    from trl import GRPOTrainer

    class PolicyGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer whose evaluation is the policy's greedy held-out accuracy beside the critic's reward."""

        def __init__(self, *args, processor=None, held_out=None, critic=None, patience: int = 3, **kwargs):
            super().__init__(*args, **kwargs)
            self.processor, self.held_out, self.critic, self.patience = processor, held_out, critic, patience

        def history(self) -> list[tuple[float, float]]:
            # from the log history, which checkpoints keep: a resumed run goes on checking where it stopped
            return [(e["eval_critic_reward"], e["eval_accuracy"]) for e in self.state.log_history
                    if e.get("eval_critic_reward") is not None and "eval_accuracy" in e]

        def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
            rows = self.held_out if eval_dataset is None else eval_dataset
            model = self.accelerator.unwrap_model(self.model)
            found = held_out_metrics(model, self.processor, rows, self.critic, self.args.max_completion_length)
            metrics = {f"{metric_key_prefix}_{k}": v for k, v in found.items() if v is not None}
            flagged = any(e.get(f"{metric_key_prefix}_reward_hacking") for e in self.state.log_history)
            history = self.history() + ([(found["critic_reward"], found["accuracy"])]
                                        if found["critic_reward"] is not None else [])
            if not flagged and reward_hacking(history, self.patience):
                flagged = True
                common.logger.warning(
                    "reward hacking? the critic's held-out reward rose at each of the last %d evaluations "
                    "(%.3f -> %.3f) while held-out accuracy fell (%.3f -> %.3f), at step %d", self.patience,
                    history[-self.patience - 1][0], history[-1][0], history[-self.patience - 1][1], history[-1][1],
                    self.state.global_step)
            metrics[f"{metric_key_prefix}_reward_hacking"] = float(flagged)
            self.log(metrics)
            self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
            return metrics

    return PolicyGRPOTrainer


def build_trainer(recipe, model, processor, train_data, eval_data):
    args = recipe.script_args
    critic = (critic_reward(args.reward_critic, args.reward_aggregate, args.critic_requires_answer)
              if args.reward_critic else None)
    funcs = [outcome_reward if name == "outcome" else critic for name in args.policy_rewards]
    model = common.prepare_model(recipe, model)
    tokenizer = getattr(processor, "tokenizer", processor)
    tokenizer.padding_side = "left"  # see `grpo.build_trainer`; generation pads on the left too
    held_out = as_prompts(eval_data)
    return trainer_class()(model=model, reward_funcs=funcs, args=recipe.training_args,
                           train_dataset=as_prompts(train_data), eval_dataset=held_out,
                           processing_class=modality.trainer_processing_class(processor),
                           processor=processor, held_out=held_out, critic=critic, patience=args.hacking_patience)
