"""GRPO of the critic: the verifiable reward, the prompt rows, and a 2-step run on the tiny model."""

import json
import os

import pytest
from helpers import RECIPES, built_dataset, chains

from stepcritic.data_prep import critique
from stepcritic.train import grpo
from stepcritic.train.config import parse_recipe


def as_completion(text):
    return [{"role": "assistant", "content": text}]


def test_critique_reward_counts_agreements_and_penalises_garbage():
    gold, answer = [True, False, True], False
    perfect = critique.format_critique({"steps": [{"step": 1, "correct": True}, {"step": 2, "correct": False},
                                                  {"step": 3, "correct": True}], "answer_correct": False})
    one_wrong = perfect.replace('"step": 2, "correct": false', '"step": 2, "correct": true')
    missing = json.dumps({"steps": [{"step": 1, "correct": True}], "answer_correct": False})
    completions = [as_completion(t) for t in (perfect, one_wrong, missing, "the steps look fine to me")]
    rewards = grpo.critique_reward(completions, gold_verdicts=[gold] * 4, gold_answer_correct=[answer] * 4)
    assert rewards == pytest.approx([1.0, 0.75, 0.5, grpo.UNPARSEABLE_REWARD])
    assert grpo.critique_reward([perfect], [gold], [answer]) == [1.0]  # plain-text completions too


def test_verifier_reward():
    rewards = grpo.verifier_reward(["Correct.", "incorrect", "maybe"], label=["correct"] * 3,
                                   task=["logic_correctness"] * 3)
    assert rewards == [1.0, 0.0, grpo.UNPARSEABLE_REWARD]


@pytest.fixture(scope="module")
def critique_data(tmp_path_factory):
    return built_dataset(tmp_path_factory, "critique-sft")


def test_prompt_rows_carry_the_gold_labels(critique_data):
    from datasets import load_from_disk

    rows = grpo.as_prompts(load_from_disk(critique_data)["train"], "critique-sft")
    row = rows[0]
    assert [m["role"] for m in row["prompt"]] == ["user"] and row["images"]
    source = next(c for c in chains(8) if c["chain_id"] == row["chain_id"])
    assert row["gold_verdicts"] == [s["correct"] for s in source["steps"]]
    assert row["gold_answer_correct"] == source["answer_correct"]


def test_two_grpo_steps_pass_gold_labels_to_the_reward_and_train(critique_data, tmp_path, monkeypatch):
    from stepcritic.train.loading import load_critic
    from stepcritic.train.run import train

    calls = []
    real_reward = grpo.critique_reward

    def recording_reward(completions, gold_verdicts, gold_answer_correct, **kwargs):
        real = real_reward(completions, gold_verdicts, gold_answer_correct)
        calls.append((gold_verdicts, real, kwargs))
        # A random critic only writes garbage (equal rewards, zero advantage, no gradient): a tie-breaker on
        # length gives GRPO a signal, so the test can see the update reach the weights.
        return [r + 0.01 * len(grpo.completion_text(c)) for r, c in zip(real, completions)]

    monkeypatch.setattr(grpo, "critique_reward", recording_reward)
    out = tmp_path / "run"
    recipe = parse_recipe(os.path.join(RECIPES, "grpo.yaml"), dict(
        dataset_path=critique_data, output_dir=str(out), max_steps=2, per_device_train_batch_size=2,
        num_generations=2, max_completion_length=12, logging_steps=1, learning_rate=1e-2, report_to="none",
        # a random model: the pretrained base may sample the same words twice
        model_name_or_path="stepcritic:tiny/llava"))
    train(recipe)
    assert calls and all(isinstance(g[0], list) and isinstance(g[0][0], bool) for g, _, _ in calls)
    assert all(r == grpo.UNPARSEABLE_REWARD for _, real, _ in calls for r in real)  # untrained: no JSON yet
    assert "images" in calls[0][2]

    model, _ = load_critic(str(out))
    assert any(p.abs().sum() > 0 for n, p in model.named_parameters() if "lora_B" in n)
