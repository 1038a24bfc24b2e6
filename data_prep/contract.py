"""The data contract between `stepcritic data build` and `stepcritic train`, defined once.

What a built dataset folder is: a `datasets.DatasetDict` saved with `save_to_disk`, holding the splits
`splits.SPLITS`, next to `build_stats.json` that records its kind. What each kind holds (its columns) and
which training methods it feeds. `data build` writes by it, the recipes' defaults and `stepcritic train`
(including `--dry-run`) read by it; data flows data_prep -> train, so train imports this, never the reverse.

Standard library only: the CLIs import it for their `--help` and choices.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from stepcritic.data_prep.splits import HELD_OUT, SPLITS, TRAIN
from stepcritic.errors import UserError

__all__ = ["TRAIN", "HELD_OUT", "SPLITS", "KINDS", "KIND_NAMES", "METHOD_KINDS", "STATS_FILE", "DataContractError",
           "VERIFIER_LAYOUTS", "VERIFIER_CONVERSATION_COLUMNS", "VERIFIER_TURN_COLUMNS",
           "built_kind", "missing_columns", "is_conversation", "build_command"]

STATS_FILE = "build_stats.json"
# `save_to_disk` of a DatasetDict writes this index; a folder without it is not a built dataset.
DATASET_DICT_FILE = "dataset_dict.json"


@dataclass(frozen=True)
class Kind:
    columns: tuple[str, ...]  # what `data build` writes
    required: tuple[str, ...]  # what training reads (ids and provenance columns are optional in users' data)
    methods: tuple[str, ...]  # the `method` values of a recipe that train on this kind
    # other column sets training reads instead of `required`, for a kind written in several layouts: a dataset
    # needs every column of one set (`missing_columns`)
    alternatives: tuple[tuple[str, ...], ...] = ()

    @property
    def column_sets(self) -> tuple[tuple[str, ...], ...]:
        return (self.required, *self.alternatives)


_IDS = ("chain_id", "group_id")
_PAIR = ("prompt", "chosen", "rejected", "images")
# Order matters: for a method fed by several kinds, the first one listed here is its default.
KINDS = {
    "critique-sft": Kind(("messages", "images", *_IDS), ("messages", "images"), ("sft", "grpo")),
    # GRPO's verifier reward compares the sampled reply with `label` for `task`; the conversation layouts (below)
    # hold them as lists, one item per assistant turn
    "verifier-sft": Kind(("messages", "images", "task", "label", "step_index", *_IDS),
                         ("messages", "images", "task", "label"), ("sft", "grpo"),
                         alternatives=(("messages", "images", "tasks", "labels"),)),
    # `step_targets` (P(+) per step, null: no loss) is optional: datasets built before it train on the `+`/`-`
    "prm-sft": Kind(("messages", "images", "step_targets", *_IDS), ("messages", "images"), ("prm",)),
    "critique-pref": Kind((*_PAIR, "corruption", *_IDS), _PAIR, ("dpo",)),
    "outcome-rm": Kind((*_PAIR, "chosen_chain_id", "rejected_chain_id", "group_id"), _PAIR, ("reward",)),
    # a policy, not a critic: question and image -> a clean chain and its answer (`stepcritic generate` samples it)
    # (GRPO of that policy: the prompts, and the gold answer its outcome reward compares with, `train/policy_grpo.py`)
    "policy-sft": Kind(("messages", "images", *_IDS), ("messages", "images"), ("sft", "grpo")),
}
KIND_NAMES = tuple(KINDS)
# verifier-sft's layouts (`data build --verifier-layout`): "rows" has the columns above. "task" (one conversation
# per chain and task) and "chain" (one per chain) store the image once per conversation and have, instead of
# task/label/step_index, the lists `tasks`, `labels`, `step_indices` (one item per assistant turn, in order).
# SFT trains on every assistant turn of a conversation; GRPO asks each turn's question on its own, so it turns a
# conversation back into one prompt per turn with that turn's item of each list (`train/grpo.py`).
VERIFIER_LAYOUTS = ("rows", "task", "chain")
VERIFIER_CONVERSATION_COLUMNS = ("messages", "images", "tasks", "labels", "step_indices", *_IDS)
# a conversation's list column -> the single-turn column its items stand for
VERIFIER_TURN_COLUMNS = {"tasks": "task", "labels": "label", "step_indices": "step_index"}
# method -> the kinds it trains on, default first. GRPO samples its own completions: it takes the critique
# (or verifier) rows for their prompts and the gold labels its reward compares against.
METHOD_KINDS = {method: tuple(kind for kind, spec in KINDS.items() if method in spec.methods)
                for method in ("sft", "prm", "dpo", "reward", "grpo")}


class DataContractError(UserError, ValueError):
    """A dataset that does not match what the recipe trains on; the message is one line naming the path."""


def build_command(kind: str, out: str) -> str:
    return f"stepcritic data build --chains CHAINS --kind {kind} --out {out}"


def built_kind(path: str, expected: str) -> str | None:
    """The kind recorded in a built dataset's build_stats.json (None when the folder has no stats).

    Raises DataContractError when `path` is missing or is not a saved DatasetDict; `expected` is the kind the
    caller wants, named in the message with the command that builds it.
    """
    if not os.path.exists(path):
        raise DataContractError(f"dataset_path {path!r} does not exist (expected a {expected!r} dataset; make one "
                                f"with `{build_command(expected, path)}`)")
    if not os.path.isfile(os.path.join(path, DATASET_DICT_FILE)):
        raise DataContractError(f"dataset_path {path!r} is not a dataset written by `stepcritic data build` (no "
                                f"{DATASET_DICT_FILE}; expected a {expected!r} dataset)")
    stats_path = os.path.join(path, STATS_FILE)
    if not os.path.isfile(stats_path):
        return None
    try:
        with open(stats_path) as f:
            kind = json.load(f).get("kind")
    except (OSError, ValueError, AttributeError) as err:
        raise DataContractError(f"{stats_path}: unreadable ({err})") from err
    if kind not in KINDS:
        raise DataContractError(f"{stats_path}: unknown dataset kind {kind!r} (known: {', '.join(KIND_NAMES)})")
    return kind


def missing_columns(kind: str, columns) -> list[str]:
    """The columns training on `kind` reads that `columns` lacks (extra columns are allowed); [] when `columns`
    holds one of the kind's column sets in full.

    Otherwise what the nearest set lacks. When sets tie (verifier-sft data with neither `task`/`label` nor
    `tasks`/`labels`), the columns they all lack come first, then one entry naming each way to complete them,
    e.g. ['task + label or tasks + labels'], so the message shows every fix rather than just the first layout's.
    """
    present = set(columns)
    lacking = [[column for column in columns_set if column not in present] for columns_set in KINDS[kind].column_sets]
    fewest = min(len(missing) for missing in lacking)
    nearest = [missing for missing in lacking if len(missing) == fewest]
    if fewest == 0 or len(nearest) == 1:
        return [] if fewest == 0 else nearest[0]
    shared = [column for column in nearest[0] if all(column in missing for missing in nearest)]
    either = " or ".join(" + ".join(column for column in missing if column not in shared) for missing in nearest)
    return shared + [either]


def is_conversation(kind: str, columns) -> bool:
    """Whether rows of `kind` with these columns are verifier-sft conversations (the "task" and "chain" layouts:
    several assistant turns, the lists of `VERIFIER_TURN_COLUMNS` instead of task/label/step_index)."""
    return kind == "verifier-sft" and "tasks" in set(columns)
