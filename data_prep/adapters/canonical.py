"""The canonical schema itself as JSON lines (users' own annotations); image paths resolve against the file's folder."""

from __future__ import annotations

from stepcritic.data_prep.adapters.records import beside_input

default_image_root = beside_input


def convert(raw: dict, where: str, ctx: dict) -> dict:
    return raw  # validate_chain does the checking
