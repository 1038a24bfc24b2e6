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

from stepcritic.eval.metrics import weighted_auroc

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

    def positions(self, group_ids) -> np.ndarray:
        """Each item's question as a position in `counts` (`group_ids` names them, or gives positions already)."""
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
        per_group = np.bincount(self.positions(group_ids), weights=np.asarray(values, dtype=float),
                                minlength=len(self.groups))
        return self._times(per_group)

    def auroc(self, group_ids, positive, score, chunk_cells: int = BLOCK_CELLS) -> np.ndarray:
        """`metrics.weighted_auroc` of `score` for finding `positive` items, per resample of these draws."""
        return weighted_auroc(positive, score, self.positions(group_ids), self.counts, chunk_cells)


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
