"""Rehearsal: rows of a base's own pre-training tasks mixed into a critic's training rows (recipe keys
`rehearsal_path`, `rehearsal_rows`).

Fine-tuning a small base on one task overwrites what that task rewards only weakly: a PRM fine-tuned from the tiny
base, which reads the sizes of shapes, writes every size claim's note from the claim's words (docs/tiny-critic.md).
Replaying the base's scene questions beside the critic's rows keeps the reading alive, as pre-training data is
replayed in continual fine-tuning. Any dataset of chat rows (`messages`, and `images` for a VLM) can be rehearsed:
for the tiny base, `python -m stepcritic.train.tiny.rehearsal` writes its scene questions.

The rows are appended to the training split and the whole is shuffled with the recipe's seed; a rehearsal row has
no step judgements, so the other columns of the training rows are null in it (a PRM row's `step_targets` too, which
`prm_targets.apply_step_targets` reads as "no targets of its own"). Its column `rehearsal` tells the two apart.
"""

from __future__ import annotations

import logging

from stepcritic.data_prep.contract import DataContractError

logger = logging.getLogger(__name__)

COLUMN = "rehearsal"  # True on a rehearsed row, False on the critic's own
METHODS = ("sft", "prm")  # methods trained on chat rows: what a rehearsal row is


def problem(args) -> str | None:
    """What is wrong with a recipe's rehearsal keys (`StepCriticArgs`), in one line; None when nothing is."""
    if args.rehearsal_rows is not None and args.rehearsal_rows < 1:
        return f"`rehearsal_rows` must be at least 1 (null: every row of rehearsal_path), got {args.rehearsal_rows}"
    if args.rehearsal_rows is not None and not args.rehearsal_path:
        return "`rehearsal_rows` is set but `rehearsal_path` is not: name the rows to rehearse"
    if args.rehearsal_path and args.method not in METHODS:
        return (f"`rehearsal_path`: method {args.method!r} does not train on chat rows; rehearsal is for "
                f"{' and '.join(METHODS)}")
    return None


def load_rows(path: str, limit: int | None = None):
    """The rows at `path` (a saved Dataset, or a DatasetDict's `train` split), the first `limit` of them."""
    from datasets import DatasetDict, load_from_disk

    try:
        data = load_from_disk(path)
    except (FileNotFoundError, ValueError) as error:
        raise DataContractError(f"rehearsal_path {path!r}: not a saved dataset ({error})") from None
    if isinstance(data, DatasetDict):
        if "train" not in data:
            raise DataContractError(f"rehearsal_path {path!r}: no 'train' split (found {list(data)})")
        data = data["train"]
    if "messages" not in data.column_names:
        raise DataContractError(f"rehearsal_path {path!r}: its rows have no 'messages' column "
                                f"(columns {data.column_names})")
    if limit is not None and limit > len(data):
        raise DataContractError(f"rehearsal_path {path!r}: rehearsal_rows is {limit} but it holds {len(data)} rows")
    return data.select(range(limit)) if limit is not None else data


def mix(train, path: str, limit: int | None = None, seed: int = 0):
    """`train` with the rows at `path` appended (the first `limit`), shuffled with `seed`; both get `COLUMN`."""
    from datasets import concatenate_datasets

    rows = load_rows(path, limit)
    if ("images" in train.column_names) != ("images" in rows.column_names):
        with_images, without = (path, "the training rows") if "images" in rows.column_names else \
            ("the training rows", path)
        raise DataContractError(f"rehearsal_path {path!r}: {with_images} have images and {without} do not; "
                                "rehearse rows of the same modality")
    rows = rows.select_columns([c for c in rows.column_names if c in train.column_names])
    for name in train.column_names:
        if name not in rows.column_names:
            rows = rows.add_column(name, [None] * len(rows))
    try:
        rows = rows.cast(train.features)
    except (TypeError, ValueError) as error:
        raise DataContractError(f"rehearsal_path {path!r}: its rows do not fit the training rows' columns "
                                f"({error})") from None
    mixed = concatenate_datasets([train.add_column(COLUMN, [False] * len(train)),
                                  rows.add_column(COLUMN, [True] * len(rows))])
    logger.info("rehearsal: %d rows of %s mixed into %d training rows", len(rows), path, len(train))
    return mixed.shuffle(seed=seed)
