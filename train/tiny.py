"""An offline tiny vision-language critic: a real architecture with random weights and its own tokenizer.

The Hugging Face Hub is not reachable from tests, CI or the offline demo, so everything a trainer needs is built
here from code: a byte-level BPE tokenizer trained on a small corpus of critic vocabulary, a chat template with
`{% generation %}` markers (so TRL's `assistant_only_loss=True` can mask the prompt), a stock image processor and
a model of a few million parameters.  The result is saved like any Hub checkpoint, so the training and evaluation
code paths are exactly the ones used for Qwen2.5-VL or SmolVLM.

Sizes are chosen for a 2-core CPU: one optimiser step on 8 samples of ~200 text tokens plus a 96 px image
(36 image tokens) takes about 0.3 s.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

# Bump when the builder changes what it writes, so cached copies are rebuilt instead of silently reused.
TINY_BUILD_VERSION = 3
DEFAULT_PATCH_SIZE = {"llava": 32, "idefics3": 16}

ARCHS = ("llava", "idefics3")

PAD_TOKEN = "<|endoftext|>"
TURN_START = "<|im_start|>"
TURN_END = "<|im_end|>"
IMAGE_TOKEN = "<image>"
# Idefics3's processor looks these up by name when it expands an image into its token sequence.
IDEFICS3_TOKENS = ("<fake_token_around_image>", "<global-img>", "<end_of_utterance>")

# ChatML-style turns.  The end-of-turn token sits INSIDE the generation span: the model has to learn to stop,
# and TRL warns when the stop token falls outside the assistant mask.  Content may be a plain string or a list
# of parts ({"type": "image"} / {"type": "text", "text": ...}); every image part becomes one placeholder that
# the processor expands into the image's tokens.
CHAT_TEMPLATE = (
    "{%- macro render(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part.type == 'image' -%}" + IMAGE_TOKEN + "{%- elif part.type == 'text' -%}{{ part.text }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    "{%- for message in messages -%}"
    "{{ '" + TURN_START + "' + message.role + '\\n' }}"
    "{%- if message.role == 'assistant' -%}"
    "{% generation %}{{ render(message.content) + '" + TURN_END + "' }}{% endgeneration %}{{ '\\n' }}"
    "{%- else -%}"
    "{{ render(message.content) + '" + TURN_END + "\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '" + TURN_START + "assistant\\n' }}{%- endif -%}"
)

COLOURS = ("red", "green", "blue", "yellow", "orange", "purple", "black", "white", "gray", "pink", "brown", "cyan")
SHAPES = ("circle", "square", "triangle", "rectangle", "star", "hexagon", "diamond", "ellipse", "pentagon", "cross")
RELATIONS = ("left of", "right of", "above", "below", "next to", "inside", "larger than", "smaller than")
CRITIC_SENTENCES = (
    "You are a careful critic of visual reasoning.",
    "Look at the image, read the question and check every step of the reasoning chain.",
    "For each step say whether it is correct or incorrect, and explain the error of an incorrect step.",
    "Answer with + if the step is correct and - if the step is incorrect.",
    "Reply with a JSON object that lists the steps and whether the final answer is correct.",
    "Question: How many shapes are in the image? Answer: 3",
    "Question: What colour is the largest shape? Options: A, B, C, D.",
    "Step 1: The image shows two shapes. Step 2: Therefore the answer is B.",
    "The description of the image is wrong: the shape is not there.",
    "The logic does not follow from the previous step, so this step is incorrect.",
    "The final answer is correct. The final answer is incorrect.",
    "Is the step correct? yes no true false right wrong valid invalid",
)


def _corpus() -> list[str]:
    """Deterministic text covering the words, numbers and JSON that critic prompts and answers use."""
    from stepcritic.data_prep.critique import format_critique

    lines = list(CRITIC_SENTENCES)
    for i, colour in enumerate(COLOURS):
        for j, shape in enumerate(SHAPES):
            other = f"{COLOURS[(i + j + 1) % len(COLOURS)]} {SHAPES[(i * 3 + j) % len(SHAPES)]}"
            relation = RELATIONS[(i + j) % len(RELATIONS)]
            lines.append(f"The {colour} {shape} is {relation} the {other}. There are {i + j} {shape}s.")
    for n_steps in range(1, 9):
        for pattern in range(4):
            steps = [{"step": k, "correct": (k + pattern) % 3 != 0} for k in range(1, n_steps + 1)]
            for item in steps:
                if not item["correct"]:
                    item["explanation"] = f"The {COLOURS[item['step'] % len(COLOURS)]} shape is not a {SHAPES[pattern]}."
            lines.append(format_critique({"steps": steps, "answer_correct": pattern % 2 == 0}))
    # The synthetic generator's own wording (cells, sizes, counts), so that the demo's steps are mostly whole-word
    # tokens: shorter sequences, and one token per word is one less thing a from-scratch model has to learn.
    from stepcritic.data_prep.render import CELL_NAMES, SIZES
    from stepcritic.data_prep.synth import synthesize

    lines.extend(f"The {size} shape is at the {cell}." for row in CELL_NAMES for cell in row for size in SIZES)
    for chain in synthesize(100, seed=4242, image_size=32):
        lines.append(chain["question"])
        lines.extend(step["text"] for step in chain["steps"])
    # Repetition gives the frequent words enough counts to become whole tokens.
    return lines * 3


def _train_tokenizer(vocab_size: int, special_tokens: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    # Digits are split one by one so step numbers and counts never merge into arbitrary multi-digit tokens.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=TURN_END,
        pad_token=PAD_TOKEN,
        model_max_length=4096,
        extra_special_tokens={"image_token": IMAGE_TOKEN},
    )


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


def _llava(tokenizer, image_size: int, patch_size: int, size: str):
    from transformers import LlavaConfig, LlavaProcessor, Qwen2Config, SiglipVisionConfig
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    # SigLIP has no CLS token and resizes to a square without cropping, so the whole picture is seen and every
    # image costs exactly (image_size / patch_size)^2 tokens.
    config = LlavaConfig(
        vision_config=SiglipVisionConfig(**_vision_sizes(image_size, patch_size, size)),
        text_config=Qwen2Config(**_text_sizes(tokenizer, size)),
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        tie_word_embeddings=True,
    )
    image_processor = SiglipImageProcessorPil(
        size={"height": image_size, "width": image_size}, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=patch_size,
        vision_feature_select_strategy="full",
        chat_template=CHAT_TEMPLATE,
        image_token=IMAGE_TOKEN,
        num_additional_image_tokens=0,
    )
    return config, processor


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


def build_tiny_critic(
    out_dir: str | os.PathLike,
    arch: str = "llava",
    seed: int = 0,
    image_size: int = 96,
    patch_size: int | None = None,
    vocab_size: int = 1024,
    vision_pretrain_steps: int = 0,
    size: str = "small",
    base_pretrain_steps: int = 0,
) -> str:
    """Build a randomly initialised tiny VLM critic and save model + processor to `out_dir`; returns the path.

    Deterministic: the same arguments give byte-identical weights and tokenizer. The default patch is
    one synthetic grid cell for LLaVA (96 px / 32: nine image tokens, so sequences stay short) and 16 px for
    Idefics3, whose 2x2 pixel shuffle needs an even patch grid. `vision_pretrain_steps` > 0 gives the
    vision tower a short supervised pre-training on rendered scenes (see `vision_pretrain.py`); the language
    model stays random unless `base_pretrain_steps` > 0, which then trains it (and the projector) on captions
    and questions about rendered scenes (see `base_pretrain.py`), on a GPU when there is one.
    """
    import torch
    from transformers import AutoModelForImageTextToText, GenerationConfig

    builders = {"llava": _llava, "idefics3": _idefics3}
    if arch not in builders:
        raise ValueError(f"unknown tiny arch {arch!r}; choose one of {ARCHS}")
    if size not in MODEL_SIZES:
        raise ValueError(f"unknown tiny size {size!r}; choose one of {sorted(MODEL_SIZES)}")
    patch_size = patch_size or DEFAULT_PATCH_SIZE[arch]
    if image_size % patch_size:
        raise ValueError(f"image_size {image_size} must be a multiple of patch_size {patch_size}")
    specials = [PAD_TOKEN, TURN_START, TURN_END, IMAGE_TOKEN] + (list(IDEFICS3_TOKENS) if arch == "idefics3" else [])
    tokenizer = _train_tokenizer(vocab_size, specials)
    config, processor = builders[arch](tokenizer, image_size, patch_size, size)

    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config)
    # The medium size is built on a GPU when there is one; the small one on the CPU, so that the demo's cached
    # build is the same wherever it runs.
    on_gpu = torch.cuda.is_available() and size != "small"
    if on_gpu:
        model.to("cuda")
    if vision_pretrain_steps:
        from stepcritic.train.vision_pretrain import pretrain_vision

        pretrain_vision(model, processor, vision_pretrain_steps, seed=seed)
    if base_pretrain_steps:
        from stepcritic.train.base_pretrain import pretrain_base

        pretrain_base(model, processor, base_pretrain_steps, seed=seed, image_size=image_size, bf16=on_gpu,
                      device="cuda" if on_gpu else "cpu", batch_size=64 if on_gpu else 16,
                      workers=min(8, os.cpu_count() or 1) if on_gpu else 0)
    model.to("cpu")
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, max_new_tokens=256
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return str(out)


def default_cache_dir() -> Path:
    return Path(os.environ.get("STEPCRITIC_CACHE", Path.home() / ".cache" / "stepcritic"))


def tiny_critic_path(cache_dir: str | os.PathLike | None = None, arch: str = "llava", **build_kwargs) -> str:
    """Path of a cached tiny critic built with these arguments, building it on first use.

    The folder name hashes the build arguments, the builder version and the transformers version, so a change
    to any of them gives a fresh build.  Building happens in a temporary sibling folder that is renamed into
    place, so concurrent processes (DDP ranks, parallel tests) never see a half-written model.
    """
    import transformers

    key = json.dumps(
        {"arch": arch, **build_kwargs, "builder": TINY_BUILD_VERSION, "transformers": transformers.__version__},
        sort_keys=True,
    )
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / f"tiny-{arch}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    if target.is_dir():
        return str(target)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
    try:
        build_tiny_critic(staging, arch=arch, **build_kwargs)
        os.rename(staging, target)
    except OSError:
        if not target.is_dir():  # losing the rename race to another process is fine; anything else is not
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(target)


def load_critic(path_or_name: str | os.PathLike, dtype=None):
    """Load (model, processor) from a full checkpoint or from a PEFT LoRA adapter folder.

    For an adapter (`adapter_config.json` present) the base model named by `base_model_name_or_path` is loaded
    first; the processor comes from the adapter folder when the trainer saved one there, else from the base.
    `dtype` is passed to `from_pretrained` (a torch dtype, its name, or "auto").
    """
    from transformers import AutoModelForImageTextToText, AutoProcessor

    source = Path(path_or_name)
    adapter_config = source / "adapter_config.json"
    if not adapter_config.is_file():
        model = AutoModelForImageTextToText.from_pretrained(str(path_or_name), dtype=dtype)
        return model, AutoProcessor.from_pretrained(str(path_or_name))

    from peft import PeftModel

    base = json.loads(adapter_config.read_text())["base_model_name_or_path"]
    model = AutoModelForImageTextToText.from_pretrained(base, dtype=dtype)
    model = PeftModel.from_pretrained(model, str(source))
    has_processor = any((source / name).is_file() for name in ("processor_config.json", "tokenizer_config.json"))
    return model, AutoProcessor.from_pretrained(str(source) if has_processor else base)
