"""examples/grpo_with_stepcritic_reward.py: TRL's GRPOTrainer runs 2 steps with the tiny PRM as a reward; the critic
is called with what the policy sampled (and, for a VLM policy, the row's pictures), and what it returns is what TRL
logs under its name."""

import importlib.util
import os

import pytest

from stepcritic.rewards import StepReward
from stepcritic.rewards.trl import completion_text, question_text

pytestmark = pytest.mark.usefixtures("one_torch_thread", "private_tiny_cache")

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                       "grpo_with_stepcritic_reward.py")


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("grpo_with_stepcritic_reward", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(example, tiny_prm, tmp_path, monkeypatch, policy):
    """Run the example, recording every call of the critic: its arguments and the rewards it returned."""
    calls = []
    real_call = StepReward.__call__

    def recording_call(self, prompts, completions, **kwargs):
        rewards = real_call(self, prompts, completions, **kwargs)
        calls.append({"prompts": prompts, "completions": completions, "kwargs": kwargs, "rewards": rewards})
        return rewards

    monkeypatch.setattr(StepReward, "__call__", recording_call)
    args = example.make_parser().parse_args(["--critic", f"prm:{tiny_prm}", "--policy", policy,
                                             "--out", str(tmp_path / "run"), "--max-completion-length", "8"])
    return example.main(args), calls


@pytest.mark.parametrize("policy", ["tiny-text", "tiny-vlm"])
def test_the_critic_rewards_the_policys_samples_and_trl_logs_them(example, tiny_prm, tmp_path, monkeypatch, policy):
    trainer, calls = run(example, tiny_prm, tmp_path, monkeypatch, policy)
    name = "stepcritic_prm_min"
    assert len(calls) == 2  # one generation per optimiser step, every completion scored

    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    questions = {question_text(row["prompt"]) for row in example.dataset(with_images=policy == "tiny-vlm")}
    for call in calls:
        assert len(call["completions"]) == 4  # 2 questions x 2 samples
        # the completions are the policy's: the text its sampled token ids decode to
        decoded = tokenizer.batch_decode(call["kwargs"]["completion_ids"], skip_special_tokens=True)
        assert [completion_text(c) for c in call["completions"]] == decoded
        assert {question_text(p) for p in call["prompts"]} <= questions
        assert all(r is not None and 0.0 <= r <= 1.0 for r in call["rewards"])

    logged = [entry for entry in trainer.state.log_history if f"rewards/{name}/mean" in entry]
    assert len(logged) == 2
    for entry, call in zip(logged, calls):
        assert entry[f"rewards/{name}/mean"] == pytest.approx(sum(call["rewards"]) / 4, abs=1e-6)
        assert entry[f"rewards/{name}/steps"] >= 1
        assert "rewards/length_reward/mean" in entry
        # TRL sums the rewards: the critic's share is in the total it optimised
        assert entry["reward"] == pytest.approx(entry[f"rewards/{name}/mean"] + entry["rewards/length_reward/mean"],
                                                abs=1e-5)

    if policy == "tiny-vlm":  # the row's picture went to the policy and to the critic alike
        for call in calls:
            images = call["kwargs"]["images"]
            assert len(images) == 4 and all(len(row) == 1 and hasattr(row[0], "size") for row in images)
            shown = [part["image"] for p in call["prompts"] for part in p[-1]["content"] if part["type"] == "image"]
            assert [im.tobytes() for im in shown] == [row[0].tobytes() for row in images]
    else:
        assert all("images" not in call["kwargs"] for call in calls)
    # a constant reward (a fallback, a misread score) would give GRPO nothing to learn from
    rewards = [r for call in calls for r in call["rewards"]]
    assert len(set(rewards)) > 1

