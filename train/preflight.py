"""Checks that run before any weights load: the recipe's data against the data contract, and `--dry-run`.

`check_dataset_kind` is what every training run does first, so a PRM recipe pointed at critique data, or a
mistyped `dataset_path`, stops in a second with one line instead of after the model is built.

`check_modality` matches the model's inputs against the data's: a text-only model (no vision side in its config)
refuses a dataset with images, and any model refuses rows whose messages show another number of images than they
carry, in one line naming the dataset and the model, before the weights load. A vision-language model on text-only
rows is fine: it trains on the text, its vision tower unused.

`check_output_dir` says what a run will do with its `output_dir` (start, resume a checkpoint, start over) and
refuses a folder whose finished model or other files the run would write over, unless told to.

`dry_run` is `stepcritic train --config R --dry-run`: everything a run would find out about its recipe and data
without training, so a user checks a run before renting GPUs. It loads the processor (tokenizer + image
processor) but never the model's weights, and never builds a `stepcritic:` model (its processor comes from the
code that builds it), so it takes seconds for every recipe; for a Hub model that is not available offline it says
the length check was skipped and why.
"""

from __future__ import annotations

import json
import math
import os
import sys

from stepcritic.data_prep import contract
from stepcritic.data_prep.contract import TRAIN, DataContractError
from stepcritic.errors import MissingExtra, UserError, missing_extra
from stepcritic.train import common, loading, modality
from stepcritic.train.common import ModelNotFound
from stepcritic.train.config import DATASET_KINDS

SAMPLE_ROWS = 8  # rows per split whose images are decoded and whose token lengths are measured


# ----------------------------------------------------------------------------- the data contract

def check_dataset_kind(recipe) -> str:
    """Match `dataset_path`'s recorded kind against the method; returns a note for the log.

    Raises DataContractError (one line naming the path, the kind found and the kind expected) for a missing
    path, a folder that is not a built dataset, or a kind the method cannot train on. A kind the method takes
    that differs from the recipe's default (`sft` on verifier-sft data) is adopted, unless the recipe set
    `dataset_kind` itself.
    """
    args = recipe.script_args
    expected, allowed = args.dataset_kind, DATASET_KINDS[args.method]
    found = contract.built_kind(args.dataset_path, expected)
    if found is None:
        return (f"{args.dataset_path} has no {contract.STATS_FILE}, so its kind is not recorded: taking the recipe's "
                f"dataset_kind {expected!r} (columns are still checked)")
    if found == expected:
        return f"dataset kind {found!r} (from {contract.STATS_FILE})"
    if found in allowed and "dataset_kind" not in recipe.given:
        args.dataset_kind = found
        return (f"dataset kind {found!r} (from {contract.STATS_FILE}; method {args.method!r} takes "
                f"{' or '.join(allowed)})")
    where = f"dataset_path {args.dataset_path!r} holds kind {found!r} (its {contract.STATS_FILE})"
    if found in allowed:
        raise DataContractError(f"{where}, but the recipe sets dataset_kind {expected!r}; drop dataset_kind or point "
                                f"dataset_path at a {expected!r} dataset")
    raise DataContractError(
        f"{where}, but method {args.method!r} expects {' or '.join(repr(kind) for kind in allowed)}; build one with "
        f"`{contract.build_command(expected, 'DIR')}` and pass --dataset_path DIR")


def check_model_path(recipe) -> None:
    """A model named by a local path (absolute, ./, ../ or ~) must exist: said in one line before anything loads.
    Hub names are left to `from_pretrained` (offline, an uncached name fails there, also as one line). A model this
    package builds (`stepcritic:`) may need an optional extra: a missing one is said here too."""
    path = recipe.model_args.model_name_or_path or ""
    source = loading.model_source(path)
    if source is not None:
        source.check()
        return
    looks_local = path.startswith(("/", "./", "../", "~")) or os.path.isabs(path)
    if looks_local and not os.path.isdir(os.path.expanduser(path)):
        raise ModelNotFound(f"model_name_or_path {path!r}: no such folder")


