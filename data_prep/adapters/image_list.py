"""Records that list several images: the canonical schema holds one image per chain, so adapters keep the first.

Every path is kept in the chain's `meta["images"]`, and ingest counts the chains with more than one image and the
images left out (`stats.json` -> `label_notes`, the chains folder's README), so nothing is dropped unannounced.
A question about its second image then shows only the first: filter those chains out (their ids are in stats.json)
where that matters, e.g. for evaluation.
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


def first_image(paths: list[str], image_root: str | None, where: str, field: str = "image",
                subfolders: tuple[str, ...] = ("",)) -> str:
    """The first path, found under `image_root` or one of its `subfolders`; returned relative to `image_root`."""
    first = paths[0]
    if os.path.isabs(first) or image_root is None:
        candidates = [first]
    else:
        candidates = [os.path.join(sub, first) if sub else first for sub in subfolders]
    for candidate in candidates:
        if os.path.isfile(os.path.join(image_root or "", candidate)):
            return candidate
    tried = " or ".join(os.path.join(image_root or "", c) for c in candidates)
    raise SchemaError(f"image file not found: {tried} (set --image-root)", where, f"{field}[0]")
