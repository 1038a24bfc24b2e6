"""Critique SFT on the offline tiny critic: only the critique is trained, a 2-step run saves a working critic."""

import os

import pytest
from helpers import RECIPES, built_dataset, chains

from stepcritic.data_prep import prompts
from stepcritic.train import common
from stepcritic.train.config import parse_recipe


@pytest.fixture(scope="module")
def critique_data(tmp_path_factory):
    return built_dataset(tmp_path_factory, "critique-sft")


def tiny_recipe(name, data, out, **overrides):
    values = dict(dataset_path=data, output_dir=str(out), max_steps=2, per_device_train_batch_size=2,
                  logging_steps=1, report_to="none", **overrides)
    return parse_recipe(os.path.join(RECIPES, name), values)


def test_only_critique_tokens_carry_labels(critique_data, tmp_path):
    from stepcritic.train import sft

    recipe = tiny_recipe("critique-sft.yaml", critique_data, tmp_path)
    model, processor = common.load_model(recipe)
    train, _ = common.load_splits(recipe)
    trainer = sft.build_trainer(recipe, model, processor, train, None)
    rows = [train[0], train[1]]
    batch = trainer.data_collator([dict(row) for row in rows])
    assert "pixel_values" in batch
    tokenizer = processor.tokenizer
    for i, row in enumerate(rows):
        trained = batch["input_ids"][i][batch["labels"][i] != -100]
        gold = row["messages"][-1]["content"][0]["text"]
        # exactly the assistant's critique and its end-of-turn token, nothing of the prompt
        assert tokenizer.decode(trained) == gold + tokenizer.eos_token


def _weights(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_two_sft_steps_train_save_and_generate(critique_data, tmp_path):
    from stepcritic.train.loading import load_critic
    from stepcritic.train.run import train

    recipe = tiny_recipe("critique-sft.yaml", critique_data, tmp_path / "run", freeze_vision_tower=True)
    before = _weights(load_critic(recipe.model_path())[0])
    metrics = train(recipe)
    assert metrics["train_loss"] > 0

    model, processor = load_critic(str(tmp_path / "run"))
    after = _weights(model)
    vision = {name for name, _ in common.vision_parameters(model)}
    changed = {name for name in after if not after[name].equal(before[name])}
    assert changed and not changed & vision  # the language side trained, the frozen vision tower did not
    assert any("language_model" in name for name in changed)

    card = (tmp_path / "run" / "README.md").read_text()
    for section in ("base model", "## Data", "critique-sft", "## Recipe", "max_steps: 2", "## Final metrics",
                    "hardware: CPU", "transformers 5.", f"--judge 'hf:{tmp_path / 'run'},mode=critique'"):
        assert section in card
    assert "AcceleratorConfig" not in card and "debug: []" not in card  # the keys that were set, as plain YAML

    from trl.data_utils import prepare_multimodal_messages

    from stepcritic.data_prep.images import to_rgb

    chain = chains(2)[0]
    messages = prepare_multimodal_messages(prompts.critique_messages(chain), images=[to_rgb(chain["image"])])
    inputs = processor.apply_chat_template([messages], add_generation_prompt=True, tokenize=True,
                                           return_dict=True, return_tensors="pt")
    generated = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert generated.shape[1] > inputs["input_ids"].shape[1]


def test_lora_stays_off_the_vision_tower(critique_data, tmp_path):
    recipe = tiny_recipe("critique-sft.yaml", critique_data, tmp_path, use_peft=True, lora_r=4)
    model, _ = common.load_model(recipe)
    model = common.prepare_model(recipe, model)
    lora = [name for name, p in model.named_parameters() if "lora_" in name]
    assert lora and all(p.requires_grad for name, p in model.named_parameters() if "lora_" in name)
    assert not [name for name in lora if "vision_tower" in name or "multi_modal_projector" in name]

    on_vision = tiny_recipe("critique-sft.yaml", critique_data, tmp_path, use_peft=True, lora_r=4,
                            lora_on_vision=True)
    model, _ = common.load_model(on_vision)
    model = common.prepare_model(on_vision, model)
    assert any("lora_" in name for name, _ in common.vision_parameters(model))


def test_resume_checkpoint_picks_latest_or_the_given_one(tmp_path):
    recipe = parse_recipe(os.path.join(RECIPES, "prm.yaml"), {"output_dir": str(tmp_path)})
    assert common.resume_checkpoint(recipe.training_args) is None
    for step in (2, 10, 4):
        (tmp_path / f"checkpoint-{step}").mkdir()
    assert common.resume_checkpoint(recipe.training_args).endswith("checkpoint-10")
    chosen = parse_recipe(os.path.join(RECIPES, "prm.yaml"),
                          {"output_dir": str(tmp_path), "resume_from_checkpoint": str(tmp_path / "checkpoint-2")})
    assert common.resume_checkpoint(chosen.training_args).endswith("checkpoint-2")


def test_rows_without_images_are_refused_under_zero3_not_left_to_hang(monkeypatch):
    from datasets import Dataset, Features, Image, List, Value
    from PIL import Image as PILImage

    from stepcritic.train.common import check_images_for_zero3

    features = Features({"images": List(Image()), "text": Value("string")})
    picture = PILImage.new("RGB", (8, 8))
    mixed = Dataset.from_dict({"images": [[picture], [], [picture]], "text": ["a", "b", "c"]}, features=features)
    check_images_for_zero3(mixed, "data [train]")  # DDP / ZeRO-2: text-only rows are fine
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    with pytest.raises(ValueError, match=r"data \[train\]: 1 rows have no image \(first: row 1\).*#7170"):
        check_images_for_zero3(mixed, "data [train]")
    check_images_for_zero3(mixed.select([0, 2]), "data [train]")  # every row has its image
