"""Ingest annotated chains from a source format into the canonical schema.

Every input record ends up either kept or rejected, never dropped: `stats.json` holds both counts and
every rejection with its file:line, field and reason. With `on_error="fail"` the first bad record stops
the run with an `IngestError` naming it.
"""

from __future__ import annotations

import importlib
import json
import os
from collections import Counter, defaultdict
from typing import Iterator

from stepcritic.data_prep import labels
from stepcritic.data_prep.card import write_ingest_card
from stepcritic.data_prep.schema import SchemaError, chain_meta, save_chains, validate_chain
from stepcritic.errors import UserError

# format -> adapter module; each exposes `convert(raw, where, ctx) -> dict` (a chain before validation),
# `default_image_root(input_path) -> str|None`, and optionally `check(chains, stats)` for source-specific
# consistency checks recorded in the stats.
FORMATS = {
    "miceval": "stepcritic.data_prep.adapters.miceval",
    "visco": "stepcritic.data_prep.adapters.visco",
    "stepwise": "stepcritic.data_prep.adapters.stepwise",
    "jsonl": "stepcritic.data_prep.adapters.canonical",
    "visualprocessbench": "stepcritic.data_prep.adapters.visualprocessbench",
    "visualprm": "stepcritic.data_prep.adapters.visualprm",
}

STEP_ASPECTS = ("type", "correct", "description_correctness", "description_relevance", "logic_correct",
                "logic_relevant", "informative", "logic_error", "human_score", "rating")


# what stats["label_notes"] counts (every key, zeros included, so a reader can tell "none" from "not counted")
NOTE_KEYS = ("neutral_steps", "soft_labelled_steps", "soft_labelled_correct", "soft_labelled_incorrect",
             "multi_image_chains", "images_left_out")


class IngestError(UserError, RuntimeError):
    """Input that cannot be ingested at all (missing file, unknown format, every record rejected)."""


def read_records(path: str) -> Iterator[tuple[str, object]]:
    """Yield (where, record) for .jsonl/.json/.parquet input; a malformed line yields a SchemaError."""
    name = os.path.basename(path)
    if path.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError) as e:
            raise IngestError(f"{path}: unreadable parquet file ({' '.join(str(e).split())})") from None
        for i, rec in enumerate(table.to_pylist(), 1):
            yield f"{name}:row{i}", rec
        return
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except UnicodeDecodeError as e:
                raise IngestError(f"{path}: not UTF-8 text ({e.reason}); expected JSON") from None
            except json.JSONDecodeError as e:
                yield f"{name}:{e.lineno}", SchemaError(f"malformed JSON ({e.msg})", f"{name}:{e.lineno}")
                return
        for i, rec in enumerate(data if isinstance(data, list) else [data], 1):
            yield f"{name}:item{i}", rec
        return
    with open(path, encoding="utf-8") as f:
        lineno = 0
        try:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{name}:{lineno}"
                try:
                    yield where, json.loads(line)
                except json.JSONDecodeError as e:
                    yield where, SchemaError(f"malformed JSON line ({e.msg} at column {e.colno})", where)
        except UnicodeDecodeError as e:
            raise IngestError(f"{path}:{lineno + 1}: not UTF-8 text ({e.reason}); expected JSON lines") from None


def label_counts(chains: list[dict]) -> dict:
    counts: dict[str, Counter] = defaultdict(Counter)
    for c in chains:
        counts["chain_correct"][str(c["chain_correct"])] += 1
        counts["answer_correct"][str(c["answer_correct"])] += 1
        for s in c["steps"]:
            for aspect in STEP_ASPECTS:
                counts[aspect][str(s[aspect])] += 1
            for e in s["description_errors"]:
                counts["description_errors"][e] += 1
    return {k: dict(sorted(v.items())) for k, v in sorted(counts.items())}


def ingest(fmt: str, input_path: str, out_dir: str | None, image_root: str | None = None,
           on_error: str = "fail", log=print, soft_threshold: float = labels.SOFT_THRESHOLD) -> dict:
    """Convert `input_path` in format `fmt` into a canonical chains dataset at `out_dir`; return the stats.

    Steps with a soft label (a score in [0, 1]) and no boolean are correct when the score is above
    `soft_threshold`.
    """
    if fmt not in FORMATS:
        raise IngestError(f"unknown format {fmt!r}; choose one of {sorted(FORMATS)}")
    if on_error not in ("fail", "skip"):
        raise IngestError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
    if isinstance(soft_threshold, bool) or not isinstance(soft_threshold, (int, float)) or not 0 <= soft_threshold < 1:
        # a score is at most 1, so a threshold of 1 would label every step incorrect
        raise IngestError(f"--soft-threshold must be in [0, 1) (a step is correct when its score is above it), "
                          f"got {soft_threshold!r}")
    if os.path.isdir(input_path):
        raise IngestError(f"{input_path} is a folder; --input takes one file (.jsonl, .json or .parquet)")
    if not os.path.isfile(input_path):
        raise IngestError(f"input file not found: {input_path}")
    adapter = importlib.import_module(FORMATS[fmt])
    ctx = {"image_root": image_root or adapter.default_image_root(input_path), "input": input_path}

    kept: list[dict] = []
    rejected: list[dict] = []
    seen_ids: set[str] = set()
    notes: Counter = Counter()
    multi_image: list[str] = []
    n_in = 0
    for where, raw in read_records(input_path):
        n_in += 1
        try:
            if isinstance(raw, SchemaError):
                raise raw
            chain = validate_chain(adapter.convert(raw, where, ctx), where, ctx["image_root"], soft_threshold)
            if chain["chain_id"] in seen_ids:
                raise SchemaError(f"duplicate chain_id {chain['chain_id']!r}", where, "chain_id")
        except SchemaError as e:
            if on_error == "fail":
                raise IngestError(f"{e} (use --on-error skip to skip bad records)") from None
            rejected.append({"where": e.where or where, "field": e.field, "reason": e.reason})
            log(f"skipped {e}")
            continue
        seen_ids.add(chain["chain_id"])
        kept.append(chain)
        chain_notes = labels.label_notes(chain, chain_meta(chain))
        notes.update(chain_notes)
        if chain_notes["multi_image_chains"]:
            multi_image.append(chain["chain_id"])

    assert n_in == len(kept) + len(rejected)  # the accounting invariant, never violated silently
    if n_in == 0:
        raise IngestError(f"{input_path}: holds no records (the file is empty)")
    stats = {
        "format": fmt, "input": os.path.abspath(input_path), "image_root": ctx["image_root"],
        "n_records": n_in, "n_chains": len(kept), "n_steps": sum(len(c["steps"]) for c in kept),
        "n_rejected": len(rejected), "rejected": rejected, "label_counts": label_counts(kept),
        "label_notes": {k: notes[k] for k in NOTE_KEYS}, "soft_threshold": float(soft_threshold),
        "multi_image_chains": multi_image,
    }
    if hasattr(adapter, "check"):
        stats.update(adapter.check(kept))
    if out_dir:
        if not kept:
            raise IngestError(f"no valid chains in {input_path} ({len(rejected)} rejected); nothing written")
        save_chains(kept, out_dir)
        with open(os.path.join(out_dir, "stats.json"), "w") as f:
            json.dump(stats, f, indent=2)
        write_ingest_card(stats, os.path.join(out_dir, "README.md"))
    return stats
