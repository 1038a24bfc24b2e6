"""Monte-Carlo labelled process data in the VisualPRM400K layout -> canonical chains with soft step labels.

A record: `image` (a path, or a list of paths), `question`, optional `answer`, `response` (the full text) and
`steps_with_score`: [{`step`: text, `score`: number in [0, 1], optional `num_mc_correct`, `num_mc_total`}, ...],
where a step's score is the share of sampled continuations from it that reached the right answer. This is how
large process-supervision sets are labelled automatically (Math-Shepherd, VisualPRM400K); any such data can be
written in this layout.

The score is kept as the step's `soft_label`, and `correct` is the score above `--soft-threshold` (default and
reason in `labels.SOFT_THRESHOLD`); the rollout counts go to the chain's meta. InternVL-style questions start with
`<image>` placeholders: the prompts place the image themselves, so those are removed (`question_orig`, the
question without the template, is preferred when present). Several images are all kept, in order (`image_list.py`).
"""

from __future__ import annotations

import re

from stepcritic.data_prep.adapters.image_list import find_images, image_paths
from stepcritic.data_prep.adapters.records import beside_input, require_fields
from stepcritic.data_prep.schema import SchemaError, group_id_for

IMAGE_PLACEHOLDERS = re.compile(r"^\s*(?:<image(?:\s*\d+)?>\s*)+")
COUNTS = ("num_mc_correct", "num_mc_total")


default_image_root = beside_input


def _score(value, where: str, field: str) -> float:
    # `not 0 <= value <= 1` is also true for NaN
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise SchemaError(f"expected a score in [0, 1], got {value!r}", where, field)
    return float(value)


def _question(raw: dict) -> object:
    original = raw.get("question_orig")
    if isinstance(original, str) and original.strip():
        return original
    question = raw.get("question")
    return IMAGE_PLACEHOLDERS.sub("", question) if isinstance(question, str) else question


def convert(raw: dict, where: str, ctx: dict) -> dict:
    require_fields(raw, where, ("image", "question", "steps_with_score"))
    scored = raw["steps_with_score"]
    if not isinstance(scored, list) or not scored:
        raise SchemaError("a chain needs at least one step", where, "steps_with_score")
    steps, counts = [], {k: [] for k in COUNTS}
    for i, item in enumerate(scored):
        field = f"steps_with_score[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("step"), str) or not item["step"].strip():
            raise SchemaError("a step needs a non-empty 'step' text", where, f"{field}.step")
        if item.get("score") is None:
            raise SchemaError("missing required field", where, f"{field}.score")
        steps.append({"text": item["step"], "soft_label": _score(item["score"], where, f"{field}.score")})
        for k in COUNTS:
            counts[k].append(item.get(k))
    paths = image_paths(raw["image"], where)
    images = find_images(paths, ctx["image_root"], where)
    question = _question(raw)
    row_id = raw.get("id", where.replace(":", "-"))
    meta = {**{k: v for k, v in counts.items() if any(n is not None for n in v)}}
    meta.update({k: raw[k] for k in ("source", "data_source", "question_type", "answer_type")
                 if isinstance(raw.get(k), (str, int, float, bool))})
    return {
        "chain_id": f"visualprm-{row_id}",
        "group_id": group_id_for("\x00".join(paths), question) if isinstance(question, str) else None,
        "source": "visualprm",
        "image": images,
        "question": question,
        "reference_answer": None if raw.get("answer") is None else str(raw["answer"]),
        "final_answer": None,
        "answer_correct": None,  # the last step's score estimates it; it is not a verdict
        "chain_correct": None,  # derived from the steps' thresholded labels
        "generator": raw.get("policy_model"),
        "category": raw.get("data_source") or raw.get("source"),
        "steps": steps,
        "meta": meta,
    }
