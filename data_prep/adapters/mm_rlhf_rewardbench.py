"""MM-RLHF-RewardBench's `mm_reward_bench.jsonl` (`id`, `prompt`, `chosen`, `rejected`, `chosen_reason`,
`rejected_reason`, and `image`: a path, or `video`: a folder of frames) -> one group of two chains per record.

Several records share an `id`: pairs about one question. Each record is its own group, and the shared id is the
chains' `set_id`: the benchmark's ACC+ counts a question right only when every pair of it is. The category is the
task the benchmark reads from the image path (mcq, long, short, safety). Video records are rejected (naming the
`video` field): a chain shows images, not a folder of frames. Each response's reason goes to its chain's meta.
"""

from __future__ import annotations

from stepcritic.data_prep.adapters.pairwise import item_chains, item_key, response_steps, text
from stepcritic.data_prep.adapters.records import beside_input, require_fields
from stepcritic.data_prep.schema import SchemaError

SOURCE = "mm-rlhf-rewardbench"
TASKS = ("mcq", "long", "short", "safety")  # the benchmark's own breakdown, read from the image path

default_image_root = beside_input


def convert(raw, where: str, ctx: dict) -> list[dict]:
    require_fields(raw, where, ("id", "prompt", "chosen", "rejected"))
    if raw.get("image") is None:
        if raw.get("video") is not None:
            raise SchemaError("video prompts (a folder of frames) are not supported", where, "video")
        raise SchemaError("missing required field", where, "image")
    image = text(raw["image"], where, "image")
    set_id = item_key(raw["id"], where, "id")
    task = next((t for t in TASKS if t in image.lower()), None)
    steps = [response_steps(raw[name], where, name) for name in ("chosen", "rejected")]
    reasons = [{"reason": raw[f"{name}_reason"]} if isinstance(raw.get(f"{name}_reason"), str) else {}
               for name in ("chosen", "rejected")]
    # records share an id, so the record's line names its group
    item = f"{set_id}-{where.rsplit(':', 1)[-1]}"
    return item_chains(SOURCE, item, text(raw["prompt"], where, "prompt"), image, steps, [1, 2],
                       category=task, set_id=set_id, meta={"id": set_id}, response_meta=reasons)
