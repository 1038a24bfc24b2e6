"""What every training method shares: model loading, LoRA, vision freezing, data, resume, saving, model card.

The method modules (`sft`, `dpo`, `prm`, `reward`, `grpo`) only build their trainer; `run.train` calls the
helpers here around it, so every method logs, resumes and saves the same way.
"""

from __future__ import annotations

import json
import logging
import os

from stepcritic.data_prep.contract import TRAIN, DataContractError, missing_columns
from stepcritic.errors import UserError
from stepcritic.train import archs, modality

logger = logging.getLogger("stepcritic.train")


# ----------------------------------------------------------------------------- model

def cpu_has_bf16() -> bool:
    """Whether this CPU computes in bfloat16 natively (avx512_bf16 or AMX). There bfloat16 autocast trains the tiny
    critics 1.25 to 1.4 times as fast as float32 (docs/tiny-critic.md); elsewhere it is emulated and slower than
    float32, so a run asks for it only where this says yes."""
    import torch

    # torch capped below AVX-512 (ATEN_CPU_CAPABILITY=avx2, as on most CPUs) runs bfloat16 emulated
    if not getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "AVX512")().startswith("AVX512"):
        return False
    cpu = getattr(torch, "cpu", None)
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, probe, lambda: False)()) for probe in probes)


def torch_dtype(name):
    """`ModelConfig.dtype` ("auto", "bfloat16", ...) as what `from_pretrained` takes (None: its default)."""
    import torch

    if name in (None, "auto") or isinstance(name, torch.dtype):
        return name
    return getattr(torch, name)


def load_model(recipe, path: str | None = None, trainable: bool = True):
    """(model, processor) for the recipe: the tiny critic, a checkpoint, or base + LoRA adapter folder.

    An adapter folder (e.g. an SFT output used as the start of DPO) comes back as a `PeftModel` whose adapter
    keeps training when `trainable`; 4/8-bit loading follows `ModelConfig.load_in_4bit/8bit`.
    """
    from trl import get_quantization_config

    from stepcritic.train.loading import load_critic

    path = path or recipe.model_path()
    model_args = recipe.model_args
    init_kwargs = {"dtype": torch_dtype(model_args.dtype), "attn_implementation": model_args.attn_implementation}
    quantization = get_quantization_config(model_args)
    if quantization is not None:
        from accelerate import PartialState

        # Quantised weights are placed at load time, each process on its own GPU.
        init_kwargs.update(quantization_config=quantization, device_map={"": PartialState().local_process_index})

    try:
        return load_critic(path, trainable=trainable, revision=model_args.model_revision, **init_kwargs)
    except OSError as e:  # not found locally, not on the Hub or offline: the recipe's model, not a bug
        raise ModelNotFound(f"cannot load model_name_or_path {path!r}: {str(e).splitlines()[0]}") from e


class ModelNotFound(UserError):
    """The recipe's model (or adapter) cannot be loaded: a wrong path, or a Hub name not cached offline."""


def is_peft(model) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def vision_parameters(model):
    """(name, parameter) pairs of the image encoder of a VLM (not its projector)."""
    return ((name, param) for name, param in model.named_parameters() if archs.is_vision_tower(name))


def lora_config(recipe, task_type: str | None = "CAUSAL_LM"):
    """LoRA settings from `ModelConfig`, kept off the vision side unless `lora_on_vision`; None without PEFT."""
    config = archs.lora_config(recipe.model_args, recipe.script_args.lora_on_vision)
    if config is None:
        return None
    config.task_type = task_type
    if config.target_modules is None and not getattr(config, "target_parameters", None):
        config.target_modules = "all-linear"  # every projection of the language model, not just attention
    return config


def prepare_model(recipe, model, task_type: str | None = "CAUSAL_LM"):
    """Apply LoRA (unless the model already carries a trainable adapter) and the vision-tower freeze."""
    from peft import get_peft_model, prepare_model_for_kbit_training

    config = lora_config(recipe, task_type)
    if config is not None and not modality.config_reads_images(model.config):
        config.exclude_modules = None  # a text model has no vision side to keep the adapter off
    if getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False):
        if config is None and not is_peft(model):
            raise ValueError("a 4/8-bit base model can only be trained through LoRA: set use_peft: true")
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=recipe.training_args.gradient_checkpointing)
    if config is not None and not is_peft(model):
        model = get_peft_model(model, config)
    if recipe.script_args.freeze_vision_tower and not (is_peft(model) and recipe.script_args.lora_on_vision):
        archs.freeze_vision_tower(model)
    wrapped = archs.run_frozen_vision_without_grad(model)
    if wrapped:
        logger.info("frozen vision modules run without autograd: %s", ", ".join(wrapped))
    log_trainable(model)
    return model


