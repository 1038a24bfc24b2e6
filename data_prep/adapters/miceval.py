"""MiCEval release jsonl -> canonical chains.

Label semantics (MiCEval Sec. 2.3 and Appendix B.1), checked against the Normal split:
- description relevance "Both" is the only correct value: "Image Relevant" means relevant to the image
  only (a logic-relevance error), "Logic Relevant" relevant to the question only (an image-relevance
  error), "None" neither (the paper's Table 6 counts all three as errors).
- `informativeness_label` answers "is this step uninformative (repetitive/redundant)?": "No" means the
  step IS informative. With this reading the steps' aspect labels reproduce the file's
  `cot_fully_correct` on all 446 chains; the opposite reading matches on only 264 of them.
"""

from __future__ import annotations

import os

from stepcritic.data_prep.adapters.records import require_fields
from stepcritic.data_prep.schema import SchemaError, chain_meta, group_id_for

STEP_TYPE = {"Description": "description", "Reasoning": "reasoning", "Both": "both"}
DESCRIPTION_CORRECTNESS = {"Fully correct": "correct", "Partially correct": "partial", "Unsupported": "unsupported"}
DESCRIPTION_RELEVANCE = {"Both": "both", "Image Relevant": "image", "Logic Relevant": "logic", "None": "none"}
DESCRIPTION_ERRORS = {"Entity false": "entity", "Attribute false": "attribute",
                      "Spatial Relationship false": "spatial", "Non-spatial Relationship false": "non_spatial"}
LOGIC_CORRECT = {"Correct": True, "Incorrect": False}
LOGIC_RELEVANT = {"Relevant": True, "Irrelevant": False}
UNINFORMATIVE = {"Yes": False, "No": True}  # value = informative
LOGIC_ERROR = {"Inter-step Incorrect": "inter", "Intra-step Incorrect": "intra", "Both": "both"}
YES_NO = {"Yes": True, "No": False, None: None}
TRUE_FALSE = {"True": True, "False": False, True: True, False: False, None: None}

# MiCEval chain labels kept verbatim in meta
META_KEYS = ("idx", "type", "cot_fully_correct", "logic_fully_correct", "description_fully_correct",
             "prediction_correct", "cot_answer")


def default_image_root(input_path: str) -> str:
    # image paths look like "dataset/image/vqav2/..." and are relative to the release root,
    # one level above the jsonl's own folder
    return os.path.dirname(os.path.dirname(os.path.abspath(input_path)))


def _map(table: dict, value, where: str, field: str):
    if value is None:
        return None
    if value not in table:
        raise SchemaError(f"unknown label {value!r}; expected one of {[k for k in table if k is not None]}",
                          where, field)
    return table[value]


def _step(raw: dict, key: str, where: str) -> dict:
    f = lambda name: f"steps.{key}.{name}"  # noqa: E731
    if not isinstance(raw, dict) or not isinstance(raw.get("step"), str):
        raise SchemaError("a step needs a 'step' text", where, f("step"))
    if raw.get("step_idx") is not None and str(raw["step_idx"]) != key:
        raise SchemaError(f"step_idx {raw['step_idx']} does not match its key {key}", where, f("step_idx"))
    if "type_label" not in raw:
        raise SchemaError("missing step type", where, f("type_label"))
    errors = raw.get("description_error_label") or []
    if isinstance(errors, str):
        errors = [errors]
    return {
        "text": raw["step"],
        "type": _map(STEP_TYPE, raw.get("type_label"), where, f("type_label")),
        "description_correctness": _map(DESCRIPTION_CORRECTNESS, raw.get("description_correctness_label"), where,
                                        f("description_correctness_label")),
        "description_relevance": _map(DESCRIPTION_RELEVANCE, raw.get("description_relevance_label"), where,
                                      f("description_relevance_label")),
        "description_errors": [_map(DESCRIPTION_ERRORS, e, where, f("description_error_label")) for e in errors],
        "logic_correct": _map(LOGIC_CORRECT, raw.get("logic_correctness_label"), where, f("logic_correctness_label")),
        "logic_relevant": _map(LOGIC_RELEVANT, raw.get("logic_relevant_label"), where, f("logic_relevant_label")),
        "informative": _map(UNINFORMATIVE, raw.get("informativeness_label"), where, f("informativeness_label")),
        "logic_error": _map(LOGIC_ERROR, raw.get("logic_error_label"), where, f("logic_error_label")),
    }


def convert(raw: dict, where: str, ctx: dict) -> dict:
    require_fields(raw, where, ("idx", "image", "question", "steps"))
    steps = raw["steps"]
    if not isinstance(steps, dict) or not steps:
        raise SchemaError("a chain needs at least one step", where, "steps")
    keys = sorted(steps, key=lambda k: int(k) if str(k).isdigit() else -1)
    if keys != [str(i) for i in range(1, len(keys) + 1)]:
        raise SchemaError(f"step keys must be 1..{len(keys)}, got {list(steps)}", where, "steps")
    image = raw["image"]
    if not os.path.exists(os.path.join(ctx["image_root"], image)):
        raise SchemaError(f"image file not found: {os.path.join(ctx['image_root'], image)}", where, "image")
    # the release leaves `source` out on some records; the image folder names the origin dataset
    parts = image.split("/")
    origin = raw.get("source") or (parts[2] if len(parts) > 3 and parts[1] == "image" else None)
    meta = {k: raw.get(k) for k in META_KEYS}
    meta["origin_dataset"] = origin
    return {
        "chain_id": f"miceval-{raw['idx']}",
        "group_id": group_id_for(image, raw["question"]),
        "source": "miceval",
        "image": image,
        "question": raw["question"],
        "reference_answer": raw.get("answer"),
        "final_answer": None,  # MiCEval chains end in free text; the answer is not extracted
        "answer_correct": _map(TRUE_FALSE, raw.get("prediction_correct"), where, "prediction_correct"),
        "chain_correct": None,  # derived from the steps by the schema, then checked against the file
        "generator": raw.get("answering_model"),
        "category": raw.get("type"),
        "steps": [_step(steps[k], k, where) for k in keys],
        "meta": meta,
    }


def check(chains) -> dict:
    """Agreement of step-derived chain correctness with the file's own `cot_fully_correct` label (one pass over
    any iterable of chains)."""

    n, disagree = 0, []
    for c in chains:
        n += 1
        if YES_NO.get(chain_meta(c).get("cot_fully_correct")) != c["chain_correct"]:
            disagree.append(c["chain_id"])
    return {"chain_label_check": {"field": "cot_fully_correct", "agree": n - len(disagree),
                                  "disagree": len(disagree), "disagreeing_chains": disagree}}
