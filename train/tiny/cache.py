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


def tiny_critic_path(cache_dir: str | os.PathLike | None = None, arch: str = "llava", **build_kwargs) -> str:
    """Path of a cached tiny critic built with these arguments, building it on first use.

    The folder name hashes the build arguments, the builder version and the transformers version, so a change
    to any of them gives a fresh build.  Building happens in a temporary sibling folder that is renamed into
    place, so concurrent processes (DDP ranks, parallel tests) never see a half-written model.
    """
    import transformers

    from stepcritic.train.tiny import model
    from stepcritic.train.tiny.tokenizer import corpus_digest

    key = json.dumps(
        {"arch": arch, **build_kwargs, "builder": model.TINY_BUILD_VERSION, "transformers": transformers.__version__,
         "corpus": corpus_digest()},
        sort_keys=True,
    )
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / f"tiny-{arch}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"

    def build(staging: Path) -> None:
        steps = build_kwargs.pop("base_pretrain_steps", 0)
        then = None
        if steps:
            from stepcritic.train.tiny.base_pretrain import pretrain_built

            then = functools.partial(pretrain_built, steps=steps, seed=build_kwargs.get("seed", 0),
                                     image_size=build_kwargs.get("image_size", 96))
        model.build_tiny_critic(staging, arch=arch, then=then, **build_kwargs)

    return atomic.build_dir_once(target, build)
