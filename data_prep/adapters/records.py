"""What every adapter checks first and assumes about images, written once."""

from __future__ import annotations

import os

from stepcritic.data_prep.schema import SchemaError


def require_fields(raw, where: str, keys: tuple[str, ...]) -> dict:
    """`raw` as a JSON object that has every key in `keys` (not null); else a SchemaError naming the field."""
    if not isinstance(raw, dict):
        raise SchemaError("a record must be a JSON object", where)
    for key in keys:
        if raw.get(key) is None:
            raise SchemaError("missing required field", where, key)
    return raw


def beside_input(input_path: str) -> str:
    """Image paths in a release are relative to the annotation file's folder unless --image-root says otherwise."""
    return os.path.dirname(os.path.abspath(input_path))
