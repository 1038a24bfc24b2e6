"""The offline tiny critic: builds without the Hub, reloads with the Auto classes, and its chat template
masks exactly the assistant turns (what TRL's assistant_only_loss trains on)."""

import json
import os

import pytest
import torch
from PIL import Image

from stepcritic.train.loading import load_critic
from stepcritic.train.tiny import DEFAULT_PATCH_SIZE, TURN_END, build_tiny_critic
from stepcritic.train.tiny.cache import tiny_critic_path

IMAGE_SIZE = 96
CRITIQUE = json.dumps(
    {"steps": [{"step": 1, "correct": True}, {"step": 12, "correct": False, "explanation": "Not 3 {red} stars."}],
     "answer_correct": False}
)


def conversation():
    return [
        {"role": "system", "content": "You judge each step."},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Step 1: there are 3 red circles."}]},
        {"role": "assistant", "content": "+"},
        {"role": "user", "content": [{"type": "text", "text": "Step 2: so 3 + 4 = 8."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "-"}]},
        {"role": "user", "content": "Now the whole critique."},
        {"role": "assistant", "content": CRITIQUE},
    ]


def picture():
    image = Image.new("RGB", (120, 80), "white")
    image.paste((200, 30, 30), (20, 20, 60, 60))
    return image


@pytest.fixture(scope="module", params=["llava", "idefics3"])
def tiny(request, tmp_path_factory):
    path = build_tiny_critic(tmp_path_factory.mktemp(request.param), arch=request.param)
    model, processor = load_critic(path)
    return request.param, path, model, processor


def encode(processor, messages, **kwargs):
    return processor.apply_chat_template(
        messages, images=[picture()], tokenize=True, return_dict=True, return_tensors="pt", **kwargs
    )


def test_reloads_with_auto_classes(tiny):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    arch, path, _, _ = tiny
    model = AutoModelForImageTextToText.from_pretrained(path)
    processor = AutoProcessor.from_pretrained(path)
    assert model.config.model_type == arch
    assert 1e6 < sum(p.numel() for p in model.parameters()) < 1e7
    assert processor.tokenizer.eos_token == TURN_END
    assert model.generation_config.eos_token_id == processor.tokenizer.eos_token_id


def test_forward_pass_with_image(tiny):
    _, _, model, processor = tiny
    batch = encode(processor, conversation())
    image_token_id = processor.tokenizer.convert_tokens_to_ids("<image>")
    assert (batch["input_ids"] == image_token_id).sum() > 0
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    pixel_values=batch["pixel_values"], **({"pixel_attention_mask": batch["pixel_attention_mask"]}
                                                           if "pixel_attention_mask" in batch else {}),
                    labels=batch["input_ids"])
    assert out.logits.shape[:2] == batch["input_ids"].shape
    assert out.logits.shape[-1] >= len(processor.tokenizer)
    assert torch.isfinite(out.loss)


