"""Randomly initialised checkpoints of every architecture the recipes train, with processors built offline.

The real-model recipes name Hub checkpoints (Qwen2.5-VL-3B/7B, Qwen3-VL-4B/8B, Gemma 3 4B, InternVL3-2B/8B,
SmolVLM, and the text-only Qwen2.5-1.5B and Qwen3-1.7B); the Hub is out of reach in tests and
on a fresh GPU box. `build_random_checkpoint` saves a model of the same architecture with random weights, either
tiny (`archs.tiny_config`: a test runs every recipe in seconds on a CPU) or of the published size
(`archs.real_config`: a GPU run measures time and memory of the real shape), next to a processor made here:

* a byte-level BPE tokenizer trained offline (`tokenizer.train_tokenizer`) carrying the family's special tokens
  (Qwen: `<|im_start|>`, `<|im_end|>`, `<|vision_start|>`, `<|image_pad|>`, `<|vision_end|>`; Idefics3:
  `<image>`, `<fake_token_around_image>`, `<global-img>`, the tile tags; Gemma 3: `<start_of_image>`,
  `<image_soft_token>`, `<end_of_image>`; InternVL: `<img>`, `<IMG_CONTEXT>`, `</img>`);
* a ChatML chat template with `{% generation %}` markers around assistant turns (TRL's assistant_only_loss),
  each image written as the family's placeholder;
* the family's image processor built from its defaults (the PIL variant when torchvision is missing).

A text-only family (Qwen2.5, Qwen3) gets no image processor: its tokenizer, in a `modality.TextProcessor`, carries
the family's own published chat template (TRL ships it, and swaps in its `{% generation %}` variant when training
with assistant_only_loss, exactly as for the real checkpoint), and its model is a causal LM.

The model config's token ids (image token, vision start/end, pad, eos) are set from the tokenizer, and its
vocabulary is at least the tokenizer's. Nothing here is a trained model: it exists to run the code paths.

Qwen2.5-VL's own processor class requires a video processor, which transformers 5.23 only has for torchvision;
without torchvision the checkpoint gets `PaddleOCRVLProcessor` instead, which expands images exactly as
Qwen2-VL does (image_grid_thw / merge_size^2 `<|image_pad|>` tokens, same model inputs) but has no video side.
Qwen3-VL likewise (its processor expands images the same way). InternVL's processor needs a video processor
too; InternVL checkpoints get a `LlavaProcessor`, with or without torchvision, that expands one tile at the
tower's size per image (no dynamic tiling). Gemma 3's own processor has no video side and is used as it is.

    python -m stepcritic.train.tiny.offline_models --model qwen2.5-vl-3b --size real --out runs/qwen3b-random
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from functools import cache

SIZES = ("tiny", "real")
PAD, TURN_START, TURN_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
DEFAULT_VOCAB = 1024  # trained BPE vocabulary (the real-size model keeps its published embedding size)

# Per architecture: extra special tokens, the tokenizer attributes processors look up, and what one image part
# of a message becomes in the chat template (the processor expands the image token to the image's length).
_FAMILIES = {
    "qwen2_5_vl": dict(
        specials=["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"],
        named={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
               "vision_start_token": "<|vision_start|>", "vision_end_token": "<|vision_end|>"},
        image="<|vision_start|><|image_pad|><|vision_end|>",
    ),
    "idefics3": dict(
        # Image splitting tags every tile with <row_i_col_j> (up to 6 x 6 tiles): one token each, as in SmolVLM.
        specials=["<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>",
                  *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))],
        named={"image_token": "<image>"},
        image="<image>",
    ),
    "llava": dict(specials=["<image>"], named={"image_token": "<image>"}, image="<image>"),
    # Gemma 3's processor turns each <start_of_image> into <start_of_image>, mm_tokens_per_image soft tokens and
    # <end_of_image>, and looks all three up on the tokenizer under these names.
    "gemma3": dict(
        specials=["<start_of_image>", "<end_of_image>", "<image_soft_token>"],
        named={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"},
        image="<start_of_image>",
    ),
    # InternVL wraps each tile's <IMG_CONTEXT> tokens in <img> ... </img>; the stand-in processor (see
    # build_processor) only expands <IMG_CONTEXT>, so the template writes the wrapping itself.
    "internvl": dict(
        specials=["<img>", "</img>", "<IMG_CONTEXT>"],
        named={"image_token": "<IMG_CONTEXT>", "context_image_token": "<IMG_CONTEXT>", "start_image_token": "<img>",
               "end_image_token": "</img>"},
        image="<img><IMG_CONTEXT></img>",
    ),
}
# Qwen3-VL keeps Qwen2.5-VL's vision tokens and image placeholder.
_FAMILIES["qwen3_vl"] = _FAMILIES["qwen2_5_vl"]
# Text-only families: no image; the chat template is the family's published one, as TRL ships it.
_FAMILIES["qwen2"] = dict(specials=[], named={}, image=None, template="qwen2_5.jinja")
_FAMILIES["qwen3"] = dict(specials=["<think>", "</think>"], named={}, image=None, template="qwen3.jinja")
ARCHITECTURES = tuple(_FAMILIES)


def is_text_family(model_type: str) -> bool:
    return _FAMILIES[model_type]["image"] is None


@cache
def _has_torchvision() -> bool:
    """A torchvision that imports (a wheel built for another torch is installed but fails on import)."""
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:
        import torchvision.transforms.v2.functional  # noqa: F401
    except Exception:
        return False
    return True


def chat_template(model_type: str) -> str:
    """The tiny critic's ChatML template (assistant turns inside `{% generation %}`) with this family's image."""
    from stepcritic.train.tiny.tokenizer import CHAT_TEMPLATE, IMAGE_TOKEN

    if is_text_family(model_type):
        from importlib.resources import files

        return (files("trl") / "chat_templates" / _FAMILIES[model_type]["template"]).read_text()
    return CHAT_TEMPLATE.replace(IMAGE_TOKEN, _FAMILIES[model_type]["image"])


def build_tokenizer(model_type: str, vocab_size: int = DEFAULT_VOCAB, model_max_length: int = 4096):
    """An offline byte-level BPE tokenizer with the family's special tokens; eos `<|im_end|>`, pad `<|endoftext|>`."""
    from transformers import PreTrainedTokenizerFast

    from stepcritic.train.tiny.tokenizer import train_tokenizer

    family = _FAMILIES[model_type]
    trained = train_tokenizer(vocab_size, [PAD, TURN_START, TURN_END, *family["specials"]])
    # Re-wrapped so the processor finds the family's token names (Qwen looks up `tokenizer.image_token`).
    return PreTrainedTokenizerFast(tokenizer_object=trained.backend_tokenizer, eos_token=TURN_END, pad_token=PAD,
                                   model_max_length=model_max_length, extra_special_tokens=family["named"])


