"""VISCO `test.jsonl` -> canonical chains.

VISCO labels each step correct/incorrect (`reasoning_correctness`) and gives three reference critiques per
incorrect step (`reasoning_critic`, empty strings for correct steps). It has no MiCEval aspect labels, so
step `type` and the aspect fields stay null.
"""

from __future__ import annotations

from stepcritic.data_prep.adapters.records import require_fields
from stepcritic.data_prep.schema import SchemaError


def default_image_root(input_path: str) -> None:
    return None  # images are embedded as base64


def _bool(value, where: str, field: str) -> bool:
    if isinstance(value, bool):
        return value
    raise SchemaError(f"unknown label {value!r}; expected true or false", where, field)


def convert(raw: dict, where: str, ctx: dict) -> dict:
    require_fields(raw, where, ("id", "question", "image", "response", "reasoning_correctness"))
    response = raw["response"]
    steps = response.get("reasoning") if isinstance(response, dict) else None
    if not isinstance(steps, list) or not steps:
        raise SchemaError("a chain needs at least one step", where, "response.reasoning")
    labels = raw["reasoning_correctness"]
    critics = raw.get("reasoning_critic") or [[] for _ in steps]
    if not isinstance(labels, list) or len(labels) != len(steps):
        raise SchemaError(f"{len(labels) if isinstance(labels, list) else 'no'} labels for {len(steps)} steps",
                          where, "reasoning_correctness")
    if len(critics) != len(steps):
        raise SchemaError(f"{len(critics)} critiques for {len(steps)} steps", where, "reasoning_critic")
    meta = raw.get("meta_data") or {}
    superskill = meta.get("critic_superskill")
    return {
        "chain_id": f"visco-{raw['id']}",
        "source": "visco",
        "image": raw["image"],
        "question": raw["question"],
        "reference_answer": None if raw.get("label") is None else str(raw["label"]),
        "final_answer": None if response.get("answer") is None else str(response["answer"]),
        "answer_correct": None if raw.get("answer_correctness") is None
        else _bool(raw["answer_correctness"], where, "answer_correctness"),
        "generator": meta.get("src_model"),
        "category": superskill.lower() if isinstance(superskill, str) else None,
        "steps": [
            {"text": text, "correct": _bool(ok, where, f"reasoning_correctness[{i}]"),
             "explanations": [c for c in (crit if isinstance(crit, list) else [crit]) if c]}
            for i, (text, ok, crit) in enumerate(zip(steps, labels, critics))
        ],
        "meta": {"visco_id": raw["id"], "critic_skill": meta.get("critic_skill"),
                 "src_dataset": meta.get("src_dataset")},
    }
