"""The canonical schema itself as JSON lines (users' own annotations); image paths resolve against the file's folder."""

from __future__ import annotations

import os


def default_image_root(input_path: str) -> str:
    return os.path.dirname(os.path.abspath(input_path))


def convert(raw: dict, where: str, ctx: dict) -> dict:
    return raw  # validate_chain does the checking