def _image_processor(pil_class: str, torchvision_class: str, module: str, **kwargs):
    """The family's image processor: the torchvision-backed class when available, else its PIL twin."""
    import importlib

    if _has_torchvision():
        return getattr(importlib.import_module("transformers"), torchvision_class)(**kwargs)
    return getattr(importlib.import_module(f"transformers.models.{module}"), pil_class)(**kwargs)


def build_processor(model_type: str, config, tokenizer, size: str):
    """The family's processor around `tokenizer`, sized to `config`'s vision tower (a text family: the tokenizer in a
    `TextProcessor`)."""
    template = chat_template(model_type)
    if is_text_family(model_type):
        from stepcritic.train.modality import TextProcessor

        tokenizer.chat_template = template
        return TextProcessor(tokenizer)
    vision = config.vision_config
    if model_type in ("qwen2_5_vl", "qwen3_vl"):
        kwargs = dict(patch_size=vision.patch_size, merge_size=vision.spatial_merge_size,
                      temporal_patch_size=vision.temporal_patch_size)
        if model_type == "qwen3_vl":  # Qwen3-VL's preprocessor_config.json normalises to [-1, 1]
            kwargs.update(image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
        image_processor = _image_processor("Qwen2VLImageProcessorPil", "Qwen2VLImageProcessor",
                                           "qwen2_vl.image_processing_pil_qwen2_vl", **kwargs)
        if _has_torchvision() and model_type == "qwen2_5_vl":
            from transformers import Qwen2_5_VLProcessor, Qwen2VLVideoProcessor

            return Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                       video_processor=Qwen2VLVideoProcessor(**kwargs), chat_template=template)
        if _has_torchvision():
            from transformers import Qwen3VLProcessor, Qwen3VLVideoProcessor

            return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                    video_processor=Qwen3VLVideoProcessor(**kwargs), chat_template=template)
        from transformers import PaddleOCRVLProcessor

        return PaddleOCRVLProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=template)
    if model_type == "idefics3":
        from transformers import Idefics3Processor

        side = vision.image_size
        # Tiny: one global view of a tiny tower; real: SmolVLM's tiling (tiles of the tower's size, up to 4x).
        sizes = (dict(do_image_splitting=False, size={"longest_edge": side}) if size == "tiny"
                 else dict(do_image_splitting=True, size={"longest_edge": 4 * side}))
        image_processor = _image_processor("Idefics3ImageProcessorPil", "Idefics3ImageProcessor",
                                           "idefics3.image_processing_pil_idefics3",
                                           max_image_size={"longest_edge": side}, **sizes)
        image_seq_len = (side // vision.patch_size) ** 2 // config.scale_factor ** 2
        return Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=image_seq_len,
                                 chat_template=template)
    if model_type == "llava":
        from transformers import LlavaProcessor

        side = vision.image_size
        image_processor = _image_processor("SiglipImageProcessorPil", "SiglipImageProcessor",
                                           "siglip.image_processing_pil_siglip", size={"height": side, "width": side})
        # SigLIP has no CLS token: (side / patch)^2 image tokens, none extra.
        return LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=vision.patch_size,
                              vision_feature_select_strategy=config.vision_feature_select_strategy,
                              num_additional_image_tokens=0, image_token="<image>", chat_template=template)
    if model_type == "gemma3":
        from transformers import Gemma3Processor

        side = vision.image_size
        # Gemma 3 squashes every image to the tower's square (pan-and-scan off, its default)
        image_processor = _image_processor("Gemma3ImageProcessorPil", "Gemma3ImageProcessor",
                                           "gemma3.image_processing_pil_gemma3", size={"height": side, "width": side})
        return Gemma3Processor(image_processor=image_processor, tokenizer=tokenizer,
                               image_seq_length=config.mm_tokens_per_image, chat_template=template)
    if model_type == "internvl":
        from transformers import LlavaProcessor

        # InternVLProcessor cannot be built without torchvision (it requires a video processor, and transformers
        # has none without it), so a LlavaProcessor stands in: one tile per image at the tower's size (no dynamic
        # tiling), its <IMG_CONTEXT> expanded to (side / (patch / downsample_ratio))^2 tokens, which is
        # InternVL's image_seq_length; the model inputs (pixel_values, input_ids) are InternVL's for one tile.
        side, patch = vision.image_size[0], vision.patch_size[0]
        image_processor = _image_processor("GotOcr2ImageProcessorPil", "GotOcr2ImageProcessor",
                                           "got_ocr2.image_processing_pil_got_ocr2", crop_to_patches=False,
                                           size={"height": side, "width": side})
        return LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer,
                              patch_size=round(patch / config.downsample_ratio), vision_feature_select_strategy="full",
                              num_additional_image_tokens=0, image_token="<IMG_CONTEXT>", chat_template=template)
    raise KeyError(model_type)


