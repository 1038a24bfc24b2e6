"""Padding-free vision batches (`padding_free: true`): packed and padded batches give the same loss, the sequence
boundaries matter, and architectures whose positions cannot be packed are refused with one line."""

import os
from types import SimpleNamespace

import pytest
import torch
from helpers import RECIPES, chain, chains, step

from stepcritic.data_prep.build import build_dataset
from stepcritic.train import packing
from stepcritic.train.config import parse_recipe


@pytest.fixture(scope="module")
def prm_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("packing")
    uneven = [chain(f"long{i}", group_id=f"long{i}",
                    steps=[step(f"Step number {k}.", correct=k % 2 == 0) for k in range(2 + i)]) for i in range(4)]
    build_dataset(chains(4) + uneven, "prm-sft", str(root / "data"), test_fraction=0.01, seed=0)
    return root


def trainer_for(root, **overrides):
    from stepcritic.train import common, prm

    recipe = parse_recipe(os.path.join(RECIPES, "prm.yaml"), dict(
        dataset_path=str(root / "data"), output_dir=str(root / "run"), max_steps=1, per_device_train_batch_size=4,
        report_to="none", **overrides))
    model, processor = common.load_model(recipe)
    train_data, eval_data = common.load_splits(recipe)
    return prm.build_trainer(recipe, model, processor, train_data, eval_data), model, train_data


@pytest.mark.parametrize("arch", ["llava", "idefics3"])
def test_a_packed_batch_has_the_padded_batchs_loss(prm_data, arch):
    name = "stepcritic:tiny/base" if arch == "llava" else f"stepcritic:tiny/{arch}"
    trainer, model, train_data = trainer_for(prm_data, model_name_or_path=name)
    rows = [dict(train_data[i]) for i in range(len(train_data))]
    padded = trainer.data_collator(rows)
    assert not (padded["attention_mask"].all())  # the rows differ in length, so there is padding to drop
    packed = packing.pack(padded)
    assert packed["input_ids"].shape == (1, int(padded["attention_mask"].sum()))
    model.eval()
    with torch.no_grad():
        loss_padded = float(trainer.compute_loss(model, dict(padded)))
        loss_packed = float(trainer.compute_loss(model, dict(packed)))
        # the same tokens as one long sequence (no restarts): later rows would attend to earlier ones
        joined = dict(packed, position_ids=torch.arange(packed["input_ids"].shape[1])[None])
        loss_joined = float(trainer.compute_loss(model, joined))
    assert loss_packed == pytest.approx(loss_padded, rel=1e-5)
    assert abs(loss_joined - loss_padded) > 1e-3


def test_left_and_right_padding_pack_alike():
    ids = torch.tensor([[5, 6, 7], [8, 9, 0]])
    right = {"input_ids": ids, "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
             "labels": torch.tensor([[-100, 6, 7], [-100, 9, -100]]), "pixel_values": torch.zeros(2, 3, 4, 4)}
    left = {"input_ids": torch.tensor([[5, 6, 7], [0, 8, 9]]), "attention_mask": torch.tensor([[1, 1, 1], [0, 1, 1]]),
            "labels": torch.tensor([[-100, 6, 7], [-100, -100, 9]]), "pixel_values": torch.zeros(2, 3, 4, 4)}
    for batch in (right, left):
        packed = packing.pack(batch)
        assert packed["input_ids"].tolist() == [[5, 6, 7, 8, 9]]
        assert packed["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
        # nothing is learnt across a boundary: the first token of each sequence is never a target
        assert packed["labels"].tolist() == [[-100, 6, 7, -100, 9]]
        assert "attention_mask" not in packed and packed["pixel_values"].shape == (2, 3, 4, 4)


def test_padding_free_training_step(prm_data, caplog):
    from stepcritic.train.run import train

    with caplog.at_level("WARNING", logger="stepcritic.train"):
        trainer, _, train_data = trainer_for(prm_data, padding_free=True)
    # without FlashAttention packing is a masked long row, slower than padding: the user is told so
    assert any("padding_free under attention" in r.message and "flash_attention_2" in r.message
               for r in caplog.records)
    assert isinstance(trainer.data_collator, packing.PaddingFreeCollator)
    assert trainer.args.padding_free  # the recipe's value is kept (TRL's own refusal of vision data is bypassed)
    batch = trainer.data_collator([dict(train_data[i]) for i in range(4)])
    assert batch["input_ids"].shape[0] == 1 and "position_ids" in batch
    recipe = parse_recipe(os.path.join(RECIPES, "prm.yaml"), dict(
        dataset_path=str(prm_data / "data"), output_dir=str(prm_data / "run-packed"), max_steps=1,
        per_device_train_batch_size=4, report_to="none", padding_free=True))
    assert train(recipe)["train_loss"] > 0


def test_architectures_with_multimodal_rope_are_refused():
    qwen = SimpleNamespace(config=SimpleNamespace(model_type="qwen2_5_vl"))
    with pytest.raises(packing.NotPackable, match="padding_free: true is not supported for model_type 'qwen2_5_vl'"):
        packing.check_packable(qwen)
