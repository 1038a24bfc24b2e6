"""What the reward-model benchmark formats share: an item's responses as the chains of one group.

An item (one prompt, two or more responses, the human preference) becomes one chain per response, all in the
group `<source>-<item>`, each with its `preference_rank` (1 the best, equal ranks a tie) and the benchmark's
breakdowns (`category`, `subset`, `set_id`); the schema's docstring and docs/data.md say why chains. A response's
text becomes its steps, one per paragraph, with no verdict: these benchmarks judge whole responses.
"""

from __future__ import annotations

import re

from stepcritic.data_prep.schema import SchemaError

PARAGRAPHS = re.compile(r"\n\s*\n")


def text(value, where: str, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SchemaError(f"expected non-empty text, got {value!r}", where, field)
    return value


def response_steps(value, where: str, field: str) -> list[str]:
    """A response's paragraphs, in order (joined by a blank line they are the response, up to surrounding space)."""
    return [p.strip() for p in PARAGRAPHS.split(text(value, where, field)) if p.strip()]


def ranks_from_order(values: list, where: str, field: str) -> list[int]:
    """Preference ranks (1 the best, ties equal) from one number per response where a lower number is better."""
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
            raise SchemaError(f"expected a number per response, got {v!r}", where, f"{field}[{i}]")
    order = sorted(set(values))
    return [order.index(v) + 1 for v in values]


def item_key(value, where: str, field: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise SchemaError(f"expected an id, got {value!r}", where, field)
    return str(value).strip()


def item_chains(source: str, item: str, question: str, image, responses: list[list[str]], ranks: list[int],
                category: str | None = None, subset: str | None = None, set_id: str | None = None,
                generators: list | None = None, reference_answer: str | None = None,
                meta: dict | None = None, response_meta: list[dict] | None = None) -> list[dict]:
    """The chains of one item, response by response (`chain_id` `<source>-<item>-<n>`, n from 1)."""
    generators = generators or [None] * len(responses)
    response_meta = response_meta or [{} for _ in responses]
    return [{
        "chain_id": f"{source}-{item}-{n}", "group_id": f"{source}-{item}", "source": source, "image": image,
        "question": question, "reference_answer": reference_answer, "final_answer": None, "answer_correct": None,
        "chain_correct": None, "generator": generator, "category": category, "subset": subset, "set_id": set_id,
        "preference_rank": rank, "steps": steps, "meta": {**(meta or {}), **extra, "response": n},
    } for n, (steps, rank, generator, extra) in enumerate(zip(responses, ranks, generators, response_meta), 1)]
