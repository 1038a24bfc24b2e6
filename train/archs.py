"""The families StepCritic trains, vision-language and text-only, described without downloading anything.

* `model_type_of`: which transformers architecture a recipe's `model_name_or_path` is;
* `tiny_config`: a few-hundred-thousand-parameter config of that architecture, so tests instantiate every
  recipe's model class (and apply its LoRA setting) offline;
* `real_config`: the published sizes, so a throughput benchmark can build a randomly initialised model of the
  real shape without its weights;
* `lora_config` / `freeze_vision_tower`: keep adapters and updates on the language model, the recipes' default.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# Hub name -> transformers `model_type`; recipe folders are named by the short aliases.
MODEL_TYPES = {
    "Qwen/Qwen2.5-VL-7B-Instruct": "qwen2_5_vl",
    "Qwen/Qwen2.5-VL-3B-Instruct": "qwen2_5_vl",
    "HuggingFaceTB/SmolVLM-Instruct": "idefics3",
    "HuggingFaceTB/SmolVLM2-2.2B-Instruct": "smolvlm",
    "llava-hf/llava-1.5-7b-hf": "llava",
    "Qwen/Qwen3-VL-4B-Instruct": "qwen3_vl",
    "Qwen/Qwen3-VL-8B-Instruct": "qwen3_vl",
    "google/gemma-3-4b-it": "gemma3",
    "OpenGVLab/InternVL3-2B-hf": "internvl",
    "OpenGVLab/InternVL3-8B-hf": "internvl",
    # text-only families: critics of text-only chains (no vision side to freeze or keep LoRA off)
    "Qwen/Qwen2.5-1.5B-Instruct": "qwen2",
    "Qwen/Qwen3-1.7B": "qwen3",
}
TEXT_MODEL_TYPES = frozenset({"qwen2", "qwen3", "llama"})
ALIASES = {
    "qwen2.5-vl-7b": "Qwen/Qwen2.5-VL-7B-Instruct",
    "qwen2.5-vl-3b": "Qwen/Qwen2.5-VL-3B-Instruct",
    "smolvlm": "HuggingFaceTB/SmolVLM-Instruct",
    "smolvlm2": "HuggingFaceTB/SmolVLM2-2.2B-Instruct",
    "qwen3-vl-4b": "Qwen/Qwen3-VL-4B-Instruct",
    "qwen3-vl-8b": "Qwen/Qwen3-VL-8B-Instruct",
    "gemma-3-4b": "google/gemma-3-4b-it",
    "internvl3-2b": "OpenGVLab/InternVL3-2B-hf",
    "internvl3-8b": "OpenGVLab/InternVL3-8B-hf",
    "qwen2.5-1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
    "qwen3-1.7b": "Qwen/Qwen3-1.7B",
}

# Module-name components of the image side of each family.  The projector (connector / merger) is listed apart:
# freezing the vision tower keeps it trainable, while LoRA "off the vision side" leaves it alone too.
# Qwen2.5-VL and Qwen3-VL: `visual` (Qwen3-VL's deepstack mergers, which feed intermediate tower features into
# early decoder layers, are projectors like its final merger); SmolVLM/Idefics3: `vision_model` + `connector`;
# LLaVA, Gemma 3 and InternVL: `vision_tower` + `multi_modal_projector`.
_VISION_TOWER = r"(?:visual|vision_tower|vision_model)"
_PROJECTOR = r"(?:multi_modal_projector|connector|visual\.merger|visual\.deepstack_merger_list)"
# PEFT full-matches a string `exclude_modules` against each module name.
VISION_SIDE_REGEX = rf"(?:.*\.)?(?:{_VISION_TOWER}|{_PROJECTOR})(?:\..*)?"

# A deliberately tiny text model; head_dim 16, so Qwen's multimodal RoPE sections must add up to 8.
_TINY_TEXT = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
_TINY_SIGLIP = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, patch_size=14)
_TINY_IMAGE_TOKEN = 500  # any id inside the tiny vocabulary

_TINY = {
    "qwen2": dict(_TINY_TEXT),
    "qwen3": dict(_TINY_TEXT, head_dim=16),
    "qwen2_5_vl": dict(
        text_config={
            **_TINY_TEXT,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]},
        },
        vision_config=dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            out_hidden_size=_TINY_TEXT["hidden_size"],
            fullatt_block_indexes=[1],
        ),
        image_token_id=_TINY_IMAGE_TOKEN,
        video_token_id=_TINY_IMAGE_TOKEN + 1,
        vision_start_token_id=_TINY_IMAGE_TOKEN + 2,
        vision_end_token_id=_TINY_IMAGE_TOKEN + 3,
    ),
    "idefics3": dict(
        text_config={"model_type": "llama", **_TINY_TEXT},
        vision_config={**_TINY_SIGLIP, "image_size": 56},
        image_token_id=_TINY_IMAGE_TOKEN,
        scale_factor=2,
    ),
    "smolvlm": dict(
        text_config={"model_type": "llama", **_TINY_TEXT},
        vision_config={**_TINY_SIGLIP, "image_size": 56},
        image_token_id=_TINY_IMAGE_TOKEN,
        scale_factor=2,
    ),
    "llava": dict(
        text_config={"model_type": "llama", **_TINY_TEXT},
        vision_config={"model_type": "siglip_vision_model", **_TINY_SIGLIP, "image_size": 56},
        image_token_index=_TINY_IMAGE_TOKEN,
        vision_feature_select_strategy="full",
    ),
    "qwen3_vl": dict(
        text_config={
            **_TINY_TEXT,
            # Qwen3 sets head_dim apart from hidden_size / heads (default 128); the sections must add up to 8.
            "head_dim": 16,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [2, 3, 3],
                                "mrope_interleaved": True},
        },
        vision_config=dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            patch_size=16,
            out_hidden_size=_TINY_TEXT["hidden_size"],
            # a square grid of learned position embeddings (interpolated to each image's grid)
            num_position_embeddings=16,
            # one deepstack merger, so its module names are under test too
            deepstack_visual_indexes=[0],
        ),
        image_token_id=_TINY_IMAGE_TOKEN,
        video_token_id=_TINY_IMAGE_TOKEN + 1,
        vision_start_token_id=_TINY_IMAGE_TOKEN + 2,
        vision_end_token_id=_TINY_IMAGE_TOKEN + 3,
    ),
    "gemma3": dict(
        text_config={
            "model_type": "gemma3_text",
            **_TINY_TEXT,
            "head_dim": 16,
            "query_pre_attn_scalar": 16,
            "sliding_window": 16,
            # one local and one global layer: both attention kinds (and their two RoPE bases) run
            "layer_types": ["sliding_attention", "full_attention"],
        },
        # Gemma 3 reads the SigLIP tower's patch features, without its pooling head
        vision_config={"model_type": "siglip_vision_model", **_TINY_SIGLIP, "image_size": 56, "vision_use_head": False},
        # 4 x 4 patches pooled to 2 x 2 soft tokens per image
        mm_tokens_per_image=4,
        image_token_index=_TINY_IMAGE_TOKEN,
        boi_token_index=_TINY_IMAGE_TOKEN + 1,
        eoi_token_index=_TINY_IMAGE_TOKEN + 2,
    ),
    "internvl": dict(
        text_config={"model_type": "qwen2", **_TINY_TEXT},
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=[56, 56], patch_size=[14, 14]),
        # 4 x 4 patches, pixel-shuffled by 0.5 into 2 x 2 tokens per tile
        image_seq_length=4,
        image_token_id=_TINY_IMAGE_TOKEN,
    ),
}

# Published config.json sizes (architecture fields only; token ids and tokenizer-dependent fields are the
# library defaults, which match these checkpoints).
_QWEN25_VL_VISION = dict(
    depth=32,
    hidden_size=1280,
    intermediate_size=3420,
    num_heads=16,
    patch_size=14,
    spatial_merge_size=2,
    temporal_patch_size=2,
    window_size=112,
    fullatt_block_indexes=[7, 15, 23, 31],
    tokens_per_second=2,
)
_QWEN25_VL_ROPE = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]}
_SMOLVLM_TEXT = dict(
    model_type="llama",
    vocab_size=49155,
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=24,
    num_attention_heads=32,
    num_key_value_heads=32,
    max_position_embeddings=16384,
    rope_parameters={"rope_type": "default", "rope_theta": 273768.0},
)
_SO400M_VISION = dict(
    hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16, patch_size=14
)
# Qwen3-VL (config.json of Qwen/Qwen3-VL-4B-Instruct and -8B-Instruct, Oct 2025): a Qwen3 decoder with interleaved
# multimodal RoPE (theta 5e6, sections 24/20/20 of head_dim 128) and a SigLIP-2-style tower of 16 px patches
# whose layers listed in deepstack_visual_indexes also feed the decoder.
_QWEN3_VL_ROPE = {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20], "mrope_interleaved": True}
_QWEN3_VL_TEXT = dict(vocab_size=151936, head_dim=128, num_hidden_layers=36, num_attention_heads=32,
                      num_key_value_heads=8, max_position_embeddings=262144, rope_parameters=_QWEN3_VL_ROPE)
_QWEN3_VL_VISION = dict(patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_heads=16,
                        num_position_embeddings=2304)
# InternVL3 (OpenGVLab/InternVL3-*-hf config.json, Apr 2025; the InternVL3 report, arXiv 2504.10479): InternViT-300M
# (24 layers, width 1024, 448 px tiles of 14 px patches, pixel shuffle 0.5 -> 256 tokens a tile) before a Qwen2.5
# decoder whose vocabulary also holds InternVL's image and box tags (151,674 ids against Qwen2.5's 151,665).
_INTERNVIT_300M = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                       image_size=[448, 448], patch_size=[14, 14], layer_scale_init_value=0.1, use_qk_norm=False,
                       norm_type="layer_norm")
_REAL = {
    # config.json of Qwen/Qwen2.5-1.5B-Instruct (Sep 2024): 28 layers, width 1536, 12 query / 2 KV heads, tied
    "Qwen/Qwen2.5-1.5B-Instruct": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                                       num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                                       max_position_embeddings=32768,
                                       rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                                       tie_word_embeddings=True),
    # config.json of Qwen/Qwen3-1.7B (Apr 2025): 28 layers, width 2048, 16 query / 8 KV heads of 128, tied
    "Qwen/Qwen3-1.7B": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                            num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                            max_position_embeddings=40960,
                            rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=True),
    "Qwen/Qwen2.5-VL-7B-Instruct": dict(
        text_config=dict(
            vocab_size=152064,
            hidden_size=3584,
            intermediate_size=18944,
            num_hidden_layers=28,
            num_attention_heads=28,
            num_key_value_heads=4,
            max_position_embeddings=128000,
            rope_parameters=_QWEN25_VL_ROPE,
            tie_word_embeddings=False,
        ),
        vision_config={**_QWEN25_VL_VISION, "out_hidden_size": 3584},
        tie_word_embeddings=False,
    ),
    "Qwen/Qwen2.5-VL-3B-Instruct": dict(
        text_config=dict(
            vocab_size=151936,
            hidden_size=2048,
            intermediate_size=11008,
            num_hidden_layers=36,
            num_attention_heads=16,
            num_key_value_heads=2,
            max_position_embeddings=128000,
            rope_parameters=_QWEN25_VL_ROPE,
            tie_word_embeddings=True,
        ),
        vision_config={**_QWEN25_VL_VISION, "out_hidden_size": 2048},
        tie_word_embeddings=True,
    ),
    "HuggingFaceTB/SmolVLM-Instruct": dict(
        text_config=_SMOLVLM_TEXT,
        vision_config={**_SO400M_VISION, "image_size": 384},
        scale_factor=3,
        image_token_id=49153,
    ),
    "Qwen/Qwen3-VL-4B-Instruct": dict(
        # decoder of Qwen3-4B: width 2560, 36 layers, tied embeddings; tower of 24 layers, width 1024
        text_config={**_QWEN3_VL_TEXT, "hidden_size": 2560, "intermediate_size": 9728, "tie_word_embeddings": True},
        vision_config={**_QWEN3_VL_VISION, "depth": 24, "hidden_size": 1024, "intermediate_size": 4096,
                       "out_hidden_size": 2560, "deepstack_visual_indexes": [5, 11, 17]},
        tie_word_embeddings=True,
    ),
    "Qwen/Qwen3-VL-8B-Instruct": dict(
        # decoder of Qwen3-8B: width 4096, 36 layers, untied head; tower of 27 layers, width 1152 (SO400M shape)
        text_config={**_QWEN3_VL_TEXT, "hidden_size": 4096, "intermediate_size": 12288, "tie_word_embeddings": False},
        vision_config={**_QWEN3_VL_VISION, "depth": 27, "hidden_size": 1152, "intermediate_size": 4304,
                       "out_hidden_size": 4096, "deepstack_visual_indexes": [8, 16, 24]},
        tie_word_embeddings=False,
    ),
    "google/gemma-3-4b-it": dict(
        # config.json of google/gemma-3-4b-it (Mar 2025) and the Gemma 3 report (arXiv 2503.19786, Table 1: 4B =
        # 417M vision + 675M embedding + 3,209M other parameters): 34 layers, width 2560, 8 query / 4 KV heads of
        # 256, five local (1,024-token window, RoPE base 1e4) layers to one global (base 1e6, linear scaling x8);
        # the SigLIP-SO400M tower at 896 px (64 x 64 patches), average-pooled to 256 soft tokens per image.
        text_config=dict(
            model_type="gemma3_text",
            vocab_size=262208,
            hidden_size=2560,
            intermediate_size=10240,
            num_hidden_layers=34,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=256,
            query_pre_attn_scalar=256,
            sliding_window=1024,
            max_position_embeddings=131072,
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
        ),
        vision_config={"model_type": "siglip_vision_model", **_SO400M_VISION, "image_size": 896,
                       "vision_use_head": False},
        mm_tokens_per_image=256,
    ),
    "OpenGVLab/InternVL3-2B-hf": dict(
        # decoder of Qwen2.5-1.5B: width 1536, 28 layers, 12 query / 2 KV heads; unlike Qwen2.5-1.5B its head is
        # untied (2.09B parameters on the model card; tied would be 1.86B)
        text_config=dict(model_type="qwen2", vocab_size=151674, hidden_size=1536, intermediate_size=8960,
                         num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                         max_position_embeddings=32768, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                         tie_word_embeddings=False),
        vision_config=_INTERNVIT_300M,
        image_seq_length=256,
        downsample_ratio=0.5,
        tie_word_embeddings=False,
    ),
    "OpenGVLab/InternVL3-8B-hf": dict(
        # decoder of Qwen2.5-7B: width 3584, 28 layers, 28 query / 4 KV heads, untied head
        text_config=dict(model_type="qwen2", vocab_size=151674, hidden_size=3584, intermediate_size=18944,
                         num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                         max_position_embeddings=32768, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                         tie_word_embeddings=False),
        vision_config=_INTERNVIT_300M,
        image_seq_length=256,
        downsample_ratio=0.5,
        tie_word_embeddings=False,
    ),
}


def resolve_alias(name: str) -> str:
    return ALIASES.get(name, name)


def model_type_of(name_or_path: str) -> str:
    """transformers `model_type` of a local checkpoint (its config.json) or of a Hub name in MODEL_TYPES."""
    config_file = Path(name_or_path) / "config.json"
    if config_file.is_file():
        return json.loads(config_file.read_text())["model_type"]
    name = resolve_alias(name_or_path)
    if name not in MODEL_TYPES:
        raise KeyError(f"unknown model {name_or_path!r}: add it to stepcritic.train.archs.MODEL_TYPES")
    return MODEL_TYPES[name]


def tiny_config(model_type: str):
    """A tiny, randomly initialisable config of `model_type` (one of the families in `_TINY`)."""
    from transformers import AutoConfig

    if model_type not in _TINY:
        raise KeyError(f"no tiny config for model_type {model_type!r}; known: {sorted(_TINY)}")
    return AutoConfig.for_model(model_type, **_TINY[model_type])


def real_config(name: str):
    """The real-size config of a model (Hub name or alias such as "qwen2.5-vl-3b"), built without downloading."""
    from transformers import AutoConfig

    name = resolve_alias(name)
    if name not in _REAL:
        raise KeyError(f"no real-size config for {name!r}; known: {sorted(_REAL)}")
    return AutoConfig.for_model(MODEL_TYPES[name], **_REAL[name])


def is_vision_tower(module_name: str) -> bool:
    """True for the image encoder's modules/parameters, False for the projector and the language model."""
    return re.search(rf"(?:^|\.){_VISION_TOWER}\.", module_name) is not None and not re.search(
        rf"(?:^|\.){_PROJECTOR}\.", module_name
    )


