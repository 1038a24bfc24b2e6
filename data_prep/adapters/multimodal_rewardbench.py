"""Multimodal RewardBench's `all_data.json` (`ID`, `Text`: the prompt, `Image`: a path relative to the release's
`data/` folder, `Output1`, `Output2`, `Better`: which of the two is better) -> one group of two chains per item.

`Category` (the benchmark's area: general correctness, general preference, knowledge, reasoning, safety, VQA) is
the category; `subset` is the finer split the benchmark's accuracy script reports: safety as bias (PAIRS items) or
toxicity, reasoning as math or coding, by the item's `ID` (null for the other areas, reported whole).
"""

from __future__ import annotations

from stepcritic.data_prep.adapters.pairwise import item_chains, item_key, response_steps, text
from stepcritic.data_prep.adapters.records import beside_input, require_fields
from stepcritic.data_prep.schema import SchemaError, load_image_bytes

SOURCE = "multimodal-rewardbench"
OUTPUTS = ("Output1", "Output2")

default_image_root = beside_input


def subset_of(category: str | None, item: str) -> str | None:
    lowered = item.lower()
    if category == "safety":
        return "safety/bias" if lowered.startswith("pairs") else "safety/toxicity"
    if category == "reasoning":
        return "reasoning/math" if lowered.startswith("math") else "reasoning/coding"
    return None  # the other areas are reported whole


def convert(raw, where: str, ctx: dict) -> list[dict]:
    require_fields(raw, where, ("ID", "Text", "Image", *OUTPUTS, "Better"))
    if raw["Better"] not in OUTPUTS:
        raise SchemaError(f"expected 'Output1' or 'Output2', got {raw['Better']!r}", where, "Better")
    item = item_key(raw["ID"], where, "ID")
    category = raw.get("Category") if isinstance(raw.get("Category"), str) else None
    steps = [response_steps(raw[name], where, name) for name in OUTPUTS]
    ranks = [1 if raw["Better"] == name else 2 for name in OUTPUTS]
    # loaded here so that a missing file names the release's field, `Image`
    image = load_image_bytes(raw["Image"], ctx["image_root"], where, "Image")
    return item_chains(SOURCE, item, text(raw["Text"], where, "Text"), image, steps, ranks,
                       category=category, subset=subset_of(category, item), meta={"ID": item})
