"""Kendall's tau-b and Spearman's rho with numpy alone, for `metrics.somers_d` and `metrics.spearman` when no p-value
is asked for: the same numbers as `scipy.stats.kendalltau` and `scipy.stats.spearmanr` (the same integer pair counts
and the same float operations on them; a test checks them against scipy), without loading scipy.stats, whose
memory (58 MiB) takes the 100,000-chain evaluation past its 1 GB peak-RSS target (`python -m stepcritic.bench.runner
--large`).
"""

from __future__ import annotations

import numpy as np

# below this many distinct values on one side, discordant pairs are counted value by value (n x values), else by a
# merge sort (n log^2 n)
FEW_VALUES = 64


def dense_ranks(values: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... by value, equal values sharing a rank."""
    return np.unique(values, return_inverse=True)[1].astype(np.int64).ravel()


def _tie_pairs(ranks: np.ndarray) -> int:
    counts = np.bincount(ranks).astype(np.int64)
    return int((counts * (counts - 1) // 2).sum())


def _inversions_few(ranks: np.ndarray, n_values: int) -> int:
    """Pairs i < j with ranks[i] > ranks[j], counted value by value: for each value, how many larger values came
    before each of its occurrences."""
    total = 0
    larger = np.zeros(len(ranks), dtype=np.int64)  # per position: is its value above the current one
    for v in range(n_values - 1, -1, -1):
        at = ranks == v
        before = np.cumsum(larger) - larger
        total += int(before[at].sum())
        larger += at
    return total


def _inversions_merge(ranks: np.ndarray) -> int:
    """Pairs i < j with ranks[i] > ranks[j], by a bottom-up merge sort done a level at a time over all blocks:
    each element of a right half counts the elements of its left half above it."""
    n = len(ranks)
    width = int(ranks.max(initial=0)) + 1
    values = ranks.copy()
    position = np.arange(n, dtype=np.int64)
    total, w = 0, 1
    while w < n:
        block = position // (2 * w)
        right = (position // w) % 2 == 1
        key = block * width + values  # the left halves, sorted within each block, are sorted as a whole
        left_keys = key[~right]
        ends = np.searchsorted(left_keys, (block[right] + 1) * width, side="left")
        total += int((ends - np.searchsorted(left_keys, key[right], side="right")).sum())
        values = values[np.argsort(key, kind="stable")]
        w *= 2
    return total


def discordant_pairs(x: np.ndarray, y: np.ndarray) -> int:
    """Pairs ordered one way by x and the other by y (ties on either side are not discordant)."""
    xr, yr = dense_ranks(x), dense_ranks(y)
    if xr.max(initial=0) > yr.max(initial=0):  # count over the side with fewer distinct values
        xr, yr = yr, xr
    order = np.lexsort((xr, yr))  # by y, then x: pairs tied on y are never inversions of x
    ranks = xr[order]
    n_values = int(ranks.max(initial=0)) + 1
    return _inversions_few(ranks, n_values) if n_values <= FEW_VALUES else _inversions_merge(ranks)


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    """`scipy.stats.kendalltau(x, y).statistic`; NaN when either side is constant."""
    n = len(x)
    xr, yr = dense_ranks(x), dense_ranks(y)
    tot = n * (n - 1) // 2
    xtie, ytie = _tie_pairs(xr), _tie_pairs(yr)
    if xtie == tot or ytie == tot:
        return float("nan")
    ntie = _tie_pairs(dense_ranks(xr * (int(yr.max(initial=0)) + 1) + yr))  # tied on both
    con_minus_dis = tot - xtie - ytie + ntie - 2 * discordant_pairs(x, y)
    tau = con_minus_dis / np.sqrt(tot - xtie) / np.sqrt(tot - ytie)
    return float(np.minimum(1.0, max(-1.0, tau)))


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing the mean of their ranks (`scipy.stats.rankdata`'s "average")."""
    sorted_values, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return (0.5 * (ends + (ends - counts) + 1))[inverse.ravel()]


def spearman_rho(x: np.ndarray, y: np.ndarray) -> float:
    """`scipy.stats.spearmanr(x, y).statistic`: the Pearson correlation of the average ranks."""
    return float(np.corrcoef(np.column_stack((average_ranks(x), average_ranks(y))), rowvar=False)[1, 0])
