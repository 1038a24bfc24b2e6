"""GRPO of a policy: its outcome reward, the held-out evaluation beside the critic's reward, and the reward-hacking
check on a critic built to be gamed (one that pays for length)."""

import logging
import os

import pytest
from helpers import RECIPES, built_dataset

from stepcritic.train import policy_grpo
from stepcritic.train.config import parse_recipe


@pytest.mark.parametrize("history, fires", [
    ([(0.5, 0.6), (0.6, 0.5), (0.7, 0.5), (0.8, 0.4)], True),     # reward up 3 times, accuracy down
    ([(0.5, 0.6), (0.6, 0.5), (0.7, 0.5)], False),                # too few evaluations for patience 3
    ([(0.5, 0.6), (0.6, 0.5), (0.6, 0.5), (0.8, 0.4)], False),    # the reward stalled once
    ([(0.5, 0.4), (0.6, 0.5), (0.7, 0.5), (0.8, 0.6)], False),    # both rise: learning, not hacking
    ([(0.9, 0.9), (0.5, 0.6), (0.6, 0.5), (0.7, 0.5), (0.8, 0.4)], True),  # only the last window counts
])
def test_reward_hacking_fires_when_the_reward_rises_while_accuracy_falls(history, fires):
    assert policy_grpo.reward_hacking(history, patience=3) is fires


@pytest.fixture(scope="module")
def policy_data(tmp_path_factory):
    return built_dataset(tmp_path_factory, "policy-sft", n_chains=16)


def test_rows_carry_the_gold_answer_and_the_outcome_reward_compares_with_it(policy_data):
    from datasets import load_from_disk

    rows = policy_grpo.as_prompts(load_from_disk(policy_data)["train"])
    row = rows[0]
    assert [m["role"] for m in row["prompt"]] == ["user"] and row["images"] and row["gold_answer"]
    gold = row["gold_answer"]
    completions = [f"The shape is there.\nSo the answer is {gold}.", "So the answer is nothing-like-it.",
                   "I cannot tell.", [{"role": "assistant", "content": f"Final answer: {gold}"}]]
    assert policy_grpo.outcome_reward(completions, gold_answer=[gold] * 4) == [1.0, 0.0, 0.0, 1.0]


def scripted_policy(monkeypatch, gold_of):
    """The held-out answers the policy writes at its k-th evaluation: one more step each time, right only the first
    time (`gold_of`: the gold answer of a prompt's question)."""
    from stepcritic.eval.judges import hf
    from stepcritic.rewards.trl import question_text

    evaluations = []

    def generate_texts(model, processor, prompts, max_new_tokens, temperature=0.0, batch_size=8):
        k = len(evaluations)
        evaluations.append(len(prompts))
        return ["The image shows shapes.\n" * k + "So the answer is "
                + (gold_of[question_text(p.messages)] if k == 0 else "wrong") + "." for p in prompts]

    monkeypatch.setattr(hf, "generate_texts", generate_texts)
    return evaluations


def test_a_critic_that_pays_for_length_trips_the_check(policy_data, tmp_path, monkeypatch, caplog):
    from datasets import load_from_disk

    from stepcritic.rewards.trl import question_text
    from stepcritic.train.run import train

    held_out = policy_grpo.as_prompts(load_from_disk(policy_data)["test"])
    evaluations = scripted_policy(monkeypatch, {question_text(r["prompt"]): r["gold_answer"] for r in held_out})
    out = tmp_path / "run"
    recipe = parse_recipe(os.path.join(RECIPES, "policy-grpo.yaml"), dict(
        dataset_path=policy_data, output_dir=str(out), eval_split="test",
        max_steps=3, eval_steps=1, per_device_train_batch_size=2, num_generations=2, max_completion_length=8,
        logging_steps=1, save_strategy="no", policy_rewards=["outcome", "critic"],
        reward_critic="py:rl_fakes.LengthCritic", max_eval_samples=4))
    with caplog.at_level(logging.WARNING):
        metrics = train(recipe)
    assert len(evaluations) == 5  # on start, after steps 1, 2 and 3, and the run's closing one
    logged = recipe_log(out)
    assert [e["eval_accuracy"] for e in logged][:4] == [1.0, 0.0, 0.0, 0.0]
    rewards = [e["eval_critic_reward"] for e in logged][:4]
    assert all(b > a for a, b in zip(rewards, rewards[1:]))
    assert [e["eval_reward_hacking"] for e in logged][:4] == [0.0, 0.0, 0.0, 1.0]
    assert metrics["eval_reward_hacking"] == 1.0
    assert sum("reward hacking?" in r.getMessage() for r in caplog.records) == 1  # one line, not one per evaluation
    assert '"eval_reward_hacking": 1.0' in (out / "README.md").read_text()


def recipe_log(out) -> list[dict]:
    import json

    state = json.loads((out / "trainer_state.json").read_text())
    return [e for e in state["log_history"] if "eval_accuracy" in e]


def test_held_out_metrics_answer_greedily_and_score_with_the_critic(policy_data):
    from datasets import load_from_disk

    from stepcritic.train import common

    recipe = parse_recipe(os.path.join(RECIPES, "policy-grpo.yaml"), dict(
        dataset_path=policy_data, eval_split="test"))
    model, processor = common.load_model(recipe)
    processor.tokenizer.padding_side = "left"
    rows = policy_grpo.as_prompts(load_from_disk(policy_data)["test"]).select(range(2))
    critic = policy_grpo.critic_reward("py:rl_fakes.LengthCritic", "min")
    model.train()
    first = policy_grpo.held_out_metrics(model, processor, rows, critic, max_new_tokens=6)
    assert model.training  # handed back as it came
    assert first == policy_grpo.held_out_metrics(model, processor, rows, critic, max_new_tokens=6)  # greedy
    assert first["accuracy"] == 0.0 and first["answered"] == 0.0  # random weights state no answer
    assert first["steps"] >= 1 and 0.5 <= first["critic_reward"] < 1  # n / (n + 1) for n >= 1 steps


def test_a_critic_that_requires_an_answer_pays_nothing_for_a_chain_that_states_none():
    plain = policy_grpo.critic_reward("py:rl_fakes.LengthCritic", "min")
    strict = policy_grpo.critic_reward("py:rl_fakes.LengthCritic", "min", requires_answer=True)
    prompts = [[{"role": "user", "content": "Which shape is red?"}]] * 2
    completions = ["The red shape is left.\nIt is a circle.", "The red shape is left.\nSo the answer is circle."]
    given = plain(prompts, completions)
    assert given[0] > 0 and given[1] > 0
    assert strict(prompts, completions) == [0.0, given[1]]
    assert strict.__name__ == plain.__name__ + "_answered"  # TRL logs it under its own name
