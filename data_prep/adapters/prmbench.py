"""PRMBench (`idx`, `question` / `modified_question`, `modified_process`: the steps under test, `error_steps`:
their 1-based numbers of the wrong ones, `classification`: the error category, `reason`) -> text-only chains.

Each step of the modified process is labelled: incorrect when its number is in `error_steps`, correct otherwise,
as the benchmark scores them. The category is `classification` (the benchmark's breakdown); the `reason` is the
reference critique of every wrong step. The steps' own "1. " numbering is dropped (prompts number the steps); the
numbers of the wrong and of the modified steps go to the meta.
"""

from __future__ import annotations

import re

from stepcritic.data_prep.adapters.pairwise import item_key, text
from stepcritic.data_prep.adapters.records import require_fields
from stepcritic.data_prep.schema import SchemaError


def default_image_root(input_path: str) -> None:
    return None  # text only


def _unnumbered(step: str, number: int) -> str:
    stripped = re.sub(rf"^\s*{number}\.\s+", "", step)
    return stripped if stripped.strip() else step


def _numbers(value, n_steps: int, where: str, field: str) -> list[int]:
    if not isinstance(value, list):
        raise SchemaError(f"expected a list of step numbers, got {value!r}", where, field)
    for i, number in enumerate(value):
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= n_steps:
            raise SchemaError(f"expected a step number from 1 to {n_steps}, got {number!r}", where, f"{field}[{i}]")
    return list(value)


def convert(raw, where: str, ctx: dict) -> dict:
    require_fields(raw, where, ("idx", "modified_process", "error_steps", "classification"))
    process = raw["modified_process"]
    if not isinstance(process, list) or not process:
        raise SchemaError("a chain needs at least one step", where, "modified_process")
    texts = [_unnumbered(text(s, where, f"modified_process[{i}]"), i + 1) for i, s in enumerate(process)]
    errors = set(_numbers(raw["error_steps"], len(texts), where, "error_steps"))
    question = raw.get("modified_question") or raw.get("question")
    field = "modified_question" if raw.get("modified_question") else "question"
    reason = raw.get("reason") if isinstance(raw.get("reason"), str) and raw["reason"].strip() else None
    item = item_key(raw["idx"], where, "idx")
    meta = {"idx": item, "error_steps": sorted(errors)}
    if isinstance(raw.get("modified_steps"), list):
        meta["modified_steps"] = raw["modified_steps"]
    return {
        "chain_id": f"prmbench-{item}",
        "source": "prmbench",
        "image": None,
        "question": text(question, where, field),
        "category": text(raw["classification"], where, "classification"),
        "steps": [{"text": t, "correct": n not in errors, "explanations": [reason] if reason and n in errors else []}
                  for n, t in enumerate(texts, 1)],
        "meta": meta,
    }
