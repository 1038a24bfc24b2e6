"""The threshold sweep of a judge's step scores: which threshold makes its flags best, chosen where it is not scored.

A judge with step scores (a PRM's P(correct), a generative judge's 0-10 step ratings, anything with `p_incorrect`)
flags a step at a threshold of its own choosing (`prm:...,threshold=0.5`); step F1 depends on that choice, and the
README of a PRM usually quotes the best F1 over thresholds, which is chosen on the very steps it is reported on.
Here the questions are split once, by `group_id` and a seeded draw, into a dev part (`--sweep-dev`, 30% of the
questions by default) and the rest: the threshold with the best step F1 on the dev chains is applied to the other
chains, and that F1 is reported beside the F1 of the judge's own verdicts on the same chains. Splitting by question
keeps a question's chains (one image, one wording) on one side. VisualProcessBench and VISCO report F1 at a fixed
rule; this sweep is our addition, for score-based judges only (AUROC is its threshold-free companion).

A step is flagged incorrect when 1 - its step score (`scores.step_scores`: 1 - P(incorrect), else the verdict as
1 / 0) reaches the threshold t, so t is on the P(incorrect) scale (0.5 flags a step a PRM finds more likely wrong
than right). The candidate thresholds are the dev scores themselves (as `sklearn.metrics.precision_recall_curve` gives
them, counted here with numpy); on a tie in F1 the lowest wins. The curve, F1 against t on a grid of 101 thresholds
for the dev and the test chains, is saved for the plot.
"""

from __future__ import annotations

import hashlib

from stepcritic.eval.metrics import as_labels, step_f1

DEFAULT_DEV_FRACTION = 0.3
DEFAULT_SEED = 0
GRID_POINTS = 101


def dev_groups(group_ids, fraction: float = DEFAULT_DEV_FRACTION, seed: int = DEFAULT_SEED) -> frozenset:
    """The questions whose chains choose the threshold: round(fraction x questions), at least one and at least one
    left for testing, drawn by a seeded shuffle of the sorted question ids. Empty below two questions."""
    import numpy as np  # only where a number is computed: `tasks` imports this module for `--help`

    groups = sorted(set(group_ids))
    if len(groups) < 2:
        return frozenset()
    n_dev = min(max(1, round(fraction * len(groups))), len(groups) - 1)
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(f"sweep\x00{seed}".encode()).digest()[:8], "big"))
    return frozenset(groups[i] for i in rng.permutation(len(groups))[:n_dev])


def _flagged_at(p, thresholds):
    """How many of the scores `p` reach each threshold."""
    import numpy as np  # only where a number is computed: `tasks` imports this module for `--help`

    return len(p) - np.searchsorted(np.sort(p), thresholds, side="left")


def _f1_curve(incorrect, p, thresholds):
    import numpy as np  # only where a number is computed: `tasks` imports this module for `--help`

    if not incorrect.any():
        return [None] * len(thresholds)
    flagged = _flagged_at(p, thresholds)
    tp = _flagged_at(p[incorrect], thresholds)
    fp, fn = flagged - tp, incorrect.sum() - tp
    return [round(float(x), 4) for x in 2 * tp / np.maximum(2 * tp + fp + fn, 1)]


def _best_threshold(incorrect, p) -> tuple[float, float]:
    """The threshold with the best F1 on these steps and that F1, the candidates being the scores themselves (as
    `sklearn.metrics.precision_recall_curve` gives them, ascending: a tie goes to the lowest)."""
    import numpy as np  # only where a number is computed: `tasks` imports this module for `--help`

    thresholds = np.unique(p)
    tps = _flagged_at(p[incorrect], thresholds).astype(float)
    precision = tps / _flagged_at(p, thresholds)
    recall = tps / incorrect.sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    best = int(np.argmax(f1))
    return float(thresholds[best]), float(f1[best])


def undefined(n_dev: int = 0, n_test: int = 0) -> dict:
    return {"threshold": None, "dev_f1": None, "f1": None, "precision": None, "recall": None, "f1_default": None,
            "n_dev": n_dev, "n_test": n_test, "curve": None}


def threshold_sweep(gold: list[bool | None], scores: list[float | None], verdicts: list[bool | None],
                    in_dev: list[bool]) -> dict:
    """Step F1 on the test steps at the best-F1 threshold of the dev steps (see the module's notes).

    One entry per step: gold label (True correct), the judge's step score (higher = more likely correct), its
    verdict, whether the step's question is in the dev split. Steps without a gold label or a score are left out.
    `f1_default` is the F1 of the judge's own verdicts on the same test steps. Everything is None when the dev steps
    have no incorrect step (no threshold is better than another) or no step is left for testing; `f1` is None when
    the test steps have no incorrect step.
    """
    import numpy as np  # only where a number is computed: `tasks` imports this module for `--help`

    g, s, v, d = as_labels(gold), as_labels(scores), as_labels(verdicts), np.asarray(in_dev, dtype=bool)
    if not len(g) == len(s) == len(v) == len(d):
        raise ValueError("gold, scores, verdicts and in_dev must have one entry per step")
    kept = ~np.isnan(g) & ~np.isnan(s)
    on_dev, on_test = kept & d, kept & ~d
    y_dev, p_dev = g[on_dev] == 0, 1.0 - s[on_dev]
    y_test, p_test = g[on_test] == 0, 1.0 - s[on_test]
    if not y_dev.any() or not len(y_test):
        return undefined(len(y_dev), len(y_test))
    threshold, dev_f1 = _best_threshold(y_dev, p_dev)
    at = step_f1((~y_test).astype(float), (p_test < threshold).astype(float))
    own = step_f1((~y_test).astype(float), v[on_test])
    grid = np.linspace(min(0.0, p_dev.min(), p_test.min()), max(1.0, p_dev.max(), p_test.max()), GRID_POINTS)
    return {"threshold": threshold, "dev_f1": dev_f1, "f1": at["f1"], "precision": at["precision"],
            "recall": at["recall"], "f1_default": own["f1"], "n_dev": len(y_dev), "n_test": len(y_test),
            "curve": {"thresholds": [round(float(t), 4) for t in grid], "dev": _f1_curve(y_dev, p_dev, grid),
                      "test": _f1_curve(y_test, p_test, grid)}}
