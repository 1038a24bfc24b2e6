"""Strict YAML recipes: one flat file mapped onto StepCritic's own keys, `trl.ModelConfig` and a trainer config.

A recipe is a single flat mapping (alignment-handbook style, grouped by comments).  Every key belongs to exactly
one of three dataclasses:

* `StepCriticArgs` (below): what to train on and how (`method`, `dataset_path`, `rehearsal_path`, ...);
* `trl.ModelConfig`: which model (a folder, a Hub id, or `stepcritic:tiny/...`, built offline), its
  dtype/attention, LoRA and quantisation;
* the method's trainer config: `trl.SFTConfig` (sft, prm), `trl.DPOConfig` (dpo), `trl.GRPOConfig` (grpo) or
  `RewardModelConfig` (reward, below).

Parsing goes through TRL's `TrlParser`: the YAML values become the parser's defaults, as TRL's own `--config`
does, after going through each option's type and choices exactly as a `--key value` override does (this also reads
PyYAML's string `1e-4` as a float).  Unknown keys, values of the wrong type and lists given to single-valued keys
raise `RecipeError` naming the key and the file.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from transformers import TrainingArguments

from stepcritic.data_prep.contract import HELD_OUT, METHOD_KINDS
from stepcritic.errors import UserError, missing_extra

logger = logging.getLogger(__name__)

METHODS = ("sft", "dpo", "prm", "reward", "grpo")

# The dataset kinds `stepcritic data build` writes that each method can consume; the first is the default.
# Defined with the kinds themselves in data_prep.contract.
DATASET_KINDS = {method: METHOD_KINDS[method] for method in METHODS}

# Keys that older TRL/transformers versions accepted, with what replaced them: turns a bare "unknown key" into
# a fix when an old recipe is ported.
RENAMED_KEYS = {
    "torch_dtype": "dtype",
    "max_seq_length": "max_length",
    "max_prompt_length": "max_length (TRL 1.x SFT/DPO truncate prompt and completion together)",
    "max_completion_length": "max_length (DPO; GRPO keeps max_completion_length)",
    "evaluation_strategy": "eval_strategy",
    "warmup_ratio": "warmup_steps (a value below 1 is a fraction of the training steps)",
    "no_cuda": "use_cpu",
    "per_gpu_train_batch_size": "per_device_train_batch_size",
    "per_gpu_eval_batch_size": "per_device_eval_batch_size",
}
# The tiny critic is a model name, `model_name_or_path: stepcritic:tiny/...` (train/tiny/source.py), not a set of
# keys: the name each of these keys' settings is part of.
MODEL_SOURCE_KEYS = {
    "tiny_model": "stepcritic:tiny/base",
    "tiny_pretrained_base": "stepcritic:tiny/base",
    "tiny_model_lm": "stepcritic:tiny/base-smollm2",
    "tiny_model_arch": "stepcritic:tiny/ARCH",
    "tiny_model_size": "stepcritic:tiny/ARCH-SIZE",
    "tiny_vision_pretrain_steps": "stepcritic:tiny/ARCH,vision_pretrain_steps=N",
    "tiny_base_pretrain_steps": "stepcritic:tiny/ARCH,base_pretrain_steps=N",
}


class RecipeError(UserError, ValueError):
    """A recipe (or an override) that cannot be turned into training arguments; the message names the key."""


@dataclass
class StepCriticArgs:
    """StepCritic's own recipe keys (top-level in the YAML, next to the TRL keys)."""

    method: str = field(metadata={"help": "Training method.", "choices": METHODS})
    dataset_path: str = field(metadata={"help": "Folder written by `stepcritic data build` (one dataset kind)."})
    dataset_kind: str | None = field(
        default=None,
        metadata={"help": f"Dataset kind inside dataset_path; default by method: {DATASET_KINDS}."},
    )
    eval_split: str | None = field(
        default=HELD_OUT,
        metadata={"help": f"Split evaluated during training (`stepcritic data build` holds out {HELD_OUT!r}); null "
                          "to train without one."},
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use at most this many training rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use at most this many evaluation rows."})
    rehearsal_path: str | None = field(
        default=None,
        metadata={"help": "A dataset of chat rows (`messages`, `images`) of the base's own pre-training tasks, mixed "
                          "into the training rows so that fine-tuning keeps what the base reads (sft and prm; "
                          "`python -m stepcritic.train.tiny.rehearsal` writes the tiny base's). null: none."},
    )
    rehearsal_rows: int | None = field(
        default=None, metadata={"help": "Rehearse the first this many rows of rehearsal_path (null: all)."}
    )
    max_image_size: int | None = field(
        default=None,
        metadata={"help": "Downscale images so their longest edge is at most this many pixels (null: keep)."},
    )
    freeze_vision_tower: bool = field(
        default=True,
        metadata={"help": "Keep the vision encoder's weights fixed (full fine-tuning trains the rest)."},
    )
    lora_on_vision: bool = field(
        default=False,
        metadata={"help": "Let LoRA target the vision tower's layers too (default: language model only)."},
    )
    max_train_minutes: float | None = field(
        default=None,
        metadata={"help": "Stop training after this many minutes of wall time (the model is saved as usual); "
                          "null: no limit. For fixed-budget runs such as 'the best critic in 15 GPU minutes'."},
    )
    merge_adapter: bool = field(
        default=False, metadata={"help": "After LoRA training, also save the adapter merged into the base weights."}
    )
    policy_rewards: list[str] = field(
        default_factory=lambda: ["outcome"],
        metadata={"help": "GRPO of a policy (dataset_kind policy-sft): its rewards, `outcome` (the answer is the "
                          "gold answer) and/or `critic` (reward_critic's aggregated step scores); summed.",
                  "choices": ("outcome", "critic")},
    )
    reward_critic: str | None = field(
        default=None,
        metadata={"help": "GRPO of a policy: the critic, a judge spec with step scores (e.g. prm:runs/prm). Its "
                          "mean reward is logged beside held-out accuracy at every evaluation, and is a reward when "
                          "policy_rewards lists `critic`."},
    )
    reward_aggregate: str = field(
        default="min", metadata={"help": "GRPO of a policy: how the critic's step scores become one reward.",
                                 "choices": ("min", "mean", "last", "prod")},
    )
    critic_requires_answer: bool = field(
        default=False,
        metadata={"help": "GRPO of a policy: the critic's reward is 0 for a completion that states no answer, so "
                          "that stopping after one confident step never pays (the gold answer is not read)."},
    )
    hacking_patience: int = field(
        default=3,
        metadata={"help": "GRPO of a policy: warn of reward hacking when the critic's held-out reward rose at each "
                          "of this many evaluations in a row while held-out accuracy fell over them."},
    )
    model_card: bool = field(default=True, metadata={"help": "Write a model card (README.md) into output_dir."})
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Train from the start into an output_dir that already holds a model or other files "
                          "(its checkpoints are deleted first); without it such a folder is refused, unless its "
                          "checkpoints are resumed."},
    )

    def __post_init__(self):
        allowed = DATASET_KINDS[self.method]
        if self.dataset_kind is None:
            self.dataset_kind = allowed[0]
        elif self.dataset_kind not in allowed:
            raise ValueError(
                f"dataset_kind {self.dataset_kind!r} cannot train method {self.method!r}; use one of {allowed}"
            )
        policy_rl = self.method == "grpo" and self.dataset_kind == "policy-sft"
        if not policy_rl and (self.policy_rewards != ["outcome"] or self.reward_critic):
            raise ValueError("policy_rewards and reward_critic are for GRPO of a policy: set method: grpo and "
                             "dataset_kind: policy-sft, or remove them")
        if not self.policy_rewards or len(set(self.policy_rewards)) != len(self.policy_rewards):
            raise ValueError(f"policy_rewards must list outcome and/or critic once each, got {self.policy_rewards}")
        if "critic" in self.policy_rewards and not self.reward_critic:
            raise ValueError("policy_rewards lists critic: set reward_critic to a judge spec (e.g. prm:runs/prm)")
        if self.hacking_patience < 1:
            raise ValueError(f"hacking_patience must be at least 1, got {self.hacking_patience}")


