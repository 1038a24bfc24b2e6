"""`train_sampling_strategy: group_by_length` for conversational rows.

Batches are padded to their longest row, and the rows of a critic's datasets differ in length by up to three times:
padded, a randomly drawn batch of the demo's critique rows holds 1.40 times their tokens, of its PRM rows 1.22
times. transformers' `LengthGroupedSampler` draws rows in random groups of up to 50 batches and sorts each group by
length, so that a batch holds rows of about one length, but it needs each row's length: a `length` column, or
`input_ids` to count. A vision critic's rows have neither (TRL tokenises them in the collator, with their images),
so here a row's length is the characters of its text, which orders rows as their token counts do; the sampler gets
those lengths, and the rows stay untouched.
"""

from __future__ import annotations

import functools

from stepcritic.train import common


def text_length(value) -> int:
    """The characters of every string inside a row's value (messages, their content parts, prompt, completion)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(text_length(v) for k, v in value.items() if k != "type")
    if isinstance(value, (list, tuple)):
        return sum(text_length(v) for v in value)
    return 0


def row_lengths(rows) -> list[int]:
    """Each row's text length, images left undecoded."""
    text = rows.select_columns([c for c in rows.column_names if c != "images"])
    return [text_length(row) for row in text]


def install(trainer, train_data) -> bool:
    """Give the trainer's sampler text lengths when the recipe groups by length and the rows have no lengths of their
    own; True when installed."""
    args = trainer.args
    strategy = getattr(args.train_sampling_strategy, "value", args.train_sampling_strategy)
    if strategy != "group_by_length" or train_data is None or not hasattr(train_data, "select_columns"):
        return False
    rows = trainer.train_dataset
    if rows is not None and ({args.length_column_name, "input_ids"} & set(getattr(rows, "column_names", []))):
        return False  # transformers reads those itself
    if rows is not None and len(rows) != len(train_data):  # a trainer that dropped rows: the lengths would not match
        common.logger.warning("group_by_length: the trainer's rows are not the dataset's; batches drawn at random")
        return False
    lengths = row_lengths(train_data)
    trainer._get_train_sampler = functools.partial(_sampler, trainer, lengths)
    return True


def _sampler(trainer, lengths, train_dataset=None):
    from transformers.trainer_pt_utils import LengthGroupedSampler

    args = trainer.args
    return LengthGroupedSampler(args.train_batch_size * args.gradient_accumulation_steps, lengths=lengths)