def peak_gpu_memory_gib() -> float | None:
    """Peak memory torch allocated on this process's GPU so far, in GiB (None without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_allocated() / 2**30, 2)


def param_size(param) -> int:
    """Elements of a parameter, also under ZeRO-3 (which leaves an empty placeholder on each rank)."""
    return getattr(param, "ds_numel", None) or param.numel()


def count_parameters(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    total = trainable = 0
    for param in model.parameters():
        total += param_size(param)
        trainable += param_size(param) if param.requires_grad else 0
    return trainable, total


def log_trainable(model, what: str | None = None) -> None:
    trainable, total = count_parameters(model)
    vision_trainable = sum(p.numel() for _, p in vision_parameters(model) if p.requires_grad)
    what = what or ("LoRA adapter" if is_peft(model) else "full model")
    logger.info("training the %s: %s of %s parameters trainable (%.2f%%), %s of them in the vision tower",
                what, f"{trainable:,}", f"{total:,}", 100 * trainable / max(total, 1), f"{vision_trainable:,}")
    if trainable == 0:
        raise ValueError("no trainable parameters: check use_peft / lora_target_modules / freeze_vision_tower")


# ----------------------------------------------------------------------------- data

def split_problems(recipe, data) -> list[str]:
    """What keeps the recipe from training on this DatasetDict: missing or empty splits, columns its kind lacks."""
    args = recipe.script_args
    path, found = args.dataset_path, list(data)
    strategy = getattr(recipe.training_args.eval_strategy, "value", recipe.training_args.eval_strategy)
    needs_eval = strategy != "no"
    problems = []
    if TRAIN not in data:
        problems.append(f"{path}: no {TRAIN!r} split (found {found})")
    if needs_eval and (not args.eval_split or args.eval_split not in data):
        problems.append(f"{path}: eval_strategy is {strategy!r} but there is no split "
                        f"{args.eval_split!r} to evaluate on (found {found}); set eval_split or eval_strategy: no")
    for name in (TRAIN, args.eval_split):
        if not name or name not in data:
            continue
        missing = missing_columns(args.dataset_kind, data[name].column_names)
        if missing:
            problems.append(f"{path} [{name}]: columns {data[name].column_names} lack {missing}, which kind "
                            f"{args.dataset_kind!r} needs")
        elif len(data[name]) == 0 and (name == TRAIN or needs_eval):
            problems.append(f"{path} [{name}]: no rows")
    return problems


def load_splits(recipe):
    """(train, eval or None) from `dataset_path`, cut to `max_train_samples` / `max_eval_samples`; for a text-only
    model, as text rows (`modality.text_rows`: no `images` column, message content as strings).

    Raises DataContractError (one line) when the splits or columns do not match the recipe.
    """
    from datasets import load_from_disk

    args = recipe.script_args
    data = load_from_disk(args.dataset_path)
    problems = split_problems(recipe, data)
    if problems:
        raise DataContractError(problems[0])
    train = _head(data[TRAIN], args.max_train_samples)
    if args.rehearsal_path:
        from stepcritic.train import rehearsal

        train = rehearsal.mix(train, args.rehearsal_path, args.rehearsal_rows, recipe.training_args.seed)
    evaluation = None
    if args.eval_split and args.eval_split in data:
        evaluation = _head(data[args.eval_split], args.max_eval_samples)
    from stepcritic.train.loading import recipe_reads_text_only

    text_only = recipe_reads_text_only(recipe)
    for name, split in ((TRAIN, train), (args.eval_split, evaluation)):
        if split is not None and not text_only:  # a text model has no vision tower for ranks to wait in
            check_images_for_zero3(split, f"{args.dataset_path} [{name}]")
    if text_only:
        model = model_name(recipe)
        train = modality.text_rows(train, f"{args.dataset_path} [{TRAIN}]", model)
        evaluation = modality.text_rows(evaluation, f"{args.dataset_path} [{args.eval_split}]", model)
    elif args.max_image_size:
        train = downscale_images(train, args.max_image_size)
        evaluation = evaluation and downscale_images(evaluation, args.max_image_size)
    logger.info("data %s (%s): %d training rows%s", args.dataset_path, args.dataset_kind, len(train),
                f", {len(evaluation)} {args.eval_split} rows" if evaluation is not None else "")
    return train, evaluation


def model_name(recipe) -> str:
    """The recipe's model as messages name it."""
    return repr(recipe.model_args.model_name_or_path)


def zero3_enabled() -> bool:
    """DeepSpeed ZeRO-3, whether set by `accelerate launch --config_file zero3*.yaml` or by `--deepspeed`."""
    if os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3":
        return True
    from transformers.integrations import is_deepspeed_zero3_enabled

    return is_deepspeed_zero3_enabled()


