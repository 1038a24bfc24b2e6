"""Process-supervision rows `{prompt, completions: [step...], labels: [bool...]}` plus an image column.

This is the stepwise-supervision layout TRL's PRM datasets and VisualProcessBench/Math-Shepherd-style
data use. The image column may be `image` or `images` (first image used): a path, base64 or bytes; a row with
neither, or an empty `images` (TRL's text-only PRM sets such as Math-Shepherd), is a text-only chain.
"""

from __future__ import annotations

from stepcritic.data_prep.adapters.records import beside_input, require_fields
from stepcritic.data_prep.schema import SchemaError

# Accepted step labels: true/false, 1/0 or "+"/"-" (Math-Shepherd). 1 and 0 need no keys of their own:
# they equal True and False and hash alike, so `1 in LABELS` and `LABELS[0]` already find them.
LABELS = {True: True, False: False, "+": True, "-": False}


def parse_label(label: object) -> bool | None:
    """The step's correctness for a known label; None for anything else (1.0, "true", 2, null, a list)."""
    if isinstance(label, float):  # 1.0 == True too, but a float label is a mistake, not a boolean
        return None
    try:
        return LABELS.get(label)
    except TypeError:  # unhashable: a list or an object
        return None


default_image_root = beside_input


def convert(raw: dict, where: str, ctx: dict) -> dict:
    require_fields(raw, where, ("prompt", "completions", "labels"))
    steps, labels = raw["completions"], raw["labels"]
    if not isinstance(steps, list) or not steps:
        raise SchemaError("a chain needs at least one step", where, "completions")
    if not isinstance(labels, list) or len(labels) != len(steps):
        raise SchemaError(f"{len(labels) if isinstance(labels, list) else 'no'} labels for {len(steps)} steps",
                          where, "labels")
    correct = [parse_label(label) for label in labels]
    for i, (label, ok) in enumerate(zip(labels, correct)):
        if ok is None:
            raise SchemaError(f"unknown label {label!r}; expected true/false, 1/0 or +/-", where, f"labels[{i}]")
    image = raw.get("image")
    if image is None and isinstance(raw.get("images"), list) and raw["images"]:
        image = raw["images"][0]
    prompt = raw["prompt"]
    if isinstance(prompt, list):  # conversational prompt: keep the user text
        prompt = " ".join(m.get("content", "") if isinstance(m.get("content"), str) else "" for m in prompt)
    row_id = raw.get("id", where.replace(":", "-"))
    return {
        "chain_id": f"stepwise-{row_id}",
        "source": raw.get("source") or "stepwise",
        "image": image,
        "question": prompt,
        "reference_answer": raw.get("answer") or raw.get("reference_answer"),
        "final_answer": raw.get("final_answer"),
        "answer_correct": raw.get("answer_correct"),
        "generator": raw.get("generator"),
        "category": raw.get("category"),
        "steps": [{"text": t, "correct": ok} for t, ok in zip(steps, correct)],
        "meta": {k: v for k, v in raw.items()
                 if k not in ("prompt", "completions", "labels", "image", "images")
                 and isinstance(v, (str, int, float, bool))},
    }
