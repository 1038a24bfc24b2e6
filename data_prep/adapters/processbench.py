"""ProcessBench (`id`, `generator`, `problem`, `steps`, `final_answer_correct`, `label`: the index of the first
wrong step, -1 when every step is right) -> text-only chains.

The label says where the first error is, and nothing after it: the steps before it are correct, the labelled step
is incorrect, and the steps after it stay unlabelled (`correct: null`, never a guess), so the chain is incorrect and
its later steps are out of step-level scores. With -1 every step is correct. The category is the subset the id
starts with (`gsm8k-12` -> gsm8k).
"""

from __future__ import annotations

from stepcritic.data_prep.adapters.pairwise import item_key, text
from stepcritic.data_prep.adapters.records import require_fields
from stepcritic.data_prep.schema import SchemaError


def default_image_root(input_path: str) -> None:
    return None  # text only


def first_error(label, n_steps: int, where: str) -> int:
    if isinstance(label, bool) or not isinstance(label, int) or not -1 <= label < n_steps:
        raise SchemaError(f"expected the index of the first wrong step (0 to {n_steps - 1}) or -1 for none, "
                          f"got {label!r}", where, "label")
    return label


def convert(raw, where: str, ctx: dict) -> dict:
    require_fields(raw, where, ("id", "problem", "steps", "label"))
    steps = raw["steps"]
    if not isinstance(steps, list) or not steps:
        raise SchemaError("a chain needs at least one step", where, "steps")
    texts = [text(s, where, f"steps[{i}]") for i, s in enumerate(steps)]
    label = first_error(raw["label"], len(texts), where)
    answer_correct = raw.get("final_answer_correct")
    if answer_correct is not None and not isinstance(answer_correct, bool):
        raise SchemaError(f"expected true/false/null, got {answer_correct!r}", where, "final_answer_correct")
    item = item_key(raw["id"], where, "id")
    verdicts = [True] * len(texts) if label == -1 else [True] * label + [False] + [None] * (len(texts) - label - 1)
    return {
        "chain_id": f"processbench-{item}",
        "source": "processbench",
        "image": None,
        "question": text(raw["problem"], where, "problem"),
        "answer_correct": answer_correct,
        "generator": raw.get("generator") if isinstance(raw.get("generator"), str) else None,
        "category": item.rsplit("-", 1)[0] if "-" in item else None,
        "steps": [{"text": t, "correct": ok} for t, ok in zip(texts, verdicts)],
        "meta": {"processbench_id": item, "label": label},
    }