@dataclass
class RewardModelConfig(TrainingArguments):
    """Trainer config for `method: reward`: a scalar value head on a VLM, trained with a Bradley-Terry loss.

    TRL's RewardConfig targets `AutoModelForSequenceClassification`, which VLMs do not provide, so StepCritic
    trains its own head; the shared keys keep TRL's names and defaults.
    """

    learning_rate: float = field(default=1e-4, metadata={"help": "Initial AdamW learning rate."})
    logging_steps: float = field(default=10, metadata={"help": "Log every X update steps."})
    activation_checkpointing: bool | None = field(
        default=True, metadata={"help": "Recompute activations in the backward pass to save memory."}
    )
    bf16: bool | None = field(default=None, metadata={"help": "bf16 mixed precision; unset means on unless fp16."})
    # The collator needs the chosen/rejected/image columns that the model's forward signature does not name.
    remove_unused_columns: bool = field(default=False, metadata={"help": "Drop dataset columns the model ignores."})
    max_length: int | None = field(
        default=1024, metadata={"help": "Pairs whose chosen or rejected side is longer than this are dropped."}
    )
    center_rewards_coefficient: float | None = field(
        default=None,
        metadata={"help": "Weight of the auxiliary loss pulling mean rewards to zero (Eisenstein et al., 2023)."},
    )
    value_head_dropout: float = field(default=0.0, metadata={"help": "Dropout before the scalar value head."})
    disable_dropout: bool = field(default=True, metadata={"help": "Disable dropout inside the backbone."})

    def __post_init__(self):
        self.bf16 = not self.fp16 if self.bf16 is None else self.bf16
        super().__post_init__()


