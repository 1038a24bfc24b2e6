"""Padding-free batches for vision-language SFT and PRM training (`padding_free: true` in a recipe).

A padded batch spends the model's matmuls on pad tokens: PRM and critique conversations differ in length by
several times within a batch. TRL packs text datasets only ("Padding-free training is not yet supported for vision
datasets"), so the collator here takes TRL's padded vision batch and lays its sequences end to end in one row,
with position ids that restart at 0 for each sequence and no attention mask. transformers reads the restarts as
sequence boundaries: FlashAttention-2 runs variable-length attention over them (the GPU win), SDPA and eager
build a block-diagonal causal mask (same result, so the CPU tests can check it, but no faster there).

Images stay with their sequences: these architectures put the image features into the image tokens in order,
and the order of the tokens does not change. Only families with plain 1-D rotary positions qualify; Qwen-VL's
multimodal RoPE derives 3-D positions from the padded layout, and Gemma 3's image tokens attend both ways
through a per-batch mask, so they are refused with one clear line rather than trained wrongly.
"""

from __future__ import annotations

from stepcritic.errors import UserError

PACKABLE = frozenset({"llava", "idefics3", "smolvlm"})


class NotPackable(UserError):
    """`padding_free: true` on an architecture whose positions or masks cannot be packed this way."""


def check_packable(model) -> None:
    model_type = model.config.model_type
    if model_type not in PACKABLE:
        raise NotPackable(f"padding_free: true is not supported for model_type {model_type!r} (vision batches pack "
                          f"only for {', '.join(sorted(PACKABLE))}); set padding_free: false")


def pack(batch: dict) -> dict:
    """One row holding every sequence of a padded batch (left or right padding), position ids per sequence.

    Every per-token tensor (shaped like `input_ids`) is packed the same way; the rest (pixel values, image sizes)
    passes through. The first label of each sequence is dropped: packed, the token before it is the previous
    sequence's last one, and nothing should be learnt across that boundary (it is a prompt token anyway).
    """
    import torch

    mask = batch["attention_mask"].bool()
    lengths = mask.sum(1)
    packed = {}
    for key, value in batch.items():
        if key == "attention_mask":
            continue
        if torch.is_tensor(value) and value.shape == mask.shape:
            packed[key] = value[mask][None]
        else:
            packed[key] = value
    if "labels" in packed:
        starts = torch.cumsum(lengths, 0) - lengths
        packed["labels"][0, starts] = -100
    packed["position_ids"] = torch.cat([torch.arange(int(n)) for n in lengths])[None]
    return packed


class PaddingFreeCollator:
    """Wraps a vision collator (TRL's, or the PRM's `HiddenJudgementCollator`) and packs what it returns."""

    def __init__(self, collator):
        self.collator = collator

    def __call__(self, examples):
        return pack(self.collator(examples))


def install(recipe, trainer_factory):
    """Build the trainer with TRL's own padding-free switch off (it refuses vision data), then pack its batches
    when the recipe asks for `padding_free`. `trainer_factory()` builds the trainer."""
    from stepcritic.train import common

    args = recipe.training_args
    wanted = bool(getattr(args, "padding_free", False))
    if wanted:
        args.padding_free = False
    try:
        trainer = trainer_factory()
    finally:
        if wanted:
            args.padding_free = True
    if wanted:
        base = trainer.model.get_base_model() if common.is_peft(trainer.model) else trainer.model
        check_packable(base)
        trainer.data_collator = PaddingFreeCollator(trainer.data_collator)
        common.logger.info("padding_free: each vision batch is packed into one row (position ids per sequence)")
        attention = getattr(base.config, "_attn_implementation", None) or "default"
        if "flash" not in attention:
            # measured: recipes/tiny-gpu/prm.yaml on one H200 ran 3.7 steps/s packed under SDPA, 10.1 padded
            common.logger.warning(
                f"padding_free under attention {attention!r} masks one long row block-diagonally, which is slower "
                "than padded batches; attn_implementation: flash_attention_2 packs without a mask")
    return trainer