def freeze_vision_tower(model) -> int:
    """Stop gradients to the image encoder (the projector stays trainable); returns the parameters frozen."""
    frozen = 0
    for name, parameter in model.named_parameters():
        if is_vision_tower(name):
            parameter.requires_grad_(False)
            frozen += parameter.numel()
    return frozen


def run_frozen_vision_without_grad(model) -> list[str]:
    """Run the frozen parts of the vision side under `torch.no_grad` when the whole image encoder is frozen;
    returns the wrapped module names.

    With activation checkpointing or adapters, transformers' `enable_input_require_grads` hooks the input
    embeddings of every sub-model, the vision tower's patch embedding included, so autograd records the whole
    frozen tower and the backward pass walks through it for nothing: on an H100 with a Qwen2.5-VL-3B-shaped
    model, LoRA and 896 px images, steps ran 2.6x faster without it (docs/benchmarks.md).
    The wrapped modules are the largest vision-side ones with no trainable parameter (containers are entered,
    since they are never called; parameter-free ones are left alone); a trainable projector after them still
    trains.
    """
    import torch

    def frozen(module) -> bool:  # parameter-free modules (activations) are left alone: they pass gradients on
        params = list(module.parameters())
        return bool(params) and not any(p.requires_grad for p in params)

    def enter(module, args):
        module._stepcritic_grad_mode = torch.is_grad_enabled()
        torch.set_grad_enabled(False)

    def leave(module, args, output):
        torch.set_grad_enabled(module._stepcritic_grad_mode)

    wrapped = []
    if any(p.requires_grad for name, p in model.named_parameters() if is_vision_tower(name)):
        return wrapped  # a frozen module after a trainable one must pass gradients back: leave it all alone

    def visit(prefix: str, module) -> None:
        for name, child in module.named_children():
            path = f"{prefix}.{name}" if prefix else name
            container = isinstance(child, (torch.nn.ModuleList, torch.nn.ModuleDict))
            if re.fullmatch(VISION_SIDE_REGEX, path) and frozen(child) and not container:
                child.register_forward_pre_hook(enter)
                child.register_forward_hook(leave, always_call=True)
                wrapped.append(path)
            else:
                visit(path, child)

    visit("", model)
    return wrapped


def lora_config(model_args, lora_on_vision: bool = False):
    """The recipe's LoRA config (TRL's mapping of ModelConfig), kept off the vision side unless asked.

    Module names such as `q_proj` or `gate_proj` occur in several vision towers too (Qwen2.5-VL's vision MLP
    has `gate_proj`), so a plain target list would silently adapt the image encoder.
    """
    from trl import get_peft_config

    config = get_peft_config(model_args)
    if config is not None and not lora_on_vision:
        config.exclude_modules = VISION_SIDE_REGEX
    return config