def match_token_ids(config, tokenizer, model_type: str, size: str) -> None:
    """Point the config's special token ids at the tokenizer's; the tiny vocabulary becomes the tokenizer's."""
    ids = tokenizer.convert_tokens_to_ids
    text = config.get_text_config()
    if size == "tiny":
        text.vocab_size = len(tokenizer)
    elif text.vocab_size < len(tokenizer):
        raise ValueError(f"the real-size vocabulary ({text.vocab_size}) is smaller than the tokenizer "
                         f"({len(tokenizer)})")
    text.pad_token_id, text.eos_token_id, text.bos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id, None
    if is_text_family(model_type):
        return
    if model_type in ("qwen2_5_vl", "qwen3_vl"):
        config.image_token_id = ids("<|image_pad|>")
        config.video_token_id = ids("<|video_pad|>")
        config.vision_start_token_id = ids("<|vision_start|>")
        config.vision_end_token_id = ids("<|vision_end|>")
    elif model_type == "gemma3":
        config.image_token_index = ids("<image_soft_token>")
        config.boi_token_index, config.eoi_token_index = ids("<start_of_image>"), ids("<end_of_image>")
    elif model_type == "internvl":
        config.image_token_id = ids("<IMG_CONTEXT>")
    else:  # idefics3, llava (LLaVA maps image_token_id onto its image_token_index)
        config.image_token_id = ids("<image>")


def resolve(name_or_alias: str, size: str) -> tuple[str, object]:
    """(model_type, config) for a Hub name, an alias (qwen2.5-vl-3b, smolvlm) or a model type (llava)."""
    from stepcritic.train import archs

    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    model_type = name_or_alias if name_or_alias in _FAMILIES else archs.model_type_of(name_or_alias)
    if model_type not in _FAMILIES:
        raise ValueError(f"{name_or_alias!r} is a {model_type!r} model; offline checkpoints exist for {ARCHITECTURES}")
    if size == "tiny":
        return model_type, archs.tiny_config(model_type)
    if name_or_alias in _FAMILIES:
        raise ValueError(f"size 'real' needs a model name or alias (e.g. qwen2.5-vl-3b), not the type {model_type!r}")
    return model_type, archs.real_config(name_or_alias)


