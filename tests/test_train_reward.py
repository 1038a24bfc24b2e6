"""The VLM outcome reward model: images reach the vision tower, 2 Bradley-Terry steps train, saving round-trips."""

import os

import pytest
import torch
from helpers import RECIPES, built_dataset, chains

from stepcritic.train import common
from stepcritic.train.config import parse_recipe
from stepcritic.train.reward import PairCollator, VLMRewardModel
from stepcritic.train.scoring import RewardScorer


@pytest.fixture(scope="module")
def outcome_data(tmp_path_factory):
    return built_dataset(tmp_path_factory, "outcome-rm")


def reward_recipe(data, out, **overrides):
    values = dict(dataset_path=data, output_dir=str(out), max_steps=2, per_device_train_batch_size=2,
                  logging_steps=1, report_to="none", learning_rate=1e-2, **overrides)
    return parse_recipe(os.path.join(RECIPES, "reward.yaml"), values)


def test_pairs_go_through_the_vision_tower_and_loss_is_bradley_terry(outcome_data, tmp_path):
    from stepcritic.train import reward

    recipe = reward_recipe(outcome_data, tmp_path)
    model, processor = common.load_model(recipe)
    train, _ = common.load_splits(recipe)
    trainer = reward.build_trainer(recipe, model, processor, train, None)
    batch = PairCollator(processor)([train[0], train[1]])
    assert batch["input_ids"].shape[0] == 4 and batch["pixel_values"].shape[0] == 4  # 2 chosen + 2 rejected

    reward_model = trainer.model
    seen = []
    hook = reward_model.decoder().vision_tower.register_forward_hook(lambda m, args, out: seen.append(args))
    rewards = reward_model(**batch)
    hook.remove()
    assert seen and rewards.shape == (4,)

    loss = trainer.compute_loss(reward_model, batch).item()
    chosen, rejected = rewards.detach().chunk(2)
    expected = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
    expected += recipe.training_args.center_rewards_coefficient * ((chosen + rejected) ** 2).mean()
    assert loss == pytest.approx(expected.item(), rel=1e-5)


def test_last_real_token_is_read_whatever_the_padding(outcome_data, tmp_path):
    recipe = reward_recipe(outcome_data, tmp_path)
    model, processor = common.load_model(recipe)
    reward_model = VLMRewardModel(model).eval()
    scorer = RewardScorer(reward_model, processor, batch_size=8)
    batch = chains(4)
    together = scorer.score(batch)
    alone = [scorer.score([c])[0] for c in batch]
    assert together == pytest.approx(alone, abs=1e-4)


@pytest.mark.parametrize("use_peft", [False, True], ids=["full", "lora"])
def test_two_reward_steps_train_head_and_backbone_and_reload_identically(outcome_data, tmp_path, use_peft):
    from stepcritic.eval.judges.registry import make_judge
    from stepcritic.train import reward

    out = str(tmp_path / "run")
    recipe = reward_recipe(outcome_data, out, use_peft=use_peft, lora_r=4)
    model, processor = common.load_model(recipe)
    train, _ = common.load_splits(recipe)
    trainer = reward.build_trainer(recipe, model, processor, train, None)
    initial = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainer.train().training_loss > 0
    trainer.save_model(out)
    assert os.path.isfile(os.path.join(out, reward.CONFIG_FILE))

    changed = {n for n, p in trainer.model.named_parameters() if n in initial and not p.equal(initial[n])}
    assert "value_head.weight" in changed
    assert any(n.startswith("backbone.") for n in changed)
    assert not use_peft or all("lora_" in n for n in changed if n.startswith("backbone."))

    scorer = RewardScorer.from_pretrained(out)
    batch = chains(4)
    scores = scorer.score(batch)
    trainer.model.eval()
    assert scores == pytest.approx(RewardScorer(trainer.model, processor).score(batch), abs=1e-5)
    assert scores == RewardScorer.from_pretrained(out).score(batch)

    judge = make_judge(f"reward:{out}")
    critiques = judge.judge_batch(batch)
    assert [c.chain_score for c in critiques] == pytest.approx(scores, abs=1e-5)
    assert all(v is None for c in critiques for v in c.verdicts) and judge.needs_images
    assert judge.fingerprint() == make_judge(f"reward:{out}").fingerprint()