def trainer_config_class(method: str) -> type:
    import trl

    classes = {
        "sft": trl.SFTConfig,
        "prm": trl.SFTConfig,
        "dpo": trl.DPOConfig,
        "grpo": trl.GRPOConfig,
        "reward": RewardModelConfig,
    }
    if method not in classes:
        raise RecipeError(f"`method` must be one of {METHODS}, got {method!r}")
    return classes[method]


@dataclass
class Recipe:
    script_args: StepCriticArgs
    model_args: typing.Any  # trl.ModelConfig (trl is imported lazily)
    training_args: TrainingArguments
    source: str | None = None
    adjustments: list[str] = field(default_factory=list)  # defaults the parser filled in, e.g. for a CPU host
    given: frozenset = frozenset()  # the keys the YAML or an override set (the rest are defaults)

    @property
    def method(self) -> str:
        return self.script_args.method

    def model_path(self) -> str:
        """The checkpoint to train: `model_name_or_path`, a `stepcritic:` name resolved to its cached folder."""
        from stepcritic.train.loading import resolve_model

        return resolve_model(self.model_args.model_name_or_path)


def _recipe_parser(dataclass_types, where: str):
    """TRL's TrlParser, raising RecipeError instead of exiting and never accepting abbreviated keys."""
    from trl import TrlParser

    class RecipeParser(TrlParser):
        def error(self, message):
            raise RecipeError(f"{where}: {message}")

    return RecipeParser(dataclass_types, allow_abbrev=False)


def _actions_by_key(parser) -> dict[str, argparse.Action]:
    """The action owning each dataclass field (the first one, not its `--no_<key>` complement)."""
    actions = {}
    for action in parser._actions:
        if action.dest != "help":
            actions.setdefault(action.dest, action)
    return actions


