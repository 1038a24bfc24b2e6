"""Train/test splits by group (same image + same question), so no pair of them sits on both sides."""

from __future__ import annotations

import random


def split_by_group(chains: list[dict], test_fraction: float, seed: int) -> dict[str, list[dict]]:
    """Deterministic group split; chains keep their input order within each side.

    The test side gets round(test_fraction * n_groups) groups (at least one, and never all of them, when
    the fraction is positive and there are two or more groups). The assignment depends only on the set of
    group ids, the fraction and the seed, so every dataset kind built from the same chains with the same
    seed gets the same test groups. (A seeded shuffle of the sorted ids: sklearn's GroupShuffleSplit does
    the same but costs seconds of import time in a command that otherwise runs in about one.)
    """
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    groups = sorted({c["group_id"] for c in chains})
    n_test = min(max(round(test_fraction * len(groups)), 1), len(groups) - 1) if test_fraction > 0 else 0
    random.Random(seed).shuffle(groups)
    test_groups = set(groups[:n_test])
    return {"train": [c for c in chains if c["group_id"] not in test_groups],
            "test": [c for c in chains if c["group_id"] in test_groups]}
