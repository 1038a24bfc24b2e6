"""`stepcritic train --config RECIPE.yaml [--key value ...] [--dry-run]`: train a critic from a YAML recipe.

Any `--key value` after the recipe overrides the recipe's key of the same name (TRL/transformers
config fields, ModelConfig fields, or StepCritic keys); unknown keys are an error naming the key.
User mistakes (the recipe, the dataset) end with one line `stepcritic train: error: ...` and exit code 2.
"""

from __future__ import annotations

import argparse
import sys


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="stepcritic train", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a recipe YAML, e.g. recipes/tiny/critique-sft.yaml")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the recipe and its data without loading model weights (splits, dataset kind, "
                             "columns, images, token lengths on a sample, launcher) and print the plan: method, "
                             "model, rows, global batch, steps; exit 2 with one line per problem")
    parser.epilog = (
        "Any further --key value pairs override the recipe (e.g. --learning_rate 1e-4 --output_dir runs/x).\n"
        "Multi-GPU: accelerate launch --config_file recipes/accelerate/zero3.yaml -m stepcritic.train "
        "--config recipes/qwen2.5-vl-7b/sft-lora.yaml"
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.set_defaults(_accepts_overrides=True)
    return parser


def _error(message) -> int:
    print(f"stepcritic train: error: {message}", file=sys.stderr)
    return 2


def main(args: argparse.Namespace) -> int:
    import os

    if not os.path.isfile(args.config):
        return _error(f"recipe file {args.config!r} not found")
    from stepcritic.errors import UserError
    from stepcritic.train.config import parse_recipe

    try:
        recipe = parse_recipe(args.config, getattr(args, "overrides", None) or [])
        if args.dry_run:
            from stepcritic.train.preflight import dry_run

            return dry_run(recipe)
        from stepcritic.train.run import train

        train(recipe)
    except UserError as e:  # recipe, data, model path: one line here, whichever way the command was started
        return _error(e)
    return 0
