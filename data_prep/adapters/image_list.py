"""Records that list several images (VisualProcessBench, VisualPRM): every image is kept, in order.

The chain's `image` is the first and `extra_images` the rest (`schema.chain_images`); ingest counts the chains
with several (`stats.json` -> `label_notes`, the chains folder's README).
"""

from __future__ import annotations

import os

from stepcritic.data_prep.schema import SchemaError


def image_paths(value, where: str, field: str = "image") -> list[str]:
    """A record's image paths: a list of non-empty strings (a single path is read as a list of one)."""
    paths = [value] if isinstance(value, str) else value
    if not isinstance(paths, list) or not paths:
        raise SchemaError("expected a non-empty list of image paths", where, field)
    for i, p in enumerate(paths):
        if not isinstance(p, str) or not p.strip():
            raise SchemaError(f"expected an image path, got {p!r}", where, f"{field}[{i}]")
    return paths


def find_images(paths: list[str], image_root: str | None, where: str, field: str = "image",
                subfolders: tuple[str, ...] = ("",)) -> list[str]:
    """Each path, found under `image_root` or one of its `subfolders`; returned relative to `image_root`."""
    found = []
    for i, path in enumerate(paths):
        if os.path.isabs(path) or image_root is None:
            candidates = [path]
        else:
            candidates = [os.path.join(sub, path) if sub else path for sub in subfolders]
        hit = next((c for c in candidates if os.path.isfile(os.path.join(image_root or "", c))), None)
        if hit is None:
            tried = " or ".join(os.path.join(image_root or "", c) for c in candidates)
            raise SchemaError(f"image file not found: {tried} (set --image-root)", where, f"{field}[{i}]")
        found.append(hit)
    return found
