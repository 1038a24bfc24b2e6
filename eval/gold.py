"""The chains as every task reads them: one small record per chain (`gold_view`), its labels and texts without images,
read once from the dataset `load_dataset` opens."""

from __future__ import annotations

import hashlib
import json

from stepcritic.data_prep.schema import load_chains
from stepcritic.eval import verifier
from stepcritic.eval.errors import EvalError
from stepcritic.eval.judging import batch_rows


def chain_digest(chain: dict) -> str:
    """What the judge saw of a chain (text side); a cached judgment of different content is stale."""
    blob = json.dumps([chain["question"], chain.get("final_answer"), [s["text"] for s in chain["steps"]]])
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def step_kinds(chain: dict) -> list:
    """Per step, the kind of claim it makes where the chain's `meta.step_kinds` lists them (the synthetic
    generator's chains: count, colour, position...), else None: a breakdown of step metrics."""
    try:
        kinds = json.loads(chain.get("meta") or "{}").get("step_kinds")
    except (TypeError, ValueError, AttributeError):
        kinds = None
    return kinds if isinstance(kinds, list) and len(kinds) == len(chain["steps"]) else [None] * len(chain["steps"])


def gold_view(dataset, verifier_targets: bool = True) -> list[dict]:
    """The labels every metric needs, without images: small enough to hold for the whole dataset. Without
    `verifier_targets` (no verifier task asked) the human labels of the verifier tasks are left out: nine per
    step, they took more time than all the rest."""
    columns = ["chain_id", "group_id", "source", "generator", "category", "question", "final_answer",
               "reference_answer", "answer_correct", "chain_correct", "steps", "meta", "preference_rank", "subset",
               "set_id"]
    gold = []
    # one object per distinct value of what repeats (a chain's source, a step's type, score, premises, an empty list
    # of reference critiques...), not one per chain or step: 100,000 chains hold half a million of each. The gold
    # chains are only read once built, so steps may share equal lists.
    scalars, explanations, premises = {}, {}, {}  # strings and floats never compare equal: one table holds both
    keep = scalars.setdefault  # keep(value, value): the first object equal to value

    def same_list(table: dict, value):
        return value if value is None else table.setdefault(tuple(value), value)

    # read a batch of rows at a time: the whole dataset as Python rows (every step field) is several times the size
    # of what is kept
    for chain in (row for batch in dataset.select_columns([c for c in columns if c in dataset.column_names])
                  .iter(batch_size=1000) for row in batch_rows(batch)):
        # the human labels of MiCEval's verifier tasks
        chain_targets, step_targets = verifier.targets(chain) if verifier_targets else (None, [None] * len(
            chain["steps"]))
        kinds = step_kinds(chain)
        shared = {f: keep(chain[f], chain[f]) for f in ("group_id", "source", "generator", "category", "question",
                                                        "final_answer", "reference_answer")}
        gold.append({
            "chain_id": chain["chain_id"], "group_id": shared["group_id"], "source": shared["source"],
            "generator": shared["generator"], "category": shared["category"],
            "answer_correct": chain["answer_correct"], "chain_correct": chain["chain_correct"],
            "digest": chain_digest(chain), "verifier": chain_targets,
            # the texts, for what shows a chain to a model after judging: the corrector, an LLM explanation matcher
            "question": shared["question"], "final_answer": shared["final_answer"],
            "reference_answer": shared["reference_answer"],
            # a pairwise item's preference among its group's responses (`docs/data.md`), None elsewhere
            "preference_rank": chain.get("preference_rank"), "subset": keep(chain.get("subset"), chain.get("subset")),
            "set_id": chain.get("set_id"),
            "steps": [{"type": keep(s["type"], s["type"]), "correct": s["correct"],
                       "human_score": keep(s["human_score"], s["human_score"]),
                       "explanations": same_list(explanations, s["explanations"]),
                       "premises": same_list(premises, s["premises"]), "verifier": targets, "text": s["text"],
                       "kind": keep(kind, kind)} for s, targets, kind in zip(chain["steps"], step_targets, kinds)],
        })
    if len({g["chain_id"] for g in gold}) != len(gold):
        raise EvalError("chains: chain_id values are not unique; every judgment is keyed by chain_id")
    return gold


def load_dataset(path: str, decode_images: bool, limit: int | None):
    try:
        dataset = load_chains(path, decode_images=decode_images)
    except (FileNotFoundError, ValueError) as e:  # ValueError covers SchemaError and malformed JSON lines
        raise EvalError(f"chains: {e}") from None
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    return dataset
