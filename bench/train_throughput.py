"""Training throughput of a recipe's model, randomly initialised (a benchmark, not a test).

    [accelerate launch --config_file recipes/accelerate/zero2.yaml -m] stepcritic.bench.train_throughput \
            --config RECIPE [--steps N] [--real-size] [--seq-len L] [--image-size PX]

N training steps of the recipe's model (the tiny critic for tiny recipes; else a tiny config of the recipe's
architecture, or with --real-size its published shape from `train.archs.real_config`), with the recipe's
LoRA/freezing, batch size, max_length, bf16 and activation checkpointing, on synthetic batches (text only, or
with --image-size one random image per sample: Qwen2-VL, Qwen2.5-VL, Qwen3-VL). Under `accelerate launch` the
model goes through the launcher's config (DDP, DeepSpeed ZeRO-2/3). Reports samples/s, tokens/s, the model FLOPs of a
step (see `training_flops`) and, on a GPU, peak memory and model FLOPs utilisation = model FLOP/s / peak, the
peak being the GPU's dense bf16 rate in PEAK_FLOPS.
"""

from __future__ import annotations

import argparse
import json
import re

from stepcritic.bench.timing import timed

# Dense bf16 tensor-core peaks (no sparsity) by GPU name fragment, in FLOP/s.
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12, "L4": 121e12}


def peak_flops(device_name: str) -> float | None:
    return next((flops for key, flops in PEAK_FLOPS.items() if key in device_name), None)


def build_model(recipe, real_size: bool, device="cpu", fused_loss: bool = True, liger: bool = False):
    import torch
    from transformers import AutoModelForImageTextToText

    from stepcritic.train import archs, common

    name = recipe.model_args.model_name_or_path
    from stepcritic.train.loading import model_source

    if model_source(name) is not None:
        model, _ = common.load_model(recipe)  # a model this package builds: small, and built offline
    else:
        # No weights are downloaded: the real shape, or a tiny config of the same architecture.
        config = archs.real_config(name) if real_size else archs.tiny_config(archs.model_type_of(name))
        dtype = torch.bfloat16 if torch.device(device).type == "cuda" and real_size else torch.float32
        with torch.device(device):  # a real-size random init on the CPU alone takes minutes
            model = AutoModelForImageTextToText.from_config(
                config, dtype=dtype, attn_implementation=recipe.model_args.attn_implementation)
    if liger:  # liger-kernel's fused linear cross-entropy alone: its other kernels would change more than the loss
        from liger_kernel.transformers import _apply_liger_kernel_to_instance

        _apply_liger_kernel_to_instance(model=model, fused_linear_cross_entropy=True, cross_entropy=False, rope=False,
                                        rms_norm=False, swiglu=False, geglu=False, layer_norm=False)
    elif fused_loss:  # before PEFT wraps it, as TRL's trainers add it
        from trl.trainer.utils import add_fused_lm_head

        add_fused_lm_head(model)
    return common.prepare_model(recipe, model)


