"""Bootstrap confidence intervals that resample questions, for the report's headline metrics.

The unit resampled is the question (`group_id`): the chains of one question share its image and its
wording, and a judge that misreads the image misreads it in every chain, so steps and chains are not
independent draws and resampling them would give intervals that are too narrow. Each resample draws as many
questions as there are, with replacement; a pooled metric is then recomputed from per-question sums weighted
by how often each question was drawn, so 1,000 resamples cost a matrix product, not 1,000 metric calls. The
interval is the percentile interval (the 2.5th and 97.5th percentiles for 95%), from a fixed seed: the same
data gives the same interval, and every judge is resampled with the same draws.

Each statistic returns one value per resample, NaN where the metric is undefined for that resample (no
incorrect step drawn, say); `interval` turns them into `[low, high]`.
"""

from __future__ import annotations

import numpy as np

N_RESAMPLES = 1000
LEVEL = 0.95
SEED = 0
# below this share of resamples where the metric is defined, an interval would describe the few draws that
# happen to define it, not the metric: none is given
MIN_DEFINED = 0.5


# resamples drawn (and multiplied out) a block at a time, so no step needs more than a block's worth of floats
BLOCK_CELLS = 1_000_000


class GroupBootstrap:
    """Resampling draws over the questions of one evaluated set, shared by every metric and judge on it."""

    def __init__(self, group_ids, n_resamples: int = N_RESAMPLES, seed: int = SEED):
        self.groups = sorted(set(group_ids))
        self._index = {g: i for i, g in enumerate(self.groups)}
        n = len(self.groups)
        rng = np.random.default_rng(seed)
        # counts[b, g]: how often question g is drawn in resample b. Drawn a block of resamples at a time (the same
        # draws as all at once: each resample takes the generator's next numbers) and kept in the smallest integer
        # type that holds them, a byte per cell in practice: with 35,000 questions a float matrix would be 280 MB.
        blocks = []
        for lo in range(0, n_resamples, self._rows(n)):
            block = rng.multinomial(n, np.full(n, 1.0 / n), size=min(self._rows(n), n_resamples - lo)) if n else (
                np.zeros((min(self._rows(n), n_resamples - lo), 0), dtype=np.int64))
            blocks.append(block.astype(np.min_scalar_type(int(block.max(initial=0)))))
        self.counts = np.concatenate(blocks) if blocks else np.zeros((0, n), dtype=np.uint8)

    @staticmethod
    def _rows(width: int) -> int:
        return max(1, BLOCK_CELLS // max(1, width))

    def codes(self, names) -> np.ndarray:
        """A lookup from codes to positions: entry k is the position of the question `names[k]` (-1: not here), so
        `codes(names)[code_of_each_item]` places items whose questions are given as codes into `names`."""
        return np.fromiter((self._index.get(g, -1) for g in names), dtype=np.int64, count=len(names))

    def _positions(self, group_ids) -> np.ndarray:
        if isinstance(group_ids, np.ndarray) and group_ids.dtype.kind in "iu":
            return group_ids  # positions already (`codes`)
        return np.fromiter((self._index[g] for g in group_ids), dtype=np.int64, count=len(group_ids))

    def _times(self, per_group: np.ndarray) -> np.ndarray:
        """counts @ per_group (per_group: one row per question), a block of resamples at a time."""
        rows = self._rows(self.counts.shape[1])
        return np.concatenate([self.counts[lo:lo + rows].astype(float) @ per_group
                               for lo in range(0, len(self.counts), rows)]) if len(self.counts) else (
            np.zeros((0,) + per_group.shape[1:]))

    def sums(self, group_ids, values) -> np.ndarray:
        """Per resample, the sum of `values` (one per item, item i in question group_ids[i])."""
        per_group = np.bincount(self._positions(group_ids), weights=np.asarray(values, dtype=float),
                                minlength=len(self.groups))
        return self._times(per_group)

    def ratio(self, group_ids, numerator, denominator) -> np.ndarray:
        """sum(numerator) / sum(denominator) per resample: a mean over the items that count."""
        num, den = self.sums(group_ids, numerator), self.sums(group_ids, denominator)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, num / den, np.nan)

    def f1(self, group_ids, gold_flags, pred_flags) -> np.ndarray:
        """Pooled F1 of flagging (True = incorrect) per resample; NaN when nothing incorrect was drawn."""
        gold, pred = np.asarray(gold_flags, dtype=bool), np.asarray(pred_flags, dtype=bool)
        return self.fractional_f1(group_ids, gold & pred, pred, gold)

    def fractional_f1(self, group_ids, tp, flagged, incorrect) -> np.ndarray:
        """F1 from (possibly fractional) true positives: precision tp / flagged (0 when nothing is flagged),
        recall tp / incorrect, as `metrics.explanation_match_f1` (and `step_f1`, with whole hits)."""
        tp, flagged, incorrect = (self.sums(group_ids, x) for x in (tp, flagged, incorrect))
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = np.where(flagged > 0, tp / flagged, 0.0)
            recall = np.where(incorrect > 0, tp / incorrect, np.nan)
            f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
        return np.where(incorrect > 0, f1, np.nan)

    def auroc(self, group_ids, positive, score, chunk_cells: int = BLOCK_CELLS) -> np.ndarray:
        """ROC AUC of `score` for finding `positive` items, each item weighted by its question's draw count.

        Items are grouped into distinct score levels; with P and N the positive and negative weight per level,
        AUC = sum_l P_l (N below l + N_l / 2) / (total P x total N), ties counting a half as in sklearn. The items
        of one question at one level weigh the same in every resample, so they are counted once, as a cell of
        (level, question): a judge with few distinct scores costs resamples x questions, not resamples x items.
        Resamples are processed a chunk at a time so the weight matrix stays within `chunk_cells` numbers.
        """
        positive = np.asarray(positive, dtype=bool)
        levels, level_of = np.unique(np.asarray(score, dtype=float), return_inverse=True)
        n_groups = max(1, len(self.groups))
        cells, cell_of = np.unique(level_of.astype(np.int64) * n_groups + self._positions(group_ids),
                                   return_inverse=True)
        pos = np.bincount(cell_of, weights=positive, minlength=len(cells))
        neg = np.bincount(cell_of, weights=~positive, minlength=len(cells))
        cell_group = cells % n_groups
        starts = np.searchsorted(cells // n_groups, np.arange(len(levels)))  # cells are sorted by level
        out = np.empty(len(self.counts))
        rows = max(1, chunk_cells // max(1, len(cells)))
        for lo in range(0, len(self.counts), rows):
            weights = self.counts[lo:lo + rows][:, cell_group].astype(float)
            p = np.add.reduceat(weights * pos, starts, axis=1)
            n = np.add.reduceat(weights * neg, starts, axis=1)
            below = np.cumsum(n, axis=1) - n
            total = p.sum(axis=1) * n.sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[lo:lo + rows] = np.where(total > 0, (p * (below + n / 2)).sum(axis=1) / total, np.nan)
        return out


def interval(resampled: np.ndarray, level: float = LEVEL) -> list[float] | None:
    """The percentile interval `[low, high]` of the defined resamples, or None when too few define it."""
    defined = resampled[np.isfinite(resampled)]
    if len(resampled) == 0 or len(defined) < MIN_DEFINED * len(resampled):
        return None
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(defined, [tail, 100 - tail])
    return [float(low), float(high)]


def settings() -> dict:
    """What `metrics.json` records about how its intervals were drawn."""
    return {"unit": "question (group_id)", "method": "percentile", "resamples": N_RESAMPLES, "level": LEVEL,
            "seed": SEED}