def test_llava_image_costs_one_token_per_patch():
    # LLaVA only (Idefics3 wraps and pools its image tokens): the cached default build, not the arch fixture
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_critic_path())
    ids = encode(processor, conversation())["input_ids"][0]
    n_patches = (IMAGE_SIZE // DEFAULT_PATCH_SIZE["llava"]) ** 2
    assert (ids == processor.tokenizer.convert_tokens_to_ids("<image>")).sum() == n_patches == 9


def test_assistant_mask_covers_exactly_the_assistant_turns(tiny):
    _, _, _, processor = tiny
    batch = encode(processor, conversation(), return_assistant_tokens_mask=True)
    ids, mask = batch["input_ids"][0].tolist(), batch["assistant_masks"][0].tolist()
    spans, current = [], []
    for token, masked in zip(ids, mask):
        if masked:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    decoded = [processor.tokenizer.decode(span) for span in spans]
    # The end-of-turn token is part of each span: the model must learn to stop.
    assert decoded == ["+" + TURN_END, "-" + TURN_END, CRITIQUE + TURN_END]


def test_template_passes_trl_training_checks(tiny):
    from trl.chat_template_utils import has_generation_markers, is_chat_template_stop_token_trained

    _, _, _, processor = tiny
    assert has_generation_markers(processor.chat_template)
    assert is_chat_template_stop_token_trained(processor)


def test_judgment_tokens_are_single_tokens(tiny):
    _, _, _, processor = tiny
    tokenizer = processor.tokenizer
    plus, minus = (tokenizer.encode(s, add_special_tokens=False) for s in ("+", "-"))
    assert len(plus) == 1 and len(minus) == 1 and plus != minus
    ids = encode(processor, conversation()[:3])["input_ids"][0].tolist()
    assert ids[-3:-1] == [plus[0], tokenizer.convert_tokens_to_ids(TURN_END)]


def test_text_round_trips_and_digits_split(tiny):
    _, _, _, processor = tiny
    tokenizer = processor.tokenizer
    assert tokenizer.decode(tokenizer.encode(CRITIQUE, add_special_tokens=False)) == CRITIQUE
    assert [t for t in tokenizer.tokenize("step 12") if t.isdigit()] == ["1", "2"]


def test_string_and_part_lists_render_alike(tiny):
    _, _, _, processor = tiny
    as_string = [{"role": "user", "content": "Is it red?"}]
    as_parts = [{"role": "user", "content": [{"type": "text", "text": "Is it red?"}]}]
    rendered = processor.apply_chat_template(as_string, tokenize=False, add_generation_prompt=True)
    assert rendered == processor.apply_chat_template(as_parts, tokenize=False, add_generation_prompt=True)
    assert rendered.endswith("<|im_start|>assistant\n")


def test_build_is_deterministic(tmp_path):
    first, again, other = (build_tiny_critic(tmp_path / name, seed=seed)
                           for name, seed in (("a", 0), ("b", 0), ("c", 1)))
    read = lambda folder, name: (tmp_path / folder / name).read_bytes()  # noqa: E731
    assert read("a", "model.safetensors") == read("b", "model.safetensors")
    assert read("a", "tokenizer.json") == read("b", "tokenizer.json")
    assert read("a", "model.safetensors") != read("c", "model.safetensors")


def test_cached_path_is_built_once_per_arguments(tmp_path):
    path = tiny_critic_path(cache_dir=tmp_path)
    stamp = (tmp_path / path / "model.safetensors").stat().st_mtime_ns
    assert tiny_critic_path(cache_dir=tmp_path) == path
    assert (tmp_path / path / "model.safetensors").stat().st_mtime_ns == stamp
    assert tiny_critic_path(cache_dir=tmp_path, seed=1) != path
    assert sorted(p.name.startswith("tiny-llava-") for p in tmp_path.iterdir()) == [True, True]  # no staging left


def test_cache_key_follows_the_tokenizer_corpus(tmp_path, monkeypatch):
    # the tokenizer is trained on the synthetic generator's wording: changing that wording must rebuild
    from stepcritic.train.tiny import model, tokenizer

    monkeypatch.setattr(model, "build_tiny_critic", lambda out, **kw: os.makedirs(out, exist_ok=True))
    before = tiny_critic_path(cache_dir=tmp_path)
    corpus = tokenizer.corpus()
    monkeypatch.setattr(tokenizer, "corpus", lambda: corpus + ["The circle is now a disc."])
    assert tiny_critic_path(cache_dir=tmp_path) != before


def test_load_critic_reads_a_lora_adapter(tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    base = build_tiny_critic(tmp_path / "base")
    model, processor = load_critic(base)
    adapted = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # LoRA starts as a no-op; make it change the outputs
        for name, parameter in adapted.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    adapted.save_pretrained(tmp_path / "adapter")
    batch = encode(processor, conversation()[:3])

    reloaded, reloaded_processor = load_critic(tmp_path / "adapter")
    assert isinstance(reloaded, PeftModel)
    assert reloaded_processor.tokenizer.eos_token == TURN_END
    with torch.no_grad():
        expected = adapted(**batch).logits
        assert torch.allclose(reloaded(**batch).logits, expected, atol=1e-5)
        assert not torch.allclose(load_critic(base)[0](**batch).logits, expected, atol=1e-3)
        merged = load_critic(tmp_path / "adapter", merged=True)[0]  # as judges load it: one product per layer
        assert not isinstance(merged, PeftModel) and torch.allclose(merged(**batch).logits, expected, atol=1e-4)


# 300 steps: a minute for idefics3 on a CPU without AVX-512, so that architecture runs in the slow tier
@pytest.mark.parametrize("arch", ["llava", pytest.param("idefics3", marks=pytest.mark.slow)])
def test_vision_pretraining_teaches_every_cell_and_leaves_the_language_model_alone(arch, tmp_path):
    from stepcritic.train.tiny.vision_pretrain import pretrain_vision

    model, processor = load_critic(build_tiny_critic(tmp_path, arch=arch))
    language = {k: v.clone() for k, v in model.get_decoder().state_dict().items()}
    tower_before = [p.clone() for p in model.parameters() if p.dim() == 4][0]  # the patch embedding
    # chance is 0.2 / 0.2 / 0.33 per cell (or the empty-cell rate) and 1/3 for the row and the column: a random
    # tower gets nowhere near 0.9. Rows and columns take the longest (the position embeddings start near zero: the
    # shipped base's 400 steps end at 1.0 for both), so 300 steps only have to be well above chance there.
    result = pretrain_vision(model, processor, steps=300, seed=0)
    accuracy = result["accuracy"]
    assert min(accuracy[k] for k in ("shape", "colour", "size")) >= 0.9, result
    assert min(accuracy["row"], accuracy["column"]) >= 0.6, result
    assert all(torch.equal(v, model.get_decoder().state_dict()[k]) for k, v in language.items())
    assert not torch.equal(tower_before, [p for p in model.parameters() if p.dim() == 4][0])


def test_vision_pretraining_needs_a_square_of_image_tokens_per_grid_cell(tmp_path):
    # 24 px patches cut the 3 x 3 grid's cells apart (4 x 4 tokens); 16 px patches give each cell a 2 x 2 square
    from stepcritic.train.tiny.vision_pretrain import pretrain_vision

    model, processor = load_critic(build_tiny_critic(tmp_path / "p24", arch="llava", patch_size=24))
    with pytest.raises(ValueError, match="a square of image tokens per grid cell"):
        pretrain_vision(model, processor, steps=1)
    model, processor = load_critic(build_tiny_critic(tmp_path / "p16", arch="llava", patch_size=16))
    assert set(pretrain_vision(model, processor, steps=1)["accuracy"]) == {"shape", "colour", "size", "row", "column"}
