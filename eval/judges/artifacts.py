"""What every judge over a model folder shares: the digest that ties cached judgments to the weights, and
the device the model runs on when the spec names none.

One home for both, so the hf, vllm, prm and reward judges cannot drift apart on either rule.
"""

from __future__ import annotations

import hashlib
import json
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
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