def _unknown_key_message(key: str, known, where: str) -> str:
    message = f"{where}: unknown key `{key}`"
    if key in RENAMED_KEYS:
        return f"{message}; it was renamed to `{RENAMED_KEYS[key]}`"
    if key in MODEL_SOURCE_KEYS:
        return (f"{message}; did you mean `model_name_or_path: {MODEL_SOURCE_KEYS[key]}`? (the tiny critic is a "
                "model name: docs/recipes.md#the-tiny-critic)")
    close = difflib.get_close_matches(key, known, n=3)
    return message + (f"; did you mean {', '.join(f'`{c}`' for c in close)}?" if close else "")


def _declared_types(dataclass_types, key: str) -> set:
    """The types a field's annotation allows (`int | None` -> {int, NoneType}; `list[str]` -> {list})."""
    for dataclass_type in dataclass_types:
        hints = typing.get_type_hints(dataclass_type)
        if key in hints:
            hint = hints[key]
            members = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
            return {typing.get_origin(member) or member for member in members}
    return set()


def _as_token(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _as_defaults(values: dict, parser, dataclass_types, where: str) -> dict:
    """Recipe values converted and checked as the command line's tokens are (argparse converts only string
    defaults and checks no default's choices), for TrlParser's `set_defaults_with_config`."""
    actions = _actions_by_key(parser)
    defaults = {}
    for key, value in values.items():
        action, tokens = actions[key], None
        declared = _declared_types(dataclass_types, key)
        if value is None:
            if type(None) not in declared:
                raise RecipeError(f"{where}: `{key}` may not be null")
        elif isinstance(value, list):
            if list not in declared:
                raise RecipeError(f"{where}: `{key}` takes a single value, got a list {value!r}")
            if any(isinstance(item, (dict, list)) for item in value):
                raise RecipeError(f"{where}: `{key}` must be a list of plain values, got {value!r}")
            if action.nargs in ("+", "*") and value:  # `x: str | list[str]` (report_to) keeps its list as it is
                tokens = value
        elif isinstance(value, dict):
            # Dict-valued TrainingArguments keys are declared `dict | str` and take a mapping as it is.
            if action.type is not str:
                raise RecipeError(f"{where}: `{key}` does not take a mapping, got {value!r}")
        else:
            tokens = [value]
        if tokens is not None:
            try:
                value = parser._get_values(action, [_as_token(token) for token in tokens])
            except argparse.ArgumentError as err:
                raise RecipeError(f"{where}: {err}") from err
        defaults[key] = value
    return defaults


def _override_keys(argv: list[str]) -> list[str]:
    return [token[2:].split("=", 1)[0] for token in argv if token.startswith("--")]


def _overridden_method(argv: list[str]) -> str | None:
    method = None
    for i, token in enumerate(argv):
        if token.startswith("--method="):
            method = token.split("=", 1)[1]
        elif token == "--method" and i + 1 < len(argv):
            method = argv[i + 1]
    return method


def _cpu_defaults(given: set[str]) -> tuple[dict, list[str]]:
    """On a host without CUDA, pick CPU training unless the recipe decided: TRL's default bf16 fails there."""
    import torch

    if torch.cuda.is_available():
        return {}, []
    defaults = {key: value for key, value in (("use_cpu", True), ("bf16", False)) if key not in given}
    return defaults, [f"no CUDA device: {key}={_as_token(value)}" for key, value in defaults.items()]


def _launcher_overrides(env) -> tuple[list[str], list[str]]:
    """What the launcher decided and the recipe must not undo. Under `accelerate launch` with a DeepSpeed
    config, `use_cpu: true` (the tiny recipes) makes the Trainer build a plain CPU Accelerator and DeepSpeed is
    skipped without a word; DeepSpeed picks its own device (DS_ACCELERATOR=cpu on a machine without GPUs)."""
    if env.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return ["--use_cpu=false"], ["launched with DeepSpeed: use_cpu=false (DeepSpeed picks its own device)"]
    return [], []


def _load_yaml(path: Path) -> dict:
    """Read here, not by TrlParser's `--config`: the method picks the parser's dataclasses before one exists."""
    import yaml

    try:
        values = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise RecipeError(f"{path}: not valid YAML: {err}") from err
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise RecipeError(f"{path}: a recipe must be a flat YAML mapping of keys to values")
    return values


def _recipe_file(config: str | Path) -> str:
    """A recipe file, or the name of a shipped one (`tiny/prm`): see `stepcritic.recipes`."""
    from stepcritic.recipes import UnknownRecipe, resolve

    try:
        return resolve(str(config))
    except UnknownRecipe as err:
        raise RecipeError(str(err)) from err


def _value_rules(method: str, values) -> list:
    """(key, holds, requirement) for every value a run cannot start with; `values` has every key as an attribute
    (the parsed command line). Types are the parser's job."""
    def setting(key):
        value = getattr(values, key, None)
        return getattr(value, "value", value)  # an enum's value (save_strategy: "steps")

    positive, at_least_1 = (lambda v: v > 0, "greater than 0"), (lambda v: v >= 1, "at least 1")
    not_negative = (lambda v: v >= 0, "0 or more")
    below_1 = (lambda v: 0 <= v < 1, "from 0 up to (not including) 1")
    rules = [
        ("learning_rate", *positive),
        ("per_device_train_batch_size", *at_least_1),
        ("per_device_eval_batch_size", *at_least_1),
        ("gradient_accumulation_steps", *at_least_1),
        ("max_steps", lambda v: v > 0 or v == -1, "a number of optimiser steps above 0, or -1 to train "
                                                   "`num_train_epochs`"),
        ("weight_decay", *not_negative),
        ("logging_steps", *positive),
        ("save_total_limit", *at_least_1),
        ("max_length", *positive),
        ("max_train_samples", *at_least_1),
        ("max_eval_samples", *at_least_1),
        ("max_image_size", *at_least_1),
        ("max_train_minutes", *positive),
        ("dataloader_num_workers", *not_negative),
    ]
    if (setting("max_steps") or -1) <= 0:  # the epochs decide how long the run is
        rules.append(("num_train_epochs", *positive))
    if setting("save_strategy") == "steps":
        rules.append(("save_steps", *positive))
    if setting("eval_strategy") == "steps":
        rules.append(("eval_steps", *positive))
    if setting("use_peft"):
        rules += [("lora_r", *at_least_1), ("lora_alpha", *positive), ("lora_dropout", *below_1)]
    if method == "dpo":  # beta 0 makes the loss a constant: nothing would be learnt
        rules.append(("beta", *positive))
    if method == "grpo":
        rules += [("num_generations", lambda v: v >= 2, "at least 2 (GRPO compares several samples of one prompt)"),
                  ("max_completion_length", *positive), ("temperature", *positive), ("beta", *not_negative)]
    if method == "reward":
        rules.append(("value_head_dropout", *below_1))
    return [(key, setting(key), holds, requirement) for key, holds, requirement in rules]


def first_senseless_value(method: str, values) -> tuple[str, str] | None:
    """(key, one line) for the first recipe value that cannot train (a learning rate of -1, a batch of 0), or None.

    Checked by every parse, before the configs' own checks (whose messages do not always name the key), so a dry
    run and a real run refuse the same values before anything loads. A null is left to the parser."""
    for key, value, holds, requirement in _value_rules(method, values):
        if value is not None and not holds(value):
            return key, f"`{key}` must be {requirement}, got {value!r}"
    return None


def missing_extra_of(values) -> tuple[str, str] | None:
    """(key, one line) for a `deepspeed` config when DeepSpeed is not installed, or None: the trainer's config
    would fail on it with a traceback while parsing. (Loggers are checked before a run: `preflight.check_loggers`.)"""
    message = missing_extra("deepspeed", "`deepspeed`") if getattr(values, "deepspeed", None) else None
    return ("deepspeed", message) if message else None


def parse_recipe(path: str | Path, overrides: list[str] | dict | None = None) -> Recipe:
    """Parse a recipe file (or a shipped recipe's name, `tiny/prm`); `overrides` (`["--key", "value",
    "--key=value"]` or a mapping) win over the YAML. Values a run cannot start with are refused here too."""
    from trl import ModelConfig

    path = Path(_recipe_file(path))
    values = _load_yaml(path)
    override_argv: list[str] = []
    if isinstance(overrides, dict):
        override_values = dict(overrides)
    else:
        override_values, override_argv = {}, list(overrides or [])
    where = f"{path} (with overrides)" if overrides else str(path)

    method = override_values.get("method") or _overridden_method(override_argv) or values.get("method")
    if method not in METHODS:
        raise RecipeError(f"{where}: `method` must be one of {', '.join(METHODS)}, got {method!r}")
    dataclass_types = [StepCriticArgs, ModelConfig, trainer_config_class(method)]
    parser = _recipe_parser(dataclass_types, where)

    known_keys = _actions_by_key(parser)
    for key in [*values, *override_values]:
        if key not in known_keys:
            source = path if key in values else "override"
            raise RecipeError(_unknown_key_message(key, known_keys, str(source)))
    for key in _override_keys(override_argv):
        if f"--{key}" not in parser._option_string_actions:
            raise RecipeError(_unknown_key_message(key, known_keys, "override"))

    overridden = {*override_values, *(key.replace("-", "_") for key in _override_keys(override_argv))}
    given = {*values, *overridden}
    cpu_defaults, adjustments = _cpu_defaults(given)
    # The file and a mapping of overrides are the parser's defaults, as TrlParser puts in a config file; a list of
    # overrides is its command line. YAML keys that a mapping override replaces are dropped unread.
    parser.set_defaults_with_config(**{
        **cpu_defaults,
        **_as_defaults({k: v for k, v in values.items() if k not in override_values}, parser, dataclass_types,
                       str(path)),
        **_as_defaults(override_values, parser, dataclass_types, "override"),
    })
    launcher_argv, launcher_notes = _launcher_overrides(os.environ)
    argv = override_argv + launcher_argv
    adjustments += launcher_notes
    parsed = parser.parse_known_args(argv)[0]
    problem = first_senseless_value(method, parsed) or missing_extra_of(parsed)
    if problem:
        key, text = problem
        raise RecipeError(f"{'override' if key in overridden else path}: {text}")
    try:
        script_args, model_args, training_args = parser.parse_args_into_dataclasses(
            args=argv, look_for_args_file=False
        )
    except RecipeError:
        raise
    except ValueError as err:  # a dataclass's own validation (__post_init__)
        raise RecipeError(f"{where}: {err}") from err

    if not model_args.model_name_or_path:
        raise RecipeError(f"{where}: `model_name_or_path` is required (a folder, a Hub id or a model this package "
                          "builds, such as `stepcritic:tiny/base`)")
    from stepcritic.train.loading import model_source

    try:
        model_source(model_args.model_name_or_path)
    except ValueError as err:  # a `stepcritic:` name that names no model
        source = "override" if "model_name_or_path" in overridden else path
        raise RecipeError(f"{source}: `model_name_or_path`: {err}") from err
    from stepcritic.train import rehearsal

    if rehearsal.problem(script_args):
        raise RecipeError(f"{where}: {rehearsal.problem(script_args)}")
    for note in adjustments:
        logger.info("%s: %s", path, note)
    return Recipe(script_args, model_args, training_args, source=str(path), adjustments=adjustments,
                  given=frozenset(given))



