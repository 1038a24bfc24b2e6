"""`stepcritic train --config RECIPE.yaml [--key value ...]`: train a critic from a YAML recipe.

Any `--key value` after the recipe overrides the recipe's key of the same name (TRL/transformers
config fields, ModelConfig fields, or StepCritic keys); unknown keys are an error naming the key.
"""

from __future__ import annotations

import argparse
import sys


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="stepcritic train", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a recipe YAML, e.g. recipes/tiny/critique-sft.yaml")
    parser.epilog = (
        "Any further --key value pairs override the recipe (e.g. --learning_rate 1e-4 --output_dir runs/x).\n"
        "Multi-GPU: accelerate launch --config_file recipes/accelerate/zero3.yaml -m stepcritic.train "
        "--config recipes/qwen2.5-vl-7b/sft-lora.yaml"
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.set_defaults(_accepts_overrides=True)
    return parser


def main(args: argparse.Namespace) -> int:
    from stepcritic.train.config import RecipeError, parse_recipe
    from stepcritic.train.run import train

    try:
        recipe = parse_recipe(args.config, getattr(args, "overrides", None) or [])
    except (RecipeError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    train(recipe)
    return 0