def synthetic_batch(model, batch_size: int, length: int, image_size: int | None, device) -> dict:
    """Random token ids (below every special id, so none is read as an image token) and, with image_size,
    one random image per sample in the Qwen2-VL layout: patch rows of 3 x t x p x p values, a (1, h, w)
    grid, h*w / merge^2 image tokens at the start of each sequence, not trained on."""
    import torch

    config = model.config
    special = [getattr(config, key, None) for key in ("image_token_id", "video_token_id", "vision_start_token_id",
                                                      "vision_end_token_id", "image_token_index")]
    high = min([config.get_text_config().vocab_size] + [i for i in special if i is not None])
    input_ids = torch.randint(0, high, (batch_size, length), device=device)
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    labels = input_ids.clone()
    if image_size:
        if config.model_type not in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):  # Qwen3-VL kept Qwen2-VL's image inputs
            raise ValueError(f"--image-size is implemented for the Qwen2-VL family (Qwen2-VL, Qwen2.5-VL, Qwen3-VL), "
                             f"not {config.model_type!r}")
        vision = config.vision_config
        merge, patch, frames = vision.spatial_merge_size, vision.patch_size, vision.temporal_patch_size
        side = max(merge, image_size // (patch * merge) * merge)  # patches per image side
        image_tokens = side * side // merge**2
        if image_tokens >= length:
            raise ValueError(f"{image_tokens} image tokens do not fit in --seq-len {length}")
        input_ids[:, :image_tokens] = config.image_token_id
        labels[:, :image_tokens] = -100
        mm_types = torch.zeros_like(input_ids, dtype=torch.int32)
        mm_types[:, :image_tokens] = 1
        dtype = next(model.parameters()).dtype
        batch.update(pixel_values=torch.randn(batch_size * side * side, 3 * frames * patch * patch,
                                              device=device, dtype=dtype),
                     image_grid_thw=torch.tensor([[1, side, side]] * batch_size, device=device),
                     mm_token_type_ids=mm_types)
        batch["image_patches"] = batch_size * side * side
    batch["labels"] = labels
    return batch


def training_flops(model, tokens: int, seq_len: int, image_patches: int = 0) -> float:
    """Model FLOPs of one optimiser step (no recompute counted: that is hardware, not model, work).
    Per text token: 2N forward + 2N for the activation gradients + 2 x trainable-N for the weight gradients,
    N = the language model's matrix parameters (decoder + output head, not the embedding lookup), plus causal
    self-attention (QK^T and AV over half the sequence on average, times 3 for the backward).
    Per image patch: 2 x vision-N forward, times 3 when the vision side trains. Vision attention is left out."""
    from stepcritic.train import archs
    from stepcritic.train.common import param_size as size

    text = model.config.get_text_config()
    decoder = model.get_decoder()
    decoder_ids = {id(p) for p in decoder.parameters()} - {id(model.get_input_embeddings().weight)}
    n_text = trainable_text = n_vision = trainable_vision = 0
    for name, param in model.named_parameters():
        if id(param) in decoder_ids:
            n_text += size(param)
            trainable_text += size(param) if param.requires_grad else 0
        elif re.fullmatch(archs.VISION_SIDE_REGEX, name):
            n_vision += size(param)
            trainable_vision += size(param) if param.requires_grad else 0
    head = model.get_output_embeddings().weight
    n_text += size(head)
    trainable_text += size(head) if head.requires_grad else 0
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    attention = 6 * text.num_hidden_layers * seq_len * text.num_attention_heads * head_dim
    per_token = 4 * n_text + 2 * trainable_text + attention
    per_patch = 2 * n_vision * (3 if trainable_vision else 1)
    return tokens * per_token + image_patches * per_patch


def train_throughput(recipe, steps: int, real_size: bool, seq_len: int | None, image_size: int | None = None,
                     loss: str = "fused") -> dict:
    """Time `steps` optimiser steps. Run it plain (one device) or under `accelerate launch` with any config in
    recipes/accelerate/ (DeepSpeed ZeRO-2/3 included): the model and optimiser go through `Accelerator.prepare`."""
    import os

    import torch
    from accelerate import Accelerator

    from stepcritic.train import common

    args = recipe.training_args
    cuda = torch.cuda.is_available() and not args.use_cpu
    # Under `accelerate launch` the launcher's precision wins; run plainly, the recipe's bf16 does.
    precision = os.environ.get("ACCELERATE_MIXED_PRECISION") or ("bf16" if cuda and args.bf16 else "no")
    deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED") == "true"  # (with DS_ACCELERATOR=cpu on CPU)
    accelerator = Accelerator(cpu=not cuda and not deepspeed, mixed_precision=precision)
    batch_size = args.per_device_train_batch_size
    if accelerator.state.deepspeed_plugin is not None:
        # no DataLoader goes through prepare(), so DeepSpeed cannot infer its "auto" micro-batch size
        accelerator.state.deepspeed_plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = batch_size
    fused = loss == "fused"
    model = build_model(recipe, real_size, accelerator.device, fused_loss=fused,
                        liger=loss == "liger").to(accelerator.device).train()
    if args.activation_checkpointing:
        model.activation_checkpointing_enable(args.activation_checkpointing_kwargs)
    length = seq_len or getattr(args, "max_length", None) or 1024
    batch = synthetic_batch(model, batch_size, length, image_size, accelerator.device)
    image_patches = batch.pop("image_patches", 0)
    trainable, total = common.count_parameters(model)
    flops_per_step = training_flops(model, batch_size * length, length, image_patches) * accelerator.num_processes
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    model, optimizer = accelerator.prepare(model, optimizer)

    def step():
        with accelerator.autocast():
            # fused: TRL's LM head, only labelled positions, in tiles (what SFT/PRM/DPO training runs);
            # full: (batch, seq, vocab) logits upcast to fp32, transformers' own loss; liger: its patched forward
            loss_value = (model(**batch, fused_lm_head=True) if fused else model(**batch)).loss
        accelerator.backward(loss_value)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # warm-up: allocation, kernels, autotuning
    accelerator.wait_for_everyone()
    seconds = timed(step, steps)
    samples = steps * batch_size * accelerator.num_processes
    report = {"device": torch.cuda.get_device_name() if cuda else "cpu", "processes": accelerator.num_processes,
              "distributed": accelerator.distributed_type.value, "precision": precision, "loss": loss,
              "parameters": total, "trainable": trainable, "per_device_batch_size": batch_size, "seq_len": length,
              "image_tokens_per_sample": int((batch["labels"][0] == -100).sum()),
              "activation_checkpointing": bool(args.activation_checkpointing),
              "steps": steps, "seconds": round(seconds, 3), "steps_per_s": round(steps / seconds, 3),
              "samples_per_s": round(samples / seconds, 2), "tokens_per_s": round(samples * length / seconds, 1),
              "model_tflops_per_step": round(flops_per_step / 1e12, 2)}
    if cuda:
        report["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
        peak = peak_flops(report["device"])
        if peak:
            per_second = flops_per_step * steps / seconds
            report.update(peak_flops_per_gpu=peak, mfu=round(per_second / (peak * accelerator.num_processes), 4))
    return report


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.bench.train_throughput", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="recipe YAML")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--real-size", action="store_true", help="the published architecture, random weights")
    parser.add_argument("--seq-len", type=int, help="tokens per sample (default: the recipe's max_length)")
    parser.add_argument("--image-size", type=int,
                        help="one random image of this side (px) per sample, Qwen2-VL family incl. Qwen3-VL "
                             "(default: text only)")
    parser.add_argument("--loss", choices=("fused", "full", "liger"), default="fused",
                        help="fused: TRL's fused LM head over labelled positions only, what the trainers run "
                             "(default); full: the model's own loss over full fp32 logits (the README's older rows); "
                             "liger: liger-kernel's fused linear cross-entropy (needs liger-kernel)")
    return parser


def main(argv=None) -> int:
    from stepcritic.train.config import parse_recipe

    args, overrides = make_parser().parse_known_args(argv)
    report = train_throughput(parse_recipe(args.config, overrides), args.steps, args.real_size, args.seq_len,
                              args.image_size, args.loss)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
