"""`stepcritic train --config RECIPE [--key value ...] [--dry-run]`: train a critic from a YAML recipe.

RECIPE is a recipe file or the name of a recipe shipped with the package (`tiny/prm`, `qwen2.5-vl-3b/sft-lora`;
`--list-recipes` lists them), so the shipped recipes work from any folder. Any `--key value` after the recipe
overrides the recipe's key of the same name (TRL/transformers config fields, ModelConfig fields, or StepCritic
keys); unknown keys are an error naming the key. An `output_dir` holding a finished model is refused unless its
checkpoints can be resumed or `--overwrite_output_dir true` is given. User mistakes (the recipe, the dataset, the
output folder) end with one line `stepcritic train: error: ...` and exit code 2.
"""

from __future__ import annotations

import argparse
import sys

# The recipe keys most runs override, with what they mean. Written out rather than read from the configs, so that
# `--help` loads no transformers; tests/test_train_cli.py checks that each is a recipe key and that the defaults hold.
COMMON_KEYS = (
    ("--dataset_path DIR", "the folder `stepcritic data build` wrote (one dataset kind)"),
    ("--output_dir DIR", "where checkpoints, the trained model and its model card are written"),
    ("--model_name_or_path M", "the model to start from: a folder, a Hub id, or stepcritic:tiny/base (offline)"),
    ("--max_steps N", "optimizer steps to train; -1 (the default) means --num_train_epochs decides"),
    ("--num_train_epochs E", "passes over the training rows when --max_steps is -1 (default 3)"),
    ("--max_train_samples N", "use at most N training rows"),
    ("--max_train_minutes M", "stop after M minutes of wall time; the model is saved as usual"),
    ("--learning_rate LR", "the initial learning rate"),
    ("--per_device_train_batch_size B", "rows per device per step; the global batch is B x G x processes"),
    ("--gradient_accumulation_steps G", "steps whose gradients add up before each optimizer step"),
    ("--use_peft true|false", "train LoRA adapters (--lora_r, --lora_alpha) rather than every weight"),
    ("--report_to none|tensorboard|wandb", "where training metrics go (the last two need their extras)"),
    ("--seed S", "the random seed for data order and initialisation (default 42)"),
    ("--overwrite_output_dir true", "train from the start into a folder that holds a finished model"),
)


def common_keys_help() -> str:
    width = max(len(key) for key, _ in COMMON_KEYS)
    lines = [f"  {key:<{width}}  {meaning}" for key, meaning in COMMON_KEYS]
    return ("common recipe keys (every recipe key works as --key value; defaults are for a recipe that sets none):\n"
            + "\n".join(lines))


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="stepcritic train", description=__doc__.splitlines()[0])
    parser.add_argument("--config", metavar="RECIPE",
                        help="a recipe YAML file, or a shipped recipe's name such as tiny/prm or "
                             "qwen2.5-vl-3b/sft-lora (see --list-recipes)")
    parser.add_argument("--list-recipes", action="store_true",
                        help="list the shipped recipes (name, method, model, data) and exit")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the recipe, its data and its output folder without loading model weights "
                             "(splits, dataset kind, columns, images, token lengths on a sample, launcher, what "
                             "happens to output_dir) and print the plan: method, model, rows, global batch, steps; "
                             "exit 2 with one line per problem")
    parser.epilog = (
        common_keys_help() + "\n\n"
        "Any further --key value pairs override the recipe (e.g. --learning_rate 1e-4 --output_dir runs/x).\n"
        "Running the same command again resumes from output_dir's latest checkpoint; a folder that holds a finished\n"
        "model is refused unless --overwrite_output_dir true (train from the start) or another --output_dir.\n"
        "Multi-GPU: accelerate launch --config_file recipes/accelerate/zero3.yaml -m stepcritic.train "
        "--config qwen2.5-vl-7b/sft-lora"
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.set_defaults(_accepts_overrides=True)
    return parser


def _error(message) -> int:
    print(f"stepcritic train: error: {message}", file=sys.stderr)
    return 2


def main(args: argparse.Namespace) -> int:
    from stepcritic import recipes
    from stepcritic.errors import UserError

    if getattr(args, "list_recipes", False):
        print("\n".join(recipes.listing()))
        return 0
    if not args.config:
        return _error("--config is required: a recipe file or a shipped recipe's name "
                      "(`stepcritic train --list-recipes` lists them)")
    try:
        path = recipes.resolve(args.config)  # before torch loads: a mistyped name answers at once
    except UserError as e:
        return _error(e)
    if not sys.stderr.isatty():  # a log file gets the run's own lines, not redrawn progress bars
        import os

        for library in ("HF_DATASETS", "HF_HUB"):  # datasets' bars; the hub's setting also turns off transformers'
            os.environ.setdefault(f"{library}_DISABLE_PROGRESS_BARS", "1")
    from stepcritic.train.config import parse_recipe

    try:
        recipe = parse_recipe(path, getattr(args, "overrides", None) or [])
        if args.dry_run:
            from stepcritic.train.preflight import dry_run

            return dry_run(recipe)
        from stepcritic.train.preflight import check_output_dir
        from stepcritic.train.run import train

        check_output_dir(recipe)
        train(recipe)
    except UserError as e:  # recipe, data, model path, output folder: one line, however the command was started
        return _error(e)
    return 0
