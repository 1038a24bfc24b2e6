"""VisualProcessBench `test.jsonl` -> canonical chains.

A record: `image` (a list of image paths), `question`, `answer` (the ground truth), `response`
{`steps`: [text, ...], `process_correctness`: [1 | 0 | -1 per step]}, `policy_model`, `data_source`.

1 is a correct step and -1 an incorrect one; 0 is neutral (the annotators found it neither wrong nor useful
progress). Each label is kept as the step's `rating`; a neutral step gets `correct: null`, never a guess, and
`data build --neutral` chooses what it becomes (VisualPRM's own evaluation leaves neutral steps out, as
`stepcritic eval` does with any step whose `correct` is null). Records carry no id and no verdict on the final
answer: chains are named by their line, and `answer_correct` stays null (the critique kinds skip them).
Several images are all kept, in order (`image_list.py`).
"""

from __future__ import annotations

from stepcritic.data_prep.adapters.image_list import find_images, image_paths
from stepcritic.data_prep.adapters.records import beside_input, require_fields
from stepcritic.data_prep.schema import SchemaError, group_id_for

# the release's images.zip unpacks into images/ next to test.jsonl; paths may be relative to either folder
IMAGE_SUBFOLDERS = ("", "images")


default_image_root = beside_input


def _rating(value, where: str, field: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value in (1, 0, -1):
        return value
    raise SchemaError(f"unknown label {value!r}; expected 1 (correct), 0 (neutral) or -1 (incorrect)", where, field)


def convert(raw: dict, where: str, ctx: dict) -> dict:
    require_fields(raw, where, ("image", "question", "response"))
    response = raw["response"]
    if not isinstance(response, dict):
        raise SchemaError("expected an object with 'steps' and 'process_correctness'", where, "response")
    steps, labels = response.get("steps"), response.get("process_correctness")
    if not isinstance(steps, list) or not steps:
        raise SchemaError("a chain needs at least one step", where, "response.steps")
    if not isinstance(labels, list) or len(labels) != len(steps):
        raise SchemaError(f"{len(labels) if isinstance(labels, list) else 'no'} labels for {len(steps)} steps",
                          where, "response.process_correctness")
    for i, text in enumerate(steps):
        if not isinstance(text, str) or not text.strip():
            raise SchemaError(f"a step must be non-empty text, got {text!r}", where, f"response.steps[{i}]")
    ratings = [_rating(v, where, f"response.process_correctness[{i}]") for i, v in enumerate(labels)]
    paths = image_paths(raw["image"], where)
    images = find_images(paths, ctx["image_root"], where, subfolders=IMAGE_SUBFOLDERS)
    question = raw["question"]
    source = raw.get("data_source") if isinstance(raw.get("data_source"), str) else None
    return {
        "chain_id": f"visualprocessbench-{where.replace(':', '-')}",
        "group_id": group_id_for("\x00".join(paths), question) if isinstance(question, str) else None,
        "source": "visualprocessbench",
        "image": images,
        "question": question,
        "reference_answer": None if raw.get("answer") is None else str(raw["answer"]),
        "final_answer": None,  # the response ends in free text; the answer is not extracted
        "answer_correct": None,
        "chain_correct": None,  # derived from the steps: false with any -1, open while a step is neutral
        "generator": raw.get("policy_model"),
        "category": source,
        "steps": [{"text": text, "rating": r} for text, r in zip(steps, ratings)],
        "meta": {"data_source": source},
    }