def check_images_for_zero3(dataset, where: str) -> None:
    """Refuse rows without an image under ZeRO-3 instead of hanging.

    ZeRO-3 gathers each layer's shards collectively; a rank whose batch has no image skips the vision tower
    while the others wait in it, and the job hangs (DeepSpeed #7170). StepCritic's builders attach the chain's
    image to every row of a pictured chain, so this only fires on mixed datasets; one with no image at all never
    enters the tower on any rank and trains.
    """
    if "images" not in dataset.column_names or not zero3_enabled():
        return
    import pyarrow.compute as pc

    counts = pc.list_value_length(dataset.with_format("arrow")[:]["images"]).fill_null(0)  # no image decoding
    counts = counts.to_pylist()
    missing = [i for i, n in enumerate(counts) if n == 0]
    if missing and len(missing) < len(counts):
        raise DataContractError(f"{where}: {len(missing)} rows have no image (first: row {missing[0]}); under "
                                "DeepSpeed ZeRO-3 a batch without images hangs the job (DeepSpeed #7170). Attach an "
                                "image to every row, drop those rows, or train with ZeRO-2/DDP.")


def _head(dataset, limit):
    return dataset.select(range(min(limit, len(dataset)))) if limit else dataset


def downscale_images(dataset, max_size: int):
    """Shrink every image so its longest edge is at most `max_size` (keeps the aspect ratio)."""

    def shrink(row):
        for image in row["images"]:
            image.thumbnail((max_size, max_size))
        return row

    return dataset.map(shrink, desc=f"images <= {max_size}px")


def dataset_summary(dataset_path: str) -> dict:
    """The build stats `stepcritic data build` left next to the data (empty when absent)."""
    stats = os.path.join(dataset_path, "build_stats.json")
    if not os.path.isfile(stats):
        return {}
    with open(stats) as f:
        return json.load(f)


# ----------------------------------------------------------------------------- runs

def resume_checkpoint(training_args, fresh: bool = False) -> str | None:
    """The checkpoint to resume from: `resume_from_checkpoint` if given, else the latest in output_dir (none when
    `fresh`: the run starts over, as `overwrite_output_dir` asks)."""
    from transformers.trainer_utils import get_last_checkpoint

    if training_args.resume_from_checkpoint:
        return training_args.resume_from_checkpoint
    if not fresh and os.path.isdir(training_args.output_dir):
        return get_last_checkpoint(training_args.output_dir)
    return None


def restore_full_weights(model, checkpoint: str) -> bool:
    """Load the full weights saved in `checkpoint` into `model` in place, under the model's own parameter names;
    False when they are not for this function to load (an adapter, a model that is not a transformers one).

    `save_pretrained` writes some architectures under their original checkpoint names (LLaVA's
    `language_model.model.*` for `model.language_model.*`), and the Trainer's own resume loads them with
    `load_state_dict(strict=False)`, which then matches nothing and carries on from the start weights with the
    checkpoint's step count and optimiser. `from_pretrained` maps the names back, as for any saved model.
    """
    from transformers import PreTrainedModel

    weights = ("model.safetensors", "model.safetensors.index.json")
    if is_peft(model) or not isinstance(model, PreTrainedModel):
        return False
    if not any(os.path.isfile(os.path.join(checkpoint, name)) for name in weights):
        return False
    saved = type(model).from_pretrained(checkpoint, dtype=next(model.parameters()).dtype)
    try:
        model.load_state_dict(saved.state_dict())
    except RuntimeError as e:  # another architecture or size in output_dir: the recipe changed since
        raise UserError(f"checkpoint {checkpoint!r} does not fit the recipe's model ({str(e).splitlines()[0]}); "
                        "pass --overwrite_output_dir true to train from the start, or choose another --output_dir"
                        ) from e
    return True


def checkpoint_step(checkpoint: str) -> int | None:
    """The global step a checkpoint was saved at (from its trainer_state.json)."""
    state = os.path.join(checkpoint, "trainer_state.json")
    if not os.path.isfile(state):
        return None
    with open(state) as f:
        return json.load(f).get("global_step")


def save_merged(model, processor, output_dir: str) -> str | None:
    """Fold a LoRA adapter into the base weights and save a standalone model to `output_dir/merged`."""
    if not is_peft(model):
        logger.warning("merge_adapter: the model has no adapter (full fine-tuning); nothing to merge")
        return None
    merged_dir = os.path.join(output_dir, "merged")
    model.merge_and_unload().save_pretrained(merged_dir)
    processor.save_pretrained(merged_dir)
    logger.info("merged adapter into the base model: %s", merged_dir)
    return merged_dir
