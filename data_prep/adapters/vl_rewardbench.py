"""VL-RewardBench (`id`, `query`, `image`, `response`: the candidate responses, `human_ranking`: one rank per
response, lower better, so `[0, 1]` prefers the first) -> one group of chains per item, a chain per response.

`query_source` is the category; `subset` is the benchmark's reporting domain for it (general, hallucination,
reasoning) where the source is one the benchmark names. `models` gives each response's generator and `ground_truth`
the reference answer; `judge` and `rationale` go to the meta. The image is a path (relative to the file's folder
unless --image-root says otherwise) or, read from the released parquet, the embedded `{bytes, path}`.
"""

from __future__ import annotations

from stepcritic.data_prep.adapters.pairwise import item_chains, item_key, ranks_from_order, response_steps, text
from stepcritic.data_prep.adapters.records import beside_input, require_fields
from stepcritic.data_prep.schema import SchemaError

SOURCE = "vl-rewardbench"
# the benchmark reports three domains; its query sources map onto them so
DOMAINS = {"vlfeedback": "general", "wildvision-battle": "general", "povid": "hallucination",
           "rlhf-v": "hallucination", "rlaif-v": "hallucination", "reasoning_tasks": "reasoning",
           "mathverse": "reasoning", "mmmu": "reasoning"}

default_image_root = beside_input


def convert(raw, where: str, ctx: dict) -> list[dict]:
    require_fields(raw, where, ("id", "query", "image", "response", "human_ranking"))
    responses, ranking = raw["response"], raw["human_ranking"]
    if not isinstance(responses, list) or len(responses) < 2:
        raise SchemaError("expected a list of at least two responses", where, "response")
    if not isinstance(ranking, list) or len(ranking) != len(responses):
        given = f"{len(ranking)} rank(s)" if isinstance(ranking, list) else "no list of ranks"
        raise SchemaError(f"{given} for {len(responses)} responses", where, "human_ranking")
    steps = [response_steps(r, where, f"response[{i}]") for i, r in enumerate(responses)]
    models = raw.get("models")
    if models is not None and (not isinstance(models, list) or len(models) != len(responses)):
        raise SchemaError(f"expected one model per response ({len(responses)})", where, "models")
    source = raw.get("query_source") if isinstance(raw.get("query_source"), str) else None
    truth = raw.get("ground_truth")
    return item_chains(
        SOURCE, item_key(raw["id"], where, "id"), text(raw["query"], where, "query"), raw["image"], steps,
        ranks_from_order(ranking, where, "human_ranking"), category=source,
        subset=DOMAINS.get(source.lower()) if source else None,
        generators=[None if m is None else str(m) for m in models] if models else None,
        reference_answer=None if truth in (None, "") else str(truth),
        meta={k: raw[k] for k in ("id", "judge", "rationale") if isinstance(raw.get(k), (str, int))})
