"""DPO of the critic: continue the SFT LoRA adapter against a frozen copy of it, and the full-model reference."""

import os

import pytest
from helpers import RECIPES, chains

from stepcritic.data_prep.build import build_dataset
from stepcritic.train import common, dpo
from stepcritic.train.config import parse_recipe

STEPS = dict(max_steps=2, per_device_train_batch_size=2, logging_steps=1, report_to="none")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    for kind in ("critique-sft", "critique-pref"):
        build_dataset(chains(8), kind, str(root / kind), test_fraction=0.25, seed=0)
    return root


def lora(model, adapter="default"):
    return {n: p.detach().clone() for n, p in model.named_parameters() if f"lora_B.{adapter}." in n}


def test_dpo_continues_the_sft_adapter_against_a_frozen_copy(data, tmp_path):
    from stepcritic.train.loading import load_critic
    from stepcritic.train.run import train

    sft_dir = tmp_path / "sft"
    train(parse_recipe(os.path.join(RECIPES, "critique-sft.yaml"), dict(
        dataset_path=str(data / "critique-sft"), output_dir=str(sft_dir), use_peft=True, lora_r=4,
        learning_rate=1e-2, **STEPS)))
    assert (sft_dir / "adapter_config.json").is_file()

    recipe = parse_recipe(os.path.join(RECIPES, "dpo.yaml"), dict(
        dataset_path=str(data / "critique-pref"), output_dir=str(tmp_path / "dpo"),
        model_name_or_path=str(sft_dir), learning_rate=1e-2, **STEPS))
    model, processor = common.load_model(recipe)
    sft_adapter = lora(model)
    train_rows, _ = common.load_splits(recipe)
    trainer = dpo.build_trainer(recipe, model, processor, train_rows, None)
    assert trainer.ref_model is None and "ref" in trainer.model.peft_config  # TRL's frozen copy of the adapter
    assert all(p.equal(sft_adapter[n.replace(".ref.", ".default.")]) for n, p in lora(trainer.model, "ref").items())

    trainer.train()
    trained = lora(trainer.model)
    assert any(not trained[n].equal(sft_adapter[n]) for n in trained)  # the SFT adapter kept training
    assert all(p.equal(sft_adapter[n.replace(".ref.", ".default.")]) for n, p in lora(trainer.model, "ref").items())

    trainer.save_model(str(tmp_path / "dpo"))
    processor.save_pretrained(str(tmp_path / "dpo"))
    reloaded, _ = load_critic(str(tmp_path / "dpo"))
    assert all(p.equal(trained[n]) for n, p in lora(reloaded).items())


def test_full_dpo_gets_a_frozen_reference_copy(data, tmp_path):
    recipe = parse_recipe(os.path.join(RECIPES, "dpo.yaml"), dict(
        dataset_path=str(data / "critique-pref"), output_dir=str(tmp_path), use_peft=False, **STEPS))
    model, processor = common.load_model(recipe)
    train_rows, _ = common.load_splits(recipe)
    trainer = dpo.build_trainer(recipe, model, processor, train_rows, None)
    assert trainer.ref_model is not None and trainer.ref_model is not trainer.model
    assert not any(p.requires_grad for p in trainer.ref_model.parameters())
