"""Sums over weighted questions: the building blocks of every metric in `metrics`. Without weights a sum is the
point value; with a `bootstrap.GroupBootstrap` it is one sum per resample, so one metric function gives both."""

from __future__ import annotations

import math


def question_sums(values, groups=None, weights=None):
    """The sum of `values` (one per item), each item counted as often as its question is drawn.

    `weights` is a `bootstrap.GroupBootstrap` and `groups[i]` item i's question (a name, or a position from its
    `codes`): one sum per resample. Without `weights` every question counts once, the point value: the exact sum
    rounded once (`math.fsum`, as `statistics.fmean` adds), an int for flags and counts.
    """
    import numpy as np

    if weights is not None:
        return weights.sums(groups, values)
    values = np.asarray(values)
    if values.dtype.kind in "biu":
        return int(values.sum())
    values = values.astype(float)
    return math.fsum(values[values != 0].tolist())  # zeros leave an exact sum as it is, and are most items


def question_mean(groups, values, weights=None):
    """The mean of one value per question (`groups` names them), each weighted by how often its question is
    drawn; None (NaN in a resample) without a question."""
    return ratio(question_sums(values, groups, weights), question_sums([1] * len(values), groups, weights))


def ratio(num, den, empty=None):
    """num / den of two `question_sums`, and `empty` where den is 0 (None: undefined, NaN in a resample)."""
    import numpy as np

    if np.ndim(den) == 0:
        return num / den if den else empty
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan if empty is None else empty)
