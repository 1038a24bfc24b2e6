"""Split names of every built dataset, and the train/held-out split by group (same image + same question).

`TRAIN` and `HELD_OUT` are the only split names `stepcritic data build` writes, and the ones training reads:
recipes evaluate on `HELD_OUT` (`eval_split`, default in `stepcritic.train.config`). The held-out split is
named "test" as in TRL's scripts (`dataset_test_split`); it holds whole groups the training split never sees.
Final benchmark numbers come from `stepcritic eval` on separate chains, not from this split.
"""

from __future__ import annotations

import random

TRAIN = "train"
HELD_OUT = "test"
SPLITS = (TRAIN, HELD_OUT)


def split_by_group(chains: list[dict], test_fraction: float, seed: int) -> dict[str, list[dict]]:
    """Deterministic group split into {TRAIN: [...], HELD_OUT: [...]}; chains keep their input order.

    The held-out side gets round(test_fraction * n_groups) groups (at least one, and never all of them, when
    the fraction is positive and there are two or more groups). The assignment depends only on the set of
    group ids, the fraction and the seed, so every dataset kind built from the same chains with the same
    seed gets the same held-out groups. (A seeded shuffle of the sorted ids: sklearn's GroupShuffleSplit does
    the same but costs seconds of import time in a command that otherwise runs in about one.)
    """
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    groups = sorted({c["group_id"] for c in chains})
    n_test = min(max(round(test_fraction * len(groups)), 1), len(groups) - 1) if test_fraction > 0 else 0
    random.Random(seed).shuffle(groups)
    test_groups = set(groups[:n_test])
    return {TRAIN: [c for c in chains if c["group_id"] not in test_groups],
            HELD_OUT: [c for c in chains if c["group_id"] in test_groups]}
