"""The model card a training run writes next to its weights (`README.md`): what it is, how it was made, how to use it.

Base model, data (path, kind, rows, the build's own summary), the recipe as the YAML keys that were set (clean
values, not config objects), the package versions and hardware it ran on, the final metrics, and the exact
`stepcritic eval` line that scores this checkpoint.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import platform
from importlib import metadata

PACKAGES = ("stepcritic", "torch", "transformers", "trl", "peft", "datasets", "accelerate", "deepspeed", "liger-kernel")


def plain(value):
    """A config value as YAML-able data: enums by value, dataclasses as dicts, anything else exotic as text."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def recipe_values(recipe) -> dict:
    """The keys the recipe file and the command line set, with the values training ran with."""
    out = {}
    for group in (recipe.script_args, recipe.model_args, recipe.training_args):
        for f in dataclasses.fields(group):
            if f.name in recipe.given and f.name not in out:
                out[f.name] = plain(getattr(group, f.name))
    return out


def versions() -> dict:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def hardware() -> str:
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        return f"{torch.cuda.device_count()} x {name}, CUDA {torch.version.cuda}"
    return f"CPU ({platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"


def eval_command(method: str, output_dir: str, dataset_kind: str) -> str:
    """The `stepcritic eval` line for this checkpoint (the judge kind that reads what this method trained)."""
    folder = os.path.abspath(output_dir)
    if dataset_kind == "policy-sft":  # a policy: its own chains, sampled (`stepcritic generate`)
        return f"stepcritic generate --policy 'hf:{folder}' --chains CHAINS_DIR --samples 4 --out POLICY_CHAINS_DIR"
    if method == "prm":
        judge = f"prm:{folder}"
    elif method == "reward":
        judge = f"reward:{folder}"
    else:  # sft / dpo / grpo train a generative critic: a critique writer, or a verifier on verifier rows
        judge = f"hf:{folder},mode={'verifier' if dataset_kind == 'verifier-sft' else 'critique'}"
    return f"stepcritic eval --chains CHAINS_DIR --judge '{judge}' --out EVAL_DIR"


def write_model_card(recipe, output_dir: str, metrics: dict, trainable: int, total: int,
                     data_summary: dict | None = None) -> str:
    import yaml

    from stepcritic.train.loading import model_source

    args = recipe.script_args
    base = recipe.model_args.model_name_or_path
    built = model_source(base)
    if built is not None:  # a model this package builds: what it is, and the folder it was built into
        base = f"{base}: {built.describe()} ({recipe.model_path()})"
    data = data_summary or {}
    data_lines = [f"- path: `{args.dataset_path}` (kind `{args.dataset_kind}`)"]
    for key in ("rows", "chains", "sources", "label_balance", "template"):
        if key in data:
            data_lines.append(f"- {key}: `{json.dumps(data[key], sort_keys=True)}`")
    if args.rehearsal_path:
        rows = "every row" if args.rehearsal_rows is None else f"the first {args.rehearsal_rows:,} rows"
        data_lines.append(f"- rehearsed: {rows} of `{args.rehearsal_path}`, mixed into the training rows")
    recipe_yaml = yaml.safe_dump(recipe_values(recipe), sort_keys=False)
    card = "\n".join([
        f"# StepCritic critic: `{args.method}`", "",
        f"- base model: `{base}`",
        f"- method: `{args.method}`; trainable parameters: {trainable:,} of {total:,}",
        f"- recipe file: `{recipe.source}`",
        f"- hardware: {hardware()}",
        f"- packages: {', '.join(f'{k} {v}' for k, v in versions().items())}", "",
        "## Evaluate it", "", "```bash", eval_command(args.method, recipe.training_args.output_dir, args.dataset_kind),
        "```", "",
        "## Data", "", *data_lines, "",
        "## Recipe (the keys that were set; everything else is the default)", "",
        "```yaml", recipe_yaml.rstrip(), "```", "",
        "## Final metrics", "", "```json", json.dumps(metrics, indent=2, sort_keys=True, default=str), "```", "",
    ])
    path = os.path.join(output_dir, "README.md")
    with open(path, "w") as f:
        f.write(card)
    return path