def check_loggers(recipe) -> None:
    """`report_to: tensorboard|wandb` needs that optional extra: said in one line before the model loads (the
    trainer would stop on it with a traceback after loading)."""
    report_to = recipe.training_args.report_to
    loggers = [report_to] if isinstance(report_to, str) else list(report_to or [])
    for logger in loggers:
        if logger in ("tensorboard", "wandb"):
            message = missing_extra(logger, f"`report_to: {logger}`")
            if message:
                raise MissingExtra(message)


def check_modality(recipe) -> bool | None:
    """Whether the recipe's model reads text only (None: its config cannot be read here, e.g. a Hub name offline).

    Raises `modality.ModalityMismatch` (one line: the dataset, the split, the first row, the model) for a
    text-only model on a dataset with images, and for sampled rows whose image parts and images disagree. The
    build's `text_only_chains` answers the first check without reading the rows when every chain is text only.
    """
    from datasets import load_from_disk

    args = recipe.script_args
    text_only = loading.recipe_reads_text_only(recipe)
    stats = common.dataset_summary(args.dataset_path)
    all_text = stats.get("chains_in") is not None and stats.get("text_only_chains") == stats["chains_in"]
    try:
        data = load_from_disk(args.dataset_path)
    except Exception:  # not a dataset: check_dataset_kind or the data loading says so in their own words
        return text_only
    model = common.model_name(recipe)
    for name in (TRAIN, args.eval_split):
        if not name or name not in data:
            continue
        where = f"dataset_path {args.dataset_path!r} [{name}]"
        pictured = [] if all_text or not text_only else modality.rows_with_images(data[name])
        if pictured:
            built = (f"; {contract.STATS_FILE}: {stats['chains_in'] - stats.get('text_only_chains', 0)} of "
                     f"{stats['chains_in']} chains have an image" if stats.get("chains_in") else "")
            raise modality.ModalityMismatch(
                f"{where} holds {len(pictured)} rows with images (first: row {pictured[0]}{built}), but the model "
                f"{model} reads text only: train a vision-language model on it, or build the dataset from text-only "
                "chains")
        problem = modality.image_count_problem(data[name], where, sample_indices(len(data[name])))
        if problem:
            raise modality.ModalityMismatch(problem)
    return text_only


# ----------------------------------------------------------------------------- output folder

class OutputDirInUse(UserError):
    """`output_dir` already holds a finished model or other files, and the run would write over them."""


# what a finished run leaves at the top of output_dir (weights, their config, the trainer's state)
MODEL_FILES = ("trainer_state.json", "model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors",
               "pytorch_model.bin", "config.json", "adapter_config.json")
# written beside a run without being it: a launcher's log (`... | tee OUT/train.log`), TensorBoard's runs/
BESIDE_A_RUN = (".log", ".out", ".err")


def _beside_a_run(name: str) -> bool:
    return name.startswith(".") or name.endswith(BESIDE_A_RUN) or name == "runs"