def build_random_checkpoint(name_or_alias: str, out_dir: str | os.PathLike, size: str = "tiny", dtype=None,
                            seed: int = 0, device: str | None = None, vocab_size: int = DEFAULT_VOCAB) -> str:
    """Save a randomly initialised `name_or_alias` model and an offline processor to `out_dir`; returns the path.

    `size`: "tiny" (a few hundred thousand parameters) or "real" (the published shape, e.g. 3.75B parameters for
    qwen2.5-vl-3b). `dtype` (torch dtype or its name) defaults to float32 for tiny and bfloat16 for real;
    `device` builds the weights there (e.g. "cuda": initialising billions of parameters on a CPU takes minutes).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, GenerationConfig

    model_type, config = resolve(name_or_alias, size)
    dtype = dtype or ("float32" if size == "tiny" else "bfloat16")
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    text = config.get_text_config()
    tokenizer = build_tokenizer(model_type, vocab_size, model_max_length=min(text.max_position_embeddings, 131072))
    processor = build_processor(model_type, config, tokenizer, size)
    match_token_ids(config, tokenizer, model_type, size)

    torch.manual_seed(seed)
    with torch.device(device or "cpu"):
        auto = AutoModelForCausalLM if is_text_family(model_type) else AutoModelForImageTextToText
        model = auto.from_config(config, dtype=dtype)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id, max_new_tokens=256)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    n_params = sum(p.numel() for p in model.parameters())
    _write_card(out_dir, name_or_alias, model_type, size, str(dtype).replace("torch.", ""), seed, n_params,
                type(processor).__name__, len(tokenizer))
    return str(out_dir)


def _write_card(out_dir, name, model_type, size, dtype, seed, n_params, processor_class, vocab) -> None:
    notes = {("PaddleOCRVLProcessor", "qwen2_5_vl"): "Qwen2_5_VLProcessor", ("PaddleOCRVLProcessor", "qwen3_vl"):
             "Qwen3VLProcessor", ("LlavaProcessor", "internvl"): "InternVLProcessor"}
    stands_in_for = notes.get((processor_class, model_type))
    note = (f" (stands in for {stands_in_for}, which needs torchvision for its video side; images are expanded "
            "the same way" + (", one tile each" if model_type == "internvl" else "") + ")" if stands_in_for else "")
    card = "\n".join([
        f"# Random {model_type} checkpoint ({size}): not a trained model", "",
        f"Built offline by `python -m stepcritic.train.tiny.offline_models --model {name} --size {size} "
        f"--seed {seed}`.",
        f"Architecture of `{name}`, {n_params:,} parameters, randomly initialised, dtype {dtype}. For running "
        "StepCritic's recipes and measuring time and memory without downloading anything; it knows nothing.", "",
        f"- tokenizer: byte-level BPE trained offline, {vocab} tokens, the family's special tokens, "
        + ("the family's published chat template" if is_text_family(model_type) else
           "ChatML template with `{% generation %}` markers"),
        f"- processor: `{processor_class}`{note}", "",
    ])
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(card)
    with open(os.path.join(out_dir, "stepcritic_offline.json"), "w") as f:
        json.dump({"model": name, "model_type": model_type, "size": size, "seed": seed, "dtype": dtype,
                   "parameters": n_params}, f, indent=2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stepcritic.train.tiny.offline_models",
        description="Save a randomly initialised checkpoint of a recipe's architecture with an offline processor.")
    parser.add_argument("--model", required=True,
                        help="Hub name, alias (qwen2.5-vl-3b, qwen2.5-vl-7b, qwen3-vl-4b, qwen3-vl-8b, gemma-3-4b, "
                             "internvl3-2b, internvl3-8b, smolvlm, and the text-only qwen2.5-1.5b, qwen3-1.7b) or "
                             "model type "
                             "(llava, qwen2_5_vl, qwen3_vl, gemma3, internvl, idefics3, qwen2, qwen3; tiny only)")
    parser.add_argument("--size", choices=SIZES, default="tiny", help="tiny test shape or the published shape")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--dtype", default=None, help="float32 (tiny default), bfloat16 (real default), float16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="build the weights on this device, e.g. cuda (faster for real)")
    args = parser.parse_args(argv)
    try:
        path = build_random_checkpoint(args.model, args.out, args.size, args.dtype, args.seed, args.device)
    except (KeyError, ValueError) as err:
        print(f"offline_models: error: {err.args[0] if err.args else err}", file=sys.stderr)
        return 2
    print(f"random {args.size} {args.model} -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
