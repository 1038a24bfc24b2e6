"""The one image decoder: whatever form a chain's image arrives in, an RGB PIL image (and PNG bytes back).

Datasets hand images over as PIL images (the `Image` feature), `{"bytes", "path"}` dicts (the feature's
storage), raw bytes (the renderer) or file paths (users' own jsonl); every stage that needs pixels calls
`to_rgb`, so a new form is taught in one place.
"""

from __future__ import annotations

import io


def to_rgb(image):
    """A chain's image (PIL, `{"bytes", "path"}` dict, bytes or path) as an RGB PIL image."""
    from PIL import Image

    if hasattr(image, "convert"):
        return image.convert("RGB")
    if isinstance(image, dict):
        image = image.get("bytes") or image.get("path")
    if isinstance(image, (bytes, bytearray)):
        return Image.open(io.BytesIO(image)).convert("RGB")
    if isinstance(image, str):
        return Image.open(image).convert("RGB")
    raise TypeError(f"cannot read an image from a {type(image).__name__}")


def png_bytes(image) -> bytes:
    """Any accepted image form as PNG bytes (what OpenAI-style APIs and caches take)."""
    buf = io.BytesIO()
    to_rgb(image).save(buf, format="PNG")
    return buf.getvalue()


def rgb_images(chain: dict) -> list:
    """Every image of a chain (`schema.chain_images`), in order, as RGB PIL images."""
    from stepcritic.data_prep.schema import chain_images

    return [to_rgb(image) for image in chain_images(chain)]