def _state(folder: str) -> dict:
    path = os.path.join(folder, "trainer_state.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _planned_steps(recipe, checkpoint: str) -> int | None:
    """The optimiser steps this run asks for: max_steps, or the checkpoint's own plan when the epochs are unchanged."""
    args = recipe.training_args
    if args.max_steps > 0:
        return args.max_steps
    state = _state(checkpoint)
    return state.get("max_steps") if state.get("num_train_epochs") == args.num_train_epochs else None


def stale_checkpoints(output_dir: str) -> list[str]:
    """The `checkpoint-N` folders of an earlier run in output_dir."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    if not os.path.isdir(output_dir):
        return []
    return sorted(os.path.join(output_dir, name) for name in os.listdir(output_dir)
                  if name.startswith(f"{PREFIX_CHECKPOINT_DIR}-") and os.path.isdir(os.path.join(output_dir, name)))


def check_output_dir(recipe) -> str:
    """What the run does with `output_dir`, in a few words: a new folder, resuming a checkpoint, or starting over.

    Raises OutputDirInUse (one line: what is there, and the two ways forward) when the folder holds a finished model
    with no checkpoint left to resume, or files that are not a training run, unless `overwrite_output_dir` is set:
    a rerun of the same command then never writes over an earlier model without being told to.
    """
    from transformers.trainer_utils import get_last_checkpoint

    args = recipe.training_args
    out, given = args.output_dir, args.resume_from_checkpoint
    if given:
        if not os.path.isdir(given):
            raise OutputDirInUse(f"resume_from_checkpoint {given!r}: no such folder")
        return f"{out} (resumes from {given}, step {common.checkpoint_step(given)})"
    if os.path.exists(out) and not os.path.isdir(out):
        raise OutputDirInUse(f"output_dir {out!r} is a file, not a folder; choose another --output_dir")
    if not os.path.isdir(out):
        return f"{out} (new folder)"
    entries = sorted(name for name in os.listdir(out) if not _beside_a_run(name))
    if not entries:
        return f"{out} (empty folder)"
    ways = "pass --overwrite_output_dir true to train from the start into it, or choose another --output_dir"
    if recipe.script_args.overwrite_output_dir:
        old = stale_checkpoints(out)
        return (f"{out} (--overwrite_output_dir: trains from the start"
                + (f", deleting its {len(old)} checkpoint(s) first)" if old else ")"))
    finished = [name for name in entries if name in MODEL_FILES]
    done = _state(out).get("global_step")
    model = f"a finished model{f' of {done:,} steps' if done is not None else ''}"
    last = get_last_checkpoint(out)
    if last:
        step, target = common.checkpoint_step(last), _planned_steps(recipe, last)
        if finished and None not in (step, target) and step >= target:
            raise OutputDirInUse(f"output_dir {out!r} already holds {model}, and its last checkpoint "
                                 f"({os.path.basename(last)}) is at step {step:,} of the {target:,} asked for: "
                                 f"nothing to resume; {ways} (or raise --max_steps to train it on)")
        return f"{out} (resumes from {os.path.basename(last)}, step {step}" + (f" of {target})" if target else ")")
    if finished:
        raise OutputDirInUse(f"output_dir {out!r} already holds {model} ({', '.join(finished[:3])}) and no "
                             f"checkpoint to resume from; {ways}")
    shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
    raise OutputDirInUse(f"output_dir {out!r} is not empty and holds no training run ({shown}); {ways}")


# ----------------------------------------------------------------------------- launcher

def launcher() -> tuple[str, int, list[str]]:
    """(description, number of processes, problems) of the launcher that started this process.

    `accelerate launch` passes its config to the script through environment variables (ACCELERATE_*), and a
    multi-process launch sets WORLD_SIZE; without them the run is one plain process.
    """
    env = os.environ
    processes = int(env.get("WORLD_SIZE", "1") or 1)
    parts, problems = [], []
    launched = any(key.startswith("ACCELERATE_") for key in env) and "ACCELERATE_MIXED_PRECISION" in env
    if env.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        stage = env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "?")
        offload = {what: env.get(f"ACCELERATE_DEEPSPEED_OFFLOAD_{what.upper()}_DEVICE", "none")
                   for what in ("optimizer", "param")}
        offloaded = set(offload.values()) - {"none"}
        parts.append(f"DeepSpeed ZeRO-{stage}" + (f" (offload optimizer {offload['optimizer']}, params "
                                                  f"{offload['param']})" if offloaded else ""))
        missing = missing_extra("deepspeed", "the launcher's DeepSpeed config")
        if missing:
            problems.append(missing)
    elif env.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        parts.append("FSDP")
    elif processes > 1:
        parts.append("DDP")
    if launched:
        parts.insert(0, "accelerate launch")
        parts.append(f"mixed precision {env.get('ACCELERATE_MIXED_PRECISION')}")
    else:
        parts.insert(0, "none (plain python; several GPUs: accelerate launch --config_file recipes/accelerate/...)")
    parts.append(f"{processes} process{'es' if processes > 1 else ''}")
    return ", ".join(parts), processes, problems


# ----------------------------------------------------------------------------- plan

def plan(recipe, train_rows: int, processes: int) -> tuple[str, str]:
    """(global batch, optimiser steps) as the Trainer will count them."""
    args = recipe.training_args
    per_device, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
    global_batch = per_device * accumulation * processes
    batch = (f"{global_batch:,} = {per_device} per device x {accumulation} accumulation step"
             f"{'s' if accumulation > 1 else ''} x {processes} process{'es' if processes > 1 else ''}")
    if recipe.method == "grpo":  # GRPO's batch counts sampled completions, num_generations per prompt
        generations = args.num_generations
        batch = (f"{global_batch:,} completions ({global_batch // generations:,} prompts x {generations} "
                 f"generations){batch[len(f'{global_batch:,}'):]}")
    if args.max_steps > 0:
        return batch, f"{args.max_steps:,} (max_steps)"
    if recipe.method == "grpo":
        return batch, f"about {math.ceil(args.num_train_epochs * train_rows * args.num_generations / global_batch):,}"
    # transformers' Trainer: batches per epoch rounded up, then accumulation rounded up, then epochs rounded up
    batches = math.ceil(train_rows / (per_device * processes))
    per_epoch = max(math.ceil(batches / accumulation), 1)
    steps = math.ceil(args.num_train_epochs * per_epoch)
    return batch, (f"{steps:,} = {args.num_train_epochs:g} epoch(s) x {per_epoch:,} steps per epoch "
                   f"({train_rows:,} rows)")


# ----------------------------------------------------------------------------- samples

def sample_indices(n: int, k: int = SAMPLE_ROWS) -> list[int]:
    """Up to k row indices spread evenly over n rows (first and last included)."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def conversation_turns(split, n: int) -> int:
    """Assistant turns in the first n rows of a verifier conversation split: the lengths of its `tasks` lists, read
    from Arrow (no image decoded)."""
    import pyarrow.compute as pc

    return pc.sum(pc.list_value_length(split.with_format("arrow")[:n]["tasks"])).as_py() or 0


def decoded_rows(split, name: str, path: str, max_image_size: int | None) -> tuple[list[dict], list[str]]:
    """The sampled rows with their images decoded (and downscaled as training will); problems per bad row."""
    rows, problems = [], []
    for index in sample_indices(len(split)):
        try:
            row = split[index]
            for image in row.get("images") or []:
                image.load()
                if max_image_size:
                    image.thumbnail((max_image_size, max_image_size))
        except Exception as err:  # any decoding failure is the data's problem, reported per row
            problems.append(f"{path} [{name}] row {index}: image cannot be decoded ({type(err).__name__}: "
                            f"{str(err).splitlines()[0] if str(err) else ''})")
            continue
        rows.append(row)
    return rows, problems


def load_processor(recipe):
    """(processor, None) or (None, why it is not available here). Never loads model weights."""
    from transformers.utils import logging as hf_logging

    built = loading.model_source(recipe.model_args.model_name_or_path)
    if built is not None:  # from the code or the shipped folder that makes it: a dry run builds nothing
        return built.processor(), None
    source = recipe.model_path()
    base = loading.adapter_base(source)
    if base is not None and not loading.has_processor(source):
        source = base
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # loading notes (deprecations) are not what a dry run reports
    try:
        return loading.load_processor(source, revision=recipe.model_args.model_revision), None
    except Exception as err:  # offline Hub, a missing optional dependency, a typo: all end the same way
        if not os.path.isdir(source) and os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
            why = f"the processor of {source!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set"
        else:
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            why = f"the processor of {source!r} could not be loaded ({type(err).__name__}: {first})"
        return None, why
    finally:
        hf_logging.set_verbosity(verbosity)


def _length(processor, messages, images) -> int:
    from trl.data_utils import prepare_multimodal_messages

    conversation = prepare_multimodal_messages(list(messages), images=list(images or []))
    return len(processor.apply_chat_template([conversation], tokenize=True, return_dict=True)["input_ids"][0])


def row_length(processor, kind: str, method: str, row: dict) -> int:
    """Tokens (image tokens included) the trainer sees for one row: the longer side of a pair; GRPO: the prompt
    (the longest turn's, for a verifier conversation; SFT trains on the whole conversation)."""
    images = row.get("images")
    if kind in ("critique-pref", "outcome-rm"):
        return max(_length(processor, list(row["prompt"]) + list(row[side]), images) for side in ("chosen", "rejected"))
    if method == "grpo" and contract.is_conversation(kind, row):  # GRPO asks each turn's question on its own
        from stepcritic.train.grpo import turn_prompts

        return max((_length(processor, prompt, images) for prompt in turn_prompts(row["messages"])), default=0)
    if method == "grpo":
        return _length(processor, row["messages"][:-1], images)
    return _length(processor, row["messages"], images)


def processor_problems(recipe, processor) -> list[str]:
    """Tokenizer and chat template properties the method relies on."""
    problems = []
    method, args = recipe.method, recipe.training_args
    tokenizer = getattr(processor, "tokenizer", processor)
    if method == "prm":
        from stepcritic.data_prep import prompts
        from stepcritic.train.scoring import single_token_id

        for judgement in (prompts.PRM_POSITIVE, prompts.PRM_NEGATIVE):
            try:
                single_token_id(tokenizer, judgement)
            except ValueError as err:
                problems.append(str(err))
    if method in ("sft", "prm") and getattr(args, "assistant_only_loss", False):
        from trl.chat_template_utils import get_training_chat_template, has_generation_markers

        if not has_generation_markers(processor.chat_template or ""):
            try:
                get_training_chat_template(processor)
            except Exception as err:
                problems.append(f"assistant_only_loss needs a chat template with {{% generation %}} markers, and TRL "
                                f"cannot add them to this one ({str(err).splitlines()[0][:150]})")
    return problems


# ----------------------------------------------------------------------------- dry run

def dry_run(recipe, out=None, err=None) -> int:
    """Validate the recipe and its data, print the plan; 0 when all is well, 2 with one line per problem."""
    args, targs = recipe.script_args, recipe.training_args
    built = loading.model_source(recipe.model_args.model_name_or_path)
    model = recipe.model_args.model_name_or_path + (f": {built.describe()}" if built is not None else "")
    where = "whole model" if args.lora_on_vision else "language model"
    adapter = f"LoRA r={recipe.model_args.lora_r} on the {where}" if recipe.model_args.use_peft else "full fine-tuning"
    text_only = loading.recipe_reads_text_only(recipe)
    tower = ("text only, no vision tower" if text_only else
             f"vision tower {'frozen' if args.freeze_vision_tower else 'trained'}")
    lines = [("method", f"{recipe.method} ({type(targs).__name__})"),
             ("model", f"{model}; {adapter}; {tower}"),
             *(("adjusted", note) for note in recipe.adjustments)]
    description, processes, problems = launcher()
    train_rows = _check_data(recipe, lines, problems)
    for check in (check_model_path, check_loggers):
        try:
            check(recipe)
        except (ModelNotFound, MissingExtra) as e:
            problems.append(str(e))
    batch, steps = plan(recipe, train_rows, processes)
    try:
        output = check_output_dir(recipe)
    except OutputDirInUse as e:
        output = targs.output_dir
        problems.append(str(e))
    lines += [("launcher", description), ("batch", f"global {batch}"), ("steps", steps), ("output", output)]
    if int(os.environ.get("RANK", "0") or 0) == 0:  # under `accelerate launch`, one report, not one per process
        _report(recipe, lines, problems, out or sys.stdout, err or sys.stderr)
    return 2 if problems else 0


def _report(recipe, lines, problems, out, err) -> None:
    print(f"stepcritic train --dry-run: {recipe.source} (no training; model weights are not loaded)", file=out)
    width = max(len(key) for key, _ in lines)
    for key, value in lines:
        print(f"  {key:<{width}}  {value}", file=out)
    out.flush()
    for problem in problems:
        print(f"stepcritic train: error: {problem}", file=err)
    print(f"dry run: {len(problems)} problem(s) found" if problems else "dry run: ok", file=out)


def _check_data(recipe, lines: list, problems: list) -> int:
    """The data checks of a dry run (appending to `lines` and `problems`); returns the training rows."""
    from datasets import load_from_disk

    args, targs = recipe.script_args, recipe.training_args
    try:
        lines.append(("data", f"{args.dataset_path}: {check_dataset_kind(recipe)}"))
        data = load_from_disk(args.dataset_path)
    except DataContractError as error:
        problems.append(str(error))
        return 0
    except Exception as error:  # a folder that datasets cannot read
        problems.append(f"{args.dataset_path}: not loadable as a dataset ({type(error).__name__}: "
                        f"{str(error).splitlines()[0][:200]})")
        return 0

    mismatch = None
    try:
        check_modality(recipe)
    except modality.ModalityMismatch as error:
        mismatch = str(error)
        problems.append(mismatch)
    limits = {TRAIN: args.max_train_samples, args.eval_split: args.max_eval_samples}
    rows = {name: min(len(data[name]), limits.get(name) or len(data[name])) for name in data}
    rows_text = ", ".join(f"{name} {n:,}" for name, n in rows.items())
    # verifier conversations ("task"/"chain" layouts): SFT trains on each row as one sequence, GRPO on each turn
    turns = {name: conversation_turns(data[name], n) for name, n in rows.items()
             if contract.is_conversation(args.dataset_kind, data[name].column_names)}
    if turns:
        counts = ", ".join(f"{name} {n:,}" for name, n in turns.items())
        rows_text += (f" (verifier conversations: {counts} assistant turns"
                      + (", one GRPO prompt each)" if recipe.method == "grpo" else ")"))
    if args.eval_split in data:
        when = (f"every {targs.eval_steps:g} steps" if targs.eval_strategy == "steps" else
                "every epoch" if targs.eval_strategy == "epoch" else "once, after training")
        rows_text += f"; evaluates on {args.eval_split!r} {when}"
    lines.append(("rows", rows_text))
    split_issues = common.split_problems(recipe, data)
    problems += split_issues
    if split_issues:
        return rows.get(TRAIN, 0)

    sampled, images = {}, []
    text_only = loading.recipe_reads_text_only(recipe)
    for name in (TRAIN, args.eval_split):
        if not name or name not in data:
            continue
        try:
            if not text_only:  # a text model has no vision tower for ranks to wait in
                common.check_images_for_zero3(data[name], f"{args.dataset_path} [{name}]")
        except DataContractError as error:
            problems.append(str(error))
        sampled[name], bad = decoded_rows(data[name], name, args.dataset_path, args.max_image_size)
        problems += bad
        images += [image for row in sampled[name] for image in row.get("images") or []]
    largest = max((image.size for image in images), key=lambda wh: wh[0] * wh[1], default=(0, 0))
    lines.append(("images", f"{len(images)} image(s) in {sum(map(len, sampled.values()))} sampled rows decode; "
                            f"largest {largest[0]}x{largest[1]} px"
                            + (f" (max_image_size {args.max_image_size})" if args.max_image_size else "")))

    built = loading.model_source(recipe.model_args.model_name_or_path)
    if built is not None:
        lines.append(("build", built.plan()))
    processor, why = load_processor(recipe)
    if mismatch:  # the processor cannot encode rows the model cannot read: said once, above
        lines.append(("lengths", "skipped: the data does not suit the model"))
    elif processor is None:
        lines.append(("lengths", f"skipped: {why}"))
    else:
        problems += processor_problems(recipe, processor)
        problems += _length_check(recipe, processor, sampled, lines)
    if recipe.method == "grpo" and TRAIN in turns:  # the plan counts prompts
        return turns[TRAIN]
    return rows.get(TRAIN, 0)


def _length_check(recipe, processor, sampled: dict, lines: list) -> list[str]:
    """Token lengths of the sampled rows against max_length (GRPO has none: its prompts are reported)."""
    args, targs = recipe.script_args, recipe.training_args
    limit = getattr(targs, "max_length", None)
    problems, lengths = [], []
    for name, rows in sampled.items():
        for row in rows:
            try:
                lengths.append((row_length(processor, args.dataset_kind, recipe.method, row), name))
            except Exception as error:
                problems.append(f"{args.dataset_path} [{name}]: the processor cannot encode a row "
                                f"({type(error).__name__}: {str(error).splitlines()[0][:200]})")
                return problems
    if not lengths:
        return problems
    longest = max(length for length, _ in lengths)
    what = "prompt tokens" if recipe.method == "grpo" else "tokens"
    text = f"{len(lengths)} sampled rows, longest {longest:,} {what}"
    if recipe.method == "grpo":
        text += f" (+ up to {targs.max_completion_length} generated)"
    elif limit:
        over = [length for length, _ in lengths if length > limit]
        text += f", max_length {limit:,}"
        if over:
            fate = "dropped" if recipe.method == "reward" else "cut, losing the end of the answer"
            problems.append(f"{args.dataset_path}: {len(over)} of {len(lengths)} sampled rows are longer than "
                            f"max_length {limit:,} (longest {longest:,} tokens) and would be {fate}; raise max_length "
                            "or lower max_image_size")
    lines.append(("lengths", text))
    return problems
