"""The architecture table (`stepcritic.train.archs`) for every family the recipes train: the image encoder and the
projectors each family names (freezing and LoRA placement rely on them), and the published real-size shapes the
throughput benchmark builds. Offline: tiny configs, and real sizes on the meta device only."""

import pytest

from stepcritic.train import archs

# Per family, named by hand rather than by archs' own regexes: the image encoder's module, its submodules that
# are projectors (trainable when the tower is frozen), and the projector the language model reads images from.
VISION_SIDES = {
    "qwen2_5_vl": ("model.visual", ("merger",), "model.visual.merger"),
    "qwen3_vl": ("model.visual", ("merger", "deepstack_merger_list"), "model.visual.deepstack_merger_list"),
    "idefics3": ("model.vision_model", (), "model.connector"),
    "smolvlm": ("model.vision_model", (), "model.connector"),
    "llava": ("model.vision_tower", (), "model.multi_modal_projector"),
    "gemma3": ("model.vision_tower", (), "model.multi_modal_projector"),
    "internvl": ("model.vision_tower", (), "model.multi_modal_projector"),
}


def test_every_family_with_a_tiny_config_has_its_vision_side_named_here():
    assert set(VISION_SIDES) == set(archs._TINY) - archs.TEXT_MODEL_TYPES
    assert {archs.model_type_of(name) for name in archs.MODEL_TYPES} <= set(archs._TINY)


@pytest.mark.parametrize("model_type", sorted(archs.TEXT_MODEL_TYPES & set(archs._TINY)))
def test_text_families_have_no_vision_side(model_type):
    from transformers import AutoModelForCausalLM

    from stepcritic.train.modality import config_reads_images

    config = archs.tiny_config(model_type)
    model = AutoModelForCausalLM.from_config(config)
    assert not config_reads_images(config) and archs.freeze_vision_tower(model) == 0
    assert 50_000 < sum(p.numel() for p in model.parameters()) < 1_000_000


@pytest.mark.parametrize("model_type", sorted(VISION_SIDES))
def test_vision_tower_freezing_keeps_the_projector_trainable(model_type):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_config(archs.tiny_config(model_type))
    tower_name, projector_children, projector_name = VISION_SIDES[model_type]
    tower, projector = model.get_submodule(tower_name), model.get_submodule(projector_name)
    projectors_inside = [tower.get_submodule(child) for child in projector_children]
    expected = sum(p.numel() for p in tower.parameters()) - sum(
        p.numel() for child in projectors_inside for p in child.parameters())
    assert expected > 0
    assert archs.freeze_vision_tower(model) == expected  # the whole encoder, nothing else
    frozen = {id(p) for p in model.parameters() if not p.requires_grad}
    assert frozen == {id(p) for p in tower.parameters()} - {id(p) for c in projectors_inside for p in c.parameters()}
    assert all(p.requires_grad for p in projector.parameters())
    assert all(p.requires_grad for p in model.get_decoder().parameters())


# Parameter counts of the published checkpoints (the model cards' "Model size", the Gemma 3 report's Table 1), and
# the image encoder's share where a paper gives it; built on the meta device, nothing is allocated.
PUBLISHED_SIZES = {
    "qwen2.5-vl-3b": (3.75e9, None),
    "qwen2.5-vl-7b": (8.29e9, None),
    "smolvlm": (2.25e9, None),
    "qwen3-vl-4b": (4.44e9, None),
    "qwen3-vl-8b": (8.77e9, None),
    "gemma-3-4b": (4.30e9, 417e6),  # Gemma 3 report: 417M vision encoder (SigLIP-SO400M)
    "internvl3-2b": (2.09e9, 0.30e9),  # InternViT-300M
    "internvl3-8b": (7.94e9, 0.30e9),
}


@pytest.mark.parametrize("alias", sorted(PUBLISHED_SIZES))
def test_real_size_config_matches_the_published_model(alias):
    import torch
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(archs.real_config(alias))
    assert model.config.model_type == archs.model_type_of(alias)
    total, vision = PUBLISHED_SIZES[alias]
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(total, rel=0.005)
    if vision:
        tower = sum(p.numel() for name, p in model.named_parameters() if archs.is_vision_tower(name))
        assert tower == pytest.approx(vision, rel=0.02)


@pytest.mark.parametrize("alias, total", [("qwen2.5-1.5b", 1.54e9), ("qwen3-1.7b", 1.72e9)])
def test_real_size_text_config_matches_the_published_model(alias, total):
    # Qwen2.5-1.5B's card says 1.54B; Qwen3-1.7B's says 1.7B (1.4B without the tied embedding of 311M)
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(archs.real_config(alias))
    assert model.config.model_type == archs.model_type_of(alias)
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(total, rel=0.005)


def test_real_size_configs_of_one_family_differ_only_where_the_sizes_do():
    assert archs.real_config("Qwen/Qwen2.5-VL-7B-Instruct").text_config.hidden_size == 3584
    small, large = archs.real_config("qwen3-vl-4b"), archs.real_config("qwen3-vl-8b")
    # the vision tower's output feeds the decoder: it must match each decoder's width
    assert (small.vision_config.out_hidden_size, large.vision_config.out_hidden_size) == (2560, 4096)
    assert all(i < large.vision_config.depth for i in large.vision_config.deepstack_visual_indexes)
    assert small.tie_word_embeddings and not large.tie_word_embeddings
    gemma = archs.real_config("gemma-3-4b")
    assert gemma.text_config.layer_types.count("full_attention") == 34 // 6  # one global layer in six
    patches = gemma.vision_config.image_size // gemma.vision_config.patch_size
    assert gemma.mm_tokens_per_image == (patches // 4) ** 2 == 256  # 64 x 64 patches pooled 4 x 4


@pytest.mark.parametrize("model_type", sorted(VISION_SIDES))
def test_tiny_configs_stay_tiny(model_type):
    # every recipe's one-step training test builds one of these; a default that slipped through (Qwen3's head_dim
    # of 128, Gemma's 262k vocabulary) would make the suite minutes slower, not fail it
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_config(archs.tiny_config(model_type))
    assert 50_000 < sum(p.numel() for p in model.parameters()) < 1_000_000
