"""What every judge over a model folder shares: the digest that ties cached judgments to the weights, the device
the model runs on when the spec names none, and the checks of the folder a spec names (`model_folder_problem`).

One home for these, so the hf, vllm, prm and reward judges cannot drift apart on any rule.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
CONTENT_HASH_LIMIT = 256 * 2**20  # hash the bytes of weight files up to this size (adapters), else size+mtime


def weights_digest(path: str) -> str:
    """A digest that changes whenever the model folder is retrained or replaced.

    JSON files (config, tokenizer, adapter config) are hashed by content, weight files by content up to
    `CONTENT_HASH_LIMIT` and by size and modification time above it (rehashing gigabytes per run would cost
    more than it saves). An adapter folder also covers its base model folder. A Hub id (no folder) is
    represented by its name only.
    """
    folder = Path(path)
    if not folder.is_dir():
        return f"name:{path}"
    digest = hashlib.sha256()
    for file in sorted(folder.iterdir()):
        if file.suffix == ".json" or file.name.endswith(".jinja"):
            digest.update(file.name.encode() + file.read_bytes())
        elif file.suffix in WEIGHT_SUFFIXES:
            stat = file.stat()
            if stat.st_size <= CONTENT_HASH_LIMIT:
                digest.update(file.name.encode() + hashlib.sha256(file.read_bytes()).digest())
            else:
                digest.update(f"{file.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    adapter_config = folder / "adapter_config.json"
    if adapter_config.is_file():
        base = json.loads(adapter_config.read_text()).get("base_model_name_or_path")
        if base:
            digest.update(weights_digest(base).encode())
    return digest.hexdigest()[:16]


def pick_device(device: str | None) -> str:
    """The device a judge was given, else the GPU when there is one."""
    if device:
        return device
    import torch  # only when no device is given: listing or checking judges needs no torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# ----------------------------------------------------------------------------- what a spec's folder holds

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
READS = {"prm": "prm", "reward": "reward", "hf": "hf", "vllm": "hf"}  # judge kind -> the checkpoints it reads
WHAT = {"prm": "a process reward model (PRM)", "reward": "an outcome reward model",
        "hf": "a generative critic (it writes critiques)"}
CARD_JUDGE = re.compile(r"--judge '([a-z-]+):[^',]*(?:,mode=([a-z-]+))?'")  # `train.model_card.eval_command`


def looks_local(target: str) -> bool:
    """Whether a model target can only be a folder here, not a Hub id ("name" or "org/name"): it starts with ".",
    "~" or "/", is no Hub id, or its parent folder exists here."""
    if target.startswith((".", "~", "/", os.sep)) or not HUB_ID.fullmatch(target):
        return True
    parent = os.path.dirname(target)
    return os.path.exists(target) or bool(parent) and os.path.isdir(parent)


def checkpoint_kind(folder: str) -> tuple[str, str, str] | None:
    """(the judge kind that reads the checkpoint in `folder`, its spec options, how that is known), from what
    `stepcritic train` saves beside the weights; None when nothing tells."""
    if os.path.isfile(os.path.join(folder, "reward_config.json")):
        return "reward", "", "it has reward_config.json"
    try:
        with open(os.path.join(folder, "README.md"), encoding="utf-8") as f:
            card = f.read(20_000)
    except (OSError, UnicodeDecodeError):
        card = ""
    found = CARD_JUDGE.search(card) if card.startswith("# StepCritic critic") else None
    if found and found.group(1) in WHAT:
        method = re.search(r"`([a-z]+)`", card.splitlines()[0])
        told = f"its model card README.md: method {method.group(1)}" if method else "its model card README.md"
        return found.group(1), f",mode={found.group(2)}" if found.group(2) else "", told
    try:
        with open(os.path.join(folder, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        config = {}
    if isinstance(config, dict) and "stepcritic_prm_notes" in config:
        return "prm", "", "its config.json was saved by PRM training"
    return None


def _checkpoints(folder: str) -> list[str]:
    steps = [(int(name.split("-", 1)[1]), name) for name in os.listdir(folder)
             if re.fullmatch(r"checkpoint-\d+", name) and os.path.isdir(os.path.join(folder, name))]
    return [name for _, name in sorted(steps)]


def model_folder_problem(kind: str, target: str) -> str | None:
    """What is wrong with the model folder a `kind:` spec names, in one line, or None. A target that may be a Hub
    id is not checked here; a folder is, before anything is loaded: that it exists, holds a model, and is a
    checkpoint of the kind this judge reads (`READS`)."""
    if not looks_local(target):
        return None
    if target.startswith("~"):
        home = os.path.expanduser(target)
        if not os.path.exists(home):
            return f"model folder {target} not found"
        return f"model folder {target} not found; write it as {kind}:{home} (the shell does not expand ~ inside a spec)"
    if not os.path.exists(target):
        return f"model folder {target} not found"
    if not os.path.isdir(target):
        return f"{target} is a file, not a model folder"
    found = checkpoint_kind(target)
    wanted = READS.get(kind)
    if kind == "reward" and (found is None or found[0] != "reward"):
        what = f"{WHAT[found[0]]} ({found[2]}); judge it with {found[0]}:{target}{found[1]}" if found else (
            "not an outcome reward model saved by `stepcritic train` (method: reward)")
        return f"{target} holds no reward_config.json: it is {what}"
    if wanted and found and found[0] != wanted:
        return (f"{target} is {WHAT[found[0]]} ({found[2]}), which the {kind}: judge does not read; judge it with "
                f"{found[0]}:{target}{found[1]}")
    if not any(os.path.isfile(os.path.join(target, name)) for name in ("config.json", "adapter_config.json")):
        saved = _checkpoints(target)
        latest = f"; its latest checkpoint is {os.path.join(target, saved[-1])}" if saved else ""
        return f"{target} holds no model (no config.json or adapter_config.json){latest}"
    return None
