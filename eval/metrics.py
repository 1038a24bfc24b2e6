"""Evaluation metrics for step-level critics: plain, documented functions over plain Python data.

Where each metric comes from:
- VISCO (Wu et al., 2024): answer / step / explanation F1 with "incorrect" as the positive class, the
  VISCore geometric mean, correction gain (PCR - NCR) and the error-propagation odds ratio.
- MiCEval (Zhou et al., 2024): verifier accuracy with invalid outputs, Somers' D against human scores,
  geometric-mean chain scores, choice ranking.
- RPTS (Wang & Zhang, 2025): tree-height-weighted step scores.
- CMMU (He et al., 2024): ShiftCheck and BiasRate, in `stepcritic.eval.shiftcheck`.

Label convention everywhere: True = correct, False = incorrect, None = unknown. A gold None removes the
item; a predicted None (unparseable output) is an answer that flagged nothing. Scores are on [0, 1]
(BiasRate on CMMU's 0-100 percentage scale; correction gain on [-1, 1]); a score that is undefined
for the data given (no items, a constant input) is None, never a made-up 0.

Every function takes plain lists (None for unknown) or the arrays `stepcritic.eval.columns` builds (labels as
floats, NaN for None; `as_labels`), and counts with numpy: `stepcritic eval` computes each metric once per breakdown
value over arrays. Which of these it reports, under which key and direction, is registered in
`stepcritic.eval.tasks`. numpy, scipy and scikit-learn are imported inside the functions that use them, so importing
this module (for that registry, say) costs only the standard library.

Each headline metric (the ones with an interval) is written once, over sums of its items: given `weights` (how often
each question is drawn, per bootstrap resample: `bootstrap.GroupBootstrap`) and each item's question in `groups`, the
same function returns one value per resample (NaN where undefined); without, every question counts once and it
returns the point value. `intervals` calls these functions, as lm-evaluation-harness's `bootstrap_stderr` calls the
metric itself on each resample.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from stepcritic.eval.matchers import ExplanationMatcher
from stepcritic.eval.shiftcheck import shiftcheck  # noqa: F401  (CMMU's metrics are read from here with the others)
from stepcritic.eval.sums import question_mean, question_sums, ratio

# RPTS lets the evaluator pick the decay and the focus height; the paper summary gives no default, so
# we halve a step's weight for each level it sits away from the focus (the final step, by default).
DEFAULT_RPTS_LAMBDA = 0.5


# ----------------------------------------------------------------------------- labels as arrays

def as_labels(values):
    """True / False / None (or numbers / None) as a float array of 1.0 / 0.0 / NaN; a float array is taken as is."""
    import numpy as np

    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        return values
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


# ----------------------------------------------------------------------------- sums over weighted questions
# (in eval/sums.py, which the task modules' metrics share without importing this module)


def _defined_where(count, value):
    """`value` where `count` is positive; None (NaN in a resample) where it is 0."""
    import numpy as np

    if np.ndim(count) == 0:
        return value if count else None
    return np.where(count > 0, value, np.nan)


def undefined(weights):
    """An undefined metric: None, or NaN in every resample."""
    import numpy as np

    return None if weights is None else np.full(len(weights.counts), np.nan)


def _f1(tp, n_true, n_pred):
    """F1 of flagging, from (possibly fractional) true positives: 0 when nothing is hit; None (NaN) when nothing is
    true, which VISCO leaves unscored (Sec. 3.1.1)."""
    # Whole counts take scikit-learn's 2 tp / (true + predicted); fractional hits and resamples the harmonic mean of
    # precision and recall. The numbers are equal but round apart in the last bit, and tests/snapshots fix both.
    if isinstance(tp, int):
        return 2 * tp / (n_true + n_pred) if n_true else None
    precision, recall = ratio(tp, n_pred, 0.0), ratio(tp, n_true, 0.0)
    return _defined_where(n_true, ratio(2 * precision * recall, precision + recall, 0.0))


# ----------------------------------------------------------------------------- VISCO: F1 family

def _flag_vectors(gold, pred, groups=None):
    """Per scored item: gold says incorrect, prediction says incorrect (boolean arrays); how many predictions were
    None; and the items' questions (`groups`, kept to the scored items)."""
    import numpy as np

    g, p = as_labels(gold), as_labels(pred)
    if len(g) != len(p):
        raise ValueError(f"gold has {len(g)} labels but pred has {len(p)}")
    scored = ~np.isnan(g)
    return g[scored] == 0, p[scored] == 0, int(np.isnan(p[scored]).sum()), _kept(groups, scored)


def _kept(groups, mask):
    import numpy as np

    return None if groups is None else np.asarray(groups)[mask]


def step_f1(gold: list[bool | None], pred: list[bool | None], groups=None, weights=None) -> dict:
    """VISCO's step-level F1 with "incorrect" (False) as the positive class, pooled over all steps given.

    Flatten the steps of all chains into `gold` and `pred`. Steps with gold None are skipped. A predicted
    None (the critic's output did not give a verdict) counts as "not flagged": it can only lower recall,
    never precision, so an unparseable critic is not rewarded. Returns precision, recall, f1, tp, fp, fn,
    n (scored steps) and n_unparsed. The scores are None when no step is scored; recall and F1 are None
    when no scored step is incorrect (VISCO Sec. 3.1.1 scores how well errors are found: without an
    error there is nothing to find, and 0 would read as a failure). With `groups` and `weights`, per resample
    (see the module docstring).
    """
    y_true, y_pred, n_unparsed, groups = _flag_vectors(gold, pred, groups)
    if not len(y_true):
        none = undefined(weights)
        return {"precision": none, "recall": none, "f1": none, "tp": 0, "fp": 0, "fn": 0, "n": 0, "n_unparsed": 0}
    tp, n_true, n_pred = (question_sums(v, groups, weights) for v in (y_true & y_pred, y_true, y_pred))
    return {"precision": ratio(tp, n_pred, 0.0), "recall": ratio(tp, n_true), "f1": _f1(tp, n_true, n_pred),
            "tp": tp, "fp": n_pred - tp, "fn": n_true - tp, "n": len(y_true), "n_unparsed": n_unparsed}


def step_macro_f1(gold: list[bool | None], pred: list[bool | None], groups=None, weights=None) -> dict:
    """VisualProcessBench's step score: the mean of the F1 of the incorrect class and the F1 of the correct class,
    so a judge that flags everything (or nothing) cannot look good on a benchmark where most steps are right.
    Steps with gold None are skipped; a predicted None counts as "not flagged", as in `step_f1`. Each class's F1
    is None when that class never occurs in gold, and the macro mean is None unless both occur. With `groups` and
    `weights`, per resample."""
    y_true, y_pred, _, groups = _flag_vectors(gold, pred, groups)
    per_class = {name: _f1(*(question_sums(v, groups, weights) for v in (t & p, t, p)))
                 for name, (t, p) in (("f1_incorrect", (y_true, y_pred)), ("f1_correct", (~y_true, ~y_pred)))}
    a, b = per_class.values()
    both = weights is not None or (a is not None and b is not None)
    return {**per_class, "macro_f1": (a + b) / 2 if both else None, "n": len(y_true)}


def step_auroc(gold: list[bool | None], scores: list[float | None], groups=None, weights=None) -> float | None:
    """Area under the ROC curve of finding incorrect steps from a judge's step scores (higher score = more
    likely correct): threshold-free, so score-based judges (PRMs) compare before any threshold is chosen.
    Steps where gold or score is None are skipped; None unless both classes remain. Ties count a half (the
    trapezoid of the ROC curve), as `sklearn.metrics.roc_auc_score`, with `sample_weight` for a resample."""
    import numpy as np

    g, s = as_labels(gold), as_labels(scores)
    if len(g) != len(s):
        raise ValueError("gold and scores must have one entry per step")
    kept = ~np.isnan(g) & ~np.isnan(s)
    positive = g[kept] == 0
    if positive.all() or not positive.any():
        return undefined(weights)
    if weights is not None:
        return weighted_auroc(positive, 1.0 - s[kept], weights.positions(_kept(groups, kept)), weights.counts)
    # every step in one question drawn once: the point value is the all-ones case of the same sums
    one = np.zeros(len(positive), dtype=np.int64)
    return float(weighted_auroc(positive, 1.0 - s[kept], one, np.ones((1, 1), dtype=np.uint8))[0])


# resamples are weighed a chunk at a time, so the weight matrix stays within this many numbers
AUROC_CHUNK_CELLS = 1_000_000


def weighted_auroc(positive, score, positions, counts, chunk_cells: int = AUROC_CHUNK_CELLS):
    """ROC AUC of `score` for finding `positive` items, per row of `counts` (how often each question counts;
    `positions[i]` is item i's question), each item weighted by its question's count; NaN where a class weighs 0.

    Items are grouped into distinct score levels; with P and N the positive and negative weight per level,
    AUC = sum_l P_l (N below l + N_l / 2) / (total P x total N), ties counting a half as in scikit-learn. The items
    of one question at one level weigh the same in every row, so they are counted once, as a cell of
    (level, question): a judge with few distinct scores costs rows x questions, not rows x items.
    """
    import numpy as np

    # roc_auc_score(sample_weight=) is the same number, but 1,000 resamples of 45,000 steps take it 28 s (this: 0.13 s)
    positive = np.asarray(positive, dtype=bool)
    levels, level_of = np.unique(np.asarray(score, dtype=float), return_inverse=True)
    n_groups = max(1, counts.shape[1])
    if n_groups == 1:  # one question (the point value): a cell is a level
        cells, cell_of = np.arange(len(levels), dtype=np.int64), level_of.ravel()
    else:
        cells, cell_of = np.unique(level_of.astype(np.int64) * n_groups + positions, return_inverse=True)
    pos = np.bincount(cell_of, weights=positive, minlength=len(cells))
    neg = np.bincount(cell_of, weights=~positive, minlength=len(cells))
    cell_group = cells % n_groups
    starts = np.searchsorted(cells // n_groups, np.arange(len(levels)))  # cells are sorted by level
    out = np.empty(len(counts))
    rows = max(1, chunk_cells // max(1, len(cells)))
    for lo in range(0, len(counts), rows):
        weights = counts[lo:lo + rows][:, cell_group].astype(float)
        p = np.add.reduceat(weights * pos, starts, axis=1)
        n = np.add.reduceat(weights * neg, starts, axis=1)
        below = np.cumsum(n, axis=1) - n
        total = p.sum(axis=1) * n.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[lo:lo + rows] = np.where(total > 0, (p * (below + n / 2)).sum(axis=1) / total, np.nan)
    return out


def answer_f1(gold: list[bool | None], pred: list[bool | None], groups=None, weights=None) -> dict:
    """VISCO's answer-level F1: one final-answer verdict per chain, same rules as `step_f1`."""
    return step_f1(gold, pred, groups, weights)


def explanation_match_f1(gold: list[bool | None], pred: list[bool | None], match: list[float | None],
                         groups=None, weights=None) -> dict:
    """Explanation-level F1 from per-step match scores (the part of `explanation_f1` after matching).

    `match[i]` in [0, 1] says how well step i's explanation addresses the reference error (only read for
    steps flagged incorrect that are incorrect). A step that is incorrect but has no reference (match
    None) cannot be judged and is left out entirely (`n_unreferenced`). True positives are fractional:
    tp = sum of match over correctly flagged steps; precision = tp / flagged, recall = tp / incorrect.
    VISCO Sec. 3.1.1. All three scores are None when no incorrect step has a reference (data without
    reference critiques, such as MiCEval: F1_e cannot be computed there, which is not a score of 0). With `groups`
    and `weights`, per resample.
    """
    import numpy as np

    g, p, m = as_labels(gold), as_labels(pred), as_labels(match)
    if not len(g) == len(p) == len(m):
        raise ValueError("gold, pred and match must have one entry per step")
    incorrect, flagged = g == 0, p == 0
    unreferenced = incorrect & np.isnan(m)
    counted = ~np.isnan(g) & ~unreferenced
    hits = np.where(incorrect & flagged, m, 0.0)[counted]
    groups = _kept(groups, counted)
    tp = question_sums(hits, groups, weights)
    n_flagged, n_incorrect = (question_sums(v[counted], groups, weights) for v in (flagged, incorrect))
    precision, recall = ratio(tp, n_flagged, 0.0), ratio(tp, n_incorrect, 0.0)
    return {"precision": _defined_where(n_incorrect, precision), "recall": _defined_where(n_incorrect, recall),
            "f1": _f1(tp, n_incorrect, n_flagged), "tp": tp, "fp": n_flagged - tp, "fn": n_incorrect - tp,
            "n": int(counted.sum()), "n_unreferenced": int(unreferenced.sum())}


def explanation_match_scores(items: list[dict], matcher: ExplanationMatcher) -> list[float | None]:
    """The per-step match scores behind `explanation_f1` (its `match` argument to `explanation_match_f1`).

    Only an incorrect step flagged incorrect with an explanation is matched: the mean of `matcher` over its
    reference critiques, or, for a matcher with a `match_items` method (VISCO's LLM judge,
    `eval/judge_matcher.py`), its score of the whole item (the step in its chain, with every reference at
    once), all such items asked in one call. A step without references scores None (read only for incorrect
    steps, which then cannot be judged); any other step 0.
    """
    matched = [i for i, item in enumerate(items) if item.get("references") and item["gold"] is False
               and item["pred"] is False and item.get("explanation")]
    batch = getattr(matcher, "match_items", None)
    if batch is not None:
        found = dict(zip(matched, batch([items[i] for i in matched])))
    else:
        found = {i: statistics.fmean(matcher(items[i]["explanation"], ref) for ref in items[i]["references"])
                 for i in matched}
    return [None if not item.get("references") else found.get(i, 0.0) for i, item in enumerate(items)]


def explanation_f1(items: list[dict], matcher: ExplanationMatcher) -> dict:
    """VISCO's explanation-level F1 (F1_e).

    items: one dict per step, {gold, pred, explanation, references}. A step flagged incorrect that is
    incorrect is a true positive only to the extent its explanation addresses the core error: the mean,
    over the step's reference critiques, of `matcher(explanation, reference)` (VISCO compares against
    each of three annotators and averages). A flagged step without an explanation matches nothing.
    Precision and recall use these fractional true positives (see `explanation_match_f1`). The report
    names the matcher, because F1_e from different matchers is not comparable.
    """
    match = explanation_match_scores(items, matcher)
    return explanation_match_f1([i["gold"] for i in items], [i["pred"] for i in items], match) | {
        "matcher": matcher.name}


def viscore(f1_answer, f1_step, f1_explanation):
    """VISCore = (F1_a * F1_s * F1_e) ** (1/3), VISCO Sec. 3.1.1; scale-agnostic (0-1 in, 0-1 out). Per resample
    when given arrays of the three (NaN where one is undefined)."""
    import numpy as np

    parts = (f1_answer, f1_step, f1_explanation)
    if any(np.ndim(p) for p in parts):
        with np.errstate(invalid="ignore"):
            return np.power(parts[0] * parts[1] * parts[2], 1 / 3)
    if any(p is None for p in parts):
        return None
    if any(p < 0 for p in parts):
        raise ValueError(f"F1 scores cannot be negative: {parts}")
    return math.prod(parts) ** (1 / 3)


def visco_scores(level: list[str], gold: list[bool | None], pred: list[bool | None],
                 match: list[float | None]) -> dict:
    """VISCO's answer, step and explanation F1 and their VISCore from one row per judged unit: `level` "answer" (a
    final-answer verdict) or "step" (a step verdict), its gold and predicted correctness, and for a step row its
    explanation's match score (`explanation_match_f1`). The rows of the `evaluate` module `viscore.py`."""
    unknown = set(level) - {"answer", "step"}
    if unknown:
        raise ValueError(f"level must be 'answer' or 'step', got {sorted(unknown)}")
    answers, steps = ([i for i, lv in enumerate(level) if lv == kind] for kind in ("answer", "step"))
    f1_a = answer_f1([gold[i] for i in answers], [pred[i] for i in answers])["f1"]
    f1_s = step_f1([gold[i] for i in steps], [pred[i] for i in steps])["f1"]
    f1_e = explanation_match_f1([gold[i] for i in steps], [pred[i] for i in steps], [match[i] for i in steps])["f1"]
    return {"answer_f1": f1_a, "step_f1": f1_s, "explanation_f1": f1_e, "viscore": viscore(f1_a, f1_s, f1_e)}


# ----------------------------------------------------------------------------- MiCEval: verifier and evaluator

INVALID = "<invalid>"


def verifier_accuracy(gold: list[str], pred: list[str | None], labels: list[str], groups=None, weights=None) -> dict:
    """MiCEval's verifier scoring: accuracy where an invalid output (None, or not one of `labels`) is wrong.

    Returns accuracy, invalid_rate (share of outputs outside the label set; MiCEval Table 5),
    per_class_f1 {label: f1}, macro_f1 (their mean over all `labels`; a label that never occurs in gold
    or predictions scores 0, sklearn's zero_division=0) and n. Items with gold None are skipped. With `groups` and
    `weights`, the accuracy alone, per resample.
    """
    from sklearn.metrics import f1_score

    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} labels but pred has {len(pred)}")
    kept = [g is not None for g in gold]
    pairs = [(g, p) for g, p, k in zip(gold, pred, kept) if k]
    if not pairs:
        return {"accuracy": undefined(weights), "invalid_rate": None, "per_class_f1": {}, "macro_f1": None, "n": 0}
    unknown = {g for g, _ in pairs} - set(labels)
    if unknown:
        raise ValueError(f"gold labels {sorted(unknown)} are not in labels {labels}")
    y_true = [g for g, _ in pairs]
    y_pred = [p if p in labels else INVALID for _, p in pairs]
    # accuracy_score(sample_weight=) is the same number, but 1,000 resamples of 9 tasks of 30,000 items take it 700 s
    accuracy = question_mean(None if groups is None else [q for q, k in zip(groups, kept) if k],
                             [t == p for t, p in zip(y_true, y_pred)], weights)
    if weights is not None:
        return {"accuracy": accuracy, "n": len(pairs)}
    per_class = f1_score(y_true, y_pred, labels=list(labels), average=None, zero_division=0)
    return {"accuracy": accuracy, "invalid_rate": y_pred.count(INVALID) / len(y_pred),
            "per_class_f1": {label: float(f) for label, f in zip(labels, per_class)},
            "macro_f1": float(per_class.mean()), "n": len(pairs)}


def output_invalid_rate(counts, groups=None, weights=None) -> float | None:
    """MiCEval's invalid rate (Sec. 6.1, Table 5), per output: counts holds (outputs, unreadable outputs) per
    chain, so one unreadable verifier reply of a chain's four is 1 of 4, not a whole invalid chain. None
    when no output was asked for. With `groups` (each chain's question) and `weights`, per resample."""
    import numpy as np

    counts = np.asarray(counts, dtype=np.int64).reshape(-1, 2)
    return ratio(question_sums(counts[:, 1], groups, weights), question_sums(counts[:, 0], groups, weights))


def verifier_average(accuracies: list) -> float | None:
    """MiCEval's "Avg." (Table 2): the unweighted mean of the verifier tasks' accuracies, each task counting once
    however many steps it asks about. None when any task's accuracy is undefined (a judge that cannot answer it,
    data without its labels): a mean over fewer tasks is not the paper's number. Per resample when the accuracies
    are arrays (NaN where a task has nothing drawn)."""
    import numpy as np

    if accuracies and any(np.ndim(a) for a in accuracies):
        return np.mean(accuracies, axis=0)  # rounds apart from fmean in the last bit: tests/snapshots fix each
    if not accuracies or any(a is None for a in accuracies):
        return None
    return statistics.fmean(accuracies)


def calibration(gold_incorrect: list[bool], p_incorrect: list[float], n_bins: int = 10) -> dict:
    """Reliability curve and Brier score of a judge's step probabilities P(incorrect) against the gold
    labels (True = the step is incorrect). Everything is None (empty curves) when there is no probability
    or the steps are all of one class."""
    import numpy as np

    y, p = np.asarray(gold_incorrect, dtype=bool), np.asarray(p_incorrect, dtype=float)
    if y.all() or not y.any():
        return {"mean_predicted": [], "fraction_incorrect": [], "brier": None, "n": len(y)}
    if p.min() < 0 or p.max() > 1:
        raise ValueError("y_prob has values outside [0, 1].")
    # sklearn's calibration_curve and brier_score_loss step by step: importing sklearn costs 100k chains the 1 GB target
    bins = np.searchsorted(np.linspace(0.0, 1.0, n_bins + 1)[1:-1], p)
    total = np.bincount(bins, minlength=n_bins)
    nonzero = total != 0
    frac_incorrect = np.bincount(bins, weights=y, minlength=n_bins)[nonzero] / total[nonzero]
    mean_p = np.bincount(bins, weights=p, minlength=n_bins)[nonzero] / total[nonzero]
    label = y.astype(float)
    brier = np.mean((1 - label - (1 - p)) ** 2 + (label - p) ** 2) * 0.5
    return {"mean_predicted": mean_p.tolist(), "fraction_incorrect": frac_incorrect.tolist(),
            "brier": float(brier), "n": len(y)}


def _paired(a, b):
    import numpy as np

    x, y = as_labels(a), as_labels(b)
    if len(x) != len(y):
        raise ValueError(f"the two score lists differ in length ({len(x)} vs {len(y)})")
    kept = ~np.isnan(x) & ~np.isnan(y)
    return x[kept], y[kept]


def _n_distinct(values) -> int:
    import numpy as np

    return len(np.unique(values))


def _finite_or_none(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def somers_d(human: list[float | None], judge: list[float | None], pvalue: bool = True) -> dict:
    """Somers' D(judge | human), MiCEval's correlation with human scores (Sec. 6.2, App. D.1).

    Asymmetric: human scores are the independent variable, so pairs tied on the human score do not
    count. With binary human labels this equals 2 * AUC - 1 of the judge's scores. Pairs where either
    side is None are skipped. Returns d, pvalue, n: d is None when fewer than two pairs or constant human
    scores; a constant judge (scores, but all equal) has D = 0, no association, which is defined.
    MiCEval computes it per step (split into description and reasoning steps, App. D.3) and per MCoT
    against its human good/bad label. With `pvalue` False (all `stepcritic eval` reports) the dict has no
    pvalue: the statistic is counted with numpy alone (`rank_stats`), the same number, without loading scipy.stats.
    """
    import numpy as np

    x, y = _paired(human, judge)
    if len(x) < 2 or _n_distinct(x) < 2:
        return {"d": None, "pvalue": None, "n": len(x)} if pvalue else {"d": None, "n": len(x)}
    # D(y|x) = (concordant - discordant) / pairs untied on x = tau_b * sqrt(untied_y / untied_x).
    # scipy.stats.somersd builds a contingency table that grows with the square of the number of distinct
    # scores (31 s for 4,000 continuous judge scores); Kendall's tau-b is O(n log n) and gives the same
    # statistic (a test checks it against somersd); its p-value tests the same null of no association.
    n0 = len(x) * (len(x) - 1) / 2
    ties = lambda v: float(sum(c * (c - 1) / 2 for c in np.unique(v, return_counts=True)[1].tolist()))  # noqa: E731
    untied_x, untied_y = n0 - ties(x), n0 - ties(y)
    if untied_y == 0:
        return {"d": 0.0, "pvalue": None, "n": len(x)} if pvalue else {"d": 0.0, "n": len(x)}
    if not pvalue:  # importing scipy.stats (+58 MiB) takes the 100,000-chain eval past its 1 GB peak-RSS target
        from stepcritic.eval.rank_stats import kendall_tau_b

        return {"d": _finite_or_none(kendall_tau_b(x, y) * math.sqrt(untied_y / untied_x)), "n": len(x)}
    from scipy.stats import kendalltau

    result = kendalltau(x, y)
    d = result.statistic * math.sqrt(untied_y / untied_x)
    return {"d": _finite_or_none(d), "pvalue": _finite_or_none(result.pvalue), "n": len(x)}


def spearman(human: list[float | None], judge: list[float | None], pvalue: bool = True) -> dict:
    """Spearman's rank correlation between human and judge scores (None pairs skipped): rho, pvalue, n. With
    `pvalue` False, rho and n alone, counted with numpy (`rank_stats`), as `somers_d`."""
    x, y = _paired(human, judge)
    if len(x) < 2 or _n_distinct(x) < 2 or _n_distinct(y) < 2:
        return {"rho": None, "pvalue": None, "n": len(x)} if pvalue else {"rho": None, "n": len(x)}
    if not pvalue:
        from stepcritic.eval.rank_stats import spearman_rho

        return {"rho": _finite_or_none(spearman_rho(x, y)), "n": len(x)}
    from scipy.stats import spearmanr

    result = spearmanr(x, y)
    return {"rho": _finite_or_none(result.statistic), "pvalue": _finite_or_none(result.pvalue), "n": len(x)}


def _geometric_mean(values: list[float]) -> float:
    # statistics.geometric_mean rejects zeros before Python 3.12; a zero factor makes the mean zero.
    return 0.0 if min(values) == 0 else statistics.geometric_mean(values)


DESCRIPTION_KEYS = ("description_correct", "description_relevant")
REASONING_KEYS = ("logic_correct", "logic_relevant", "informative")


def miceval_chain_score(steps: list[dict], mode: str = "type") -> float | None:
    """MiCEval's MCoT correctness score (Sec. 5.1-5.2): a geometric mean of step scores.

    Each step dict holds the evaluator's probabilities in [0, 1] for `description_correct`,
    `description_relevant`, `logic_correct`, `logic_relevant`, `informative`, and its predicted `type`.

    - description step score  S_d = GM(description correctness, description relevance)       (Sec. 5.1)
    - reasoning step score    S_r = GM(logical correctness, logical relevance, informativeness) (Sec. 5.1)
    - mode "type": a step scores S_d or S_r by its predicted type; a "both" step, or one whose type is
      unknown, scores GM(S_d, S_r), all five aspects (Sec. 5.2, first equation pair)
    - mode "all": every step scores GM(S_d, S_r), MiCEval's type-free variant (Sec. 5.2, second pair)
    - chain score = GM of the step scores (both modes).

    Returns None when a step lacks a score it needs (the chain cannot be scored) or there are no steps.
    """
    if mode not in ("type", "all"):
        raise ValueError(f"mode must be 'type' or 'all', got {mode!r}")
    step_scores = []
    for step in steps:
        kind = step.get("type") if mode == "type" else "both"
        keys = {"description": DESCRIPTION_KEYS, "reasoning": REASONING_KEYS}.get(kind)
        needed = keys or DESCRIPTION_KEYS + REASONING_KEYS
        if any(step.get(k) is None for k in needed):
            return None
        if keys:
            step_scores.append(_geometric_mean([step[k] for k in keys]))
        else:
            step_scores.append(_geometric_mean([_geometric_mean([step[k] for k in DESCRIPTION_KEYS]),
                                                _geometric_mean([step[k] for k in REASONING_KEYS])]))
    return _geometric_mean(step_scores) if step_scores else None


def choice_ranking_hits(records: list[dict]) -> dict[str, dict]:
    """Per counted group of `choice_ranking_accuracy`: {group_id: {"hit", "n_chains", "tie"}}, where `hit` is
    the expected share of fully correct chains among the judge's top-scored ones (see there)."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        if r["chain_correct"] is not None:
            groups[r["group_id"]].append(r)
    hits = {}
    for group_id, chains in groups.items():
        if len({c["chain_correct"] for c in chains}) < 2:
            continue
        scores = [c["score"] for c in chains if c["score"] is not None]
        top = [c for c in chains if c["score"] == max(scores)] if scores else chains
        hits[group_id] = {"hit": sum(bool(c["chain_correct"]) for c in top) / len(top), "n_chains": len(chains),
                          "tie": len(top) > 1}
    return hits


def choice_ranking_accuracy(records: list[dict], weights=None) -> dict:
    """MiCEval's choice ranking (App. D.1): does the judge's top-scored chain come out fully correct?

    records: {group_id, chain_id, chain_correct, score}. Chains with chain_correct None are dropped
    (an unknown chain is neither a right nor a wrong option); a group counts when it still has at least
    one fully correct and one incorrect chain. Ties: when several chains share the top score the judge
    picks one of them at random, so the group scores the expected hit, the share of correct chains among
    the tied ones (a constant judge scores chance, not 0). A None score ranks below every number; a group
    whose chains all lack a score is one big tie. Returns accuracy (None when no group counts or the
    judge scored no chain at all), n_groups, n_chains (in counted groups), n_ties (groups with a tie). With
    `weights`, the accuracy per resample of the groups.
    """
    hits = choice_ranking_hits(records)
    scored = any(r["score"] is not None for r in records)
    accuracy = question_mean(list(hits), [h["hit"] for h in hits.values()], weights)
    return {"accuracy": accuracy if scored else undefined(weights), "n_groups": len(hits),
            "n_chains": sum(h["n_chains"] for h in hits.values()), "n_ties": sum(h["tie"] for h in hits.values())}


# ----------------------------------------------------------------------------- RPTS: tree-weighted scores

def step_heights(premises: list[list[int] | None]) -> list[int] | None:
    """Height of each step in its reasoning tree (RPTS Sec. 3): 1 + the largest height among its premises.

    `premises[i]` lists the (0-based, earlier) steps that step i builds on. An empty list means the step
    rests only on the given clues (the image, height 0), so it has height 1. None means the step's
    premises were not annotated: the tree is unknown and so are the heights (None); no tree is made up.
    """
    if any(parents is None for parents in premises):
        return None
    heights: list[int] = []
    for i, parents in enumerate(premises):
        if any(not 0 <= p < i for p in parents):
            raise ValueError(f"step {i}: premises must be earlier steps, got {parents}")
        heights.append(1 + max((heights[p] for p in parents), default=0))
    return heights


def rpts(heights: list[int], scores: list[float | None], lam: float, h_focus: float) -> float | None:
    """RPTS = sum(w_i * s_i) / sum(w_i) with w_i = lam ** |h_focus - h_i| (RPTS, Sec. 3).

    lam in (0, 1] sets how fast weight decays away from the focus height (1 = plain mean). Steps whose
    score is None are left out; None when no step is scored.
    """
    if not 0 < lam <= 1:
        raise ValueError(f"lam must be in (0, 1], got {lam}")
    if len(heights) != len(scores):
        raise ValueError("heights and scores must have one entry per step")
    weighted = [(lam ** abs(h_focus - h), s) for h, s in zip(heights, scores) if s is not None]
    if not weighted:
        return None
    return sum(w * s for w, s in weighted) / sum(w for w, _ in weighted)


def rpts_chains(heights, scores, chain, h_focus, lam: float, n_chains: int):
    """`rpts` of many chains at once, from flat arrays with one entry per step: its height, its score (NaN for None),
    its chain (0 .. n_chains - 1) and the focus height of its chain. NaN for a chain without a scored step."""
    import numpy as np

    if not 0 < lam <= 1:
        raise ValueError(f"lam must be in (0, 1], got {lam}")
    scored = ~np.isnan(scores)
    weight = np.power(lam, np.abs(np.asarray(h_focus, dtype=float) - heights))[scored]
    # bincount adds each chain's terms in step order, as `rpts` does: the same sums to the last bit
    num = np.bincount(chain[scored], weights=weight * scores[scored], minlength=n_chains)
    den = np.bincount(chain[scored], weights=weight, minlength=n_chains)
    has = np.bincount(chain[scored], minlength=n_chains) > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(has, num / den, np.nan)


def rpts_chain(premises: list[list[int]], scores: list[float | None], lam: float = DEFAULT_RPTS_LAMBDA,
               h_focus: float | None = None) -> float | None:
    """RPTS of one chain from its premise links; the focus defaults to the final (conclusion) step's height.
    None when the premises are not annotated (`step_heights`) or no step is scored."""
    heights = step_heights(premises)
    return rpts(heights, scores, lam, heights[-1] if h_focus is None else h_focus) if heights else None


DEFAULT_RPTS_THRESHOLD = 0.5  # the paper's filter: a chain scoring below it reasoned badly


def rpts_filter(answer_correct: list[bool | None], scores: list[float | None],
                threshold: float = DEFAULT_RPTS_THRESHOLD) -> dict:
    """Answer accuracy before and after RPTS's filter (RPTS, experiments: RPTS < 0.5 marks a right answer reached
    by faulty reasoning, which then no longer counts as right).

    One entry per chain: whether its final answer is right, and its RPTS. Only chains with both count, the same
    chains before and after, so the drop is the filter's alone. `filtered_rate` is the share of right answers the
    filter removes. Everything is None when no chain has both.
    """
    import numpy as np

    a, s = as_labels(answer_correct), as_labels(scores)
    if len(a) != len(s):
        raise ValueError("answer_correct and scores must have one entry per chain")
    pairs = ~np.isnan(a) & ~np.isnan(s)
    n, right = int(pairs.sum()), s[pairs & (a != 0)]
    kept = int((right >= threshold).sum())
    return {"before": len(right) / n if n else None, "after": kept / n if n else None,
            "filtered_rate": (len(right) - kept) / len(right) if len(right) else None, "n": n,
            "n_right": len(right), "n_filtered": len(right) - kept}


# ----------------------------------------------------------------------------- VISCO: correction and failure patterns

def correction_gain(correct_before: list[bool | None], correct_after: list[bool | None], groups=None,
                    weights=None) -> dict:
    """VISCO's correction metrics (Sec. 3.1.2): PCR, NCR and gain = PCR - NCR.

    PCR: share of initially incorrect answers that are correct after correction. NCR: share of initially
    correct answers that became incorrect. An item with before None is skipped; after None (no usable
    corrected answer) counts as incorrect. PCR/NCR are None when their subset is empty, and so is gain. With
    `groups` (each item's question) and `weights`, per resample.
    """
    import numpy as np

    if len(correct_before) != len(correct_after):
        raise ValueError("correct_before and correct_after must have one entry per item")
    kept = [b is not None for b in correct_before]
    was_wrong = np.array([b is False for b, k in zip(correct_before, kept) if k], dtype=bool)
    right_after = np.array([a is True for a, k in zip(correct_after, kept) if k], dtype=bool)
    groups = _kept(groups, np.array(kept, dtype=bool))
    pcr = ratio(question_sums(was_wrong & right_after, groups, weights), question_sums(was_wrong, groups, weights))
    ncr = ratio(question_sums(~was_wrong & ~right_after, groups, weights),
                 question_sums(~was_wrong, groups, weights))
    gain = pcr - ncr if weights is not None or (pcr is not None and ncr is not None) else None
    return {"pcr": pcr, "ncr": ncr, "gain": gain, "n_incorrect_before": int(was_wrong.sum()),
            "n_correct_before": int((~was_wrong).sum())}


def _propagation_table(flags, scored, first) -> list[list[int]]:
    """2x2 counts over non-first steps: rows = an earlier step is flagged / none is; cols = flagged / not. Flat
    boolean arrays, one entry per step; `first` marks the first step of each chain."""
    import numpy as np

    before = np.cumsum(flags) - flags  # flags before each step, over all chains
    earlier = before - before[first][np.cumsum(first) - 1] > 0  # ... within its own chain
    counted = scored & ~first
    return [[int((counted & e & f).sum()) for f in (flags, ~flags)] for e in (earlier, ~earlier)]


def _odds_ratio(table: list[list[float]]) -> float | None:
    (a, b), (c, d) = table
    # An empty row or column (e.g. a judge that never flags) carries no association at all: undefined,
    # not a number the Haldane correction would make up.
    if 0 in (a + b, c + d, a + c, b + d):
        return None
    # Haldane-Anscombe correction: add 0.5 to every cell when one is zero, so the ratio stays finite.
    if 0 in (a, b, c, d):
        a, b, c, d = a + 0.5, b + 0.5, c + 0.5, d + 0.5
    return (a * d) / (b * c)


def error_propagation(gold_chains: list[list[bool | None]], pred_chains: list[list[bool | None]]) -> dict:
    """VISCO's critique failure patterns (Sec. 4.2): reluctance to say "no" and exaggerated propagation.

    - predicted_incorrect_rate vs gold_incorrect_rate: shares of steps (gold known) called incorrect.
    - odds_ratio_pred / odds_ratio_gold: odds that a step is flagged when an earlier step of the same
      chain is flagged, over the odds when none is (first steps excluded; Haldane 0.5 correction when a
      cell is zero; None when a whole row or column is empty). Each uses its own labels for the earlier
      steps; a None counts as not flagged.
    - propagation_bias = odds_ratio_pred / odds_ratio_gold: > 1 means the critic assumes errors
      propagate more than they do (VISCO Fig. 12); 1 is ideal.
    Only steps with a gold label are counted as outcomes, in both tables.
    """
    import numpy as np

    if len(gold_chains) != len(pred_chains) or any(len(g) != len(p) for g, p in zip(gold_chains, pred_chains)):
        raise ValueError("gold_chains and pred_chains must have the same chains with the same step counts")
    first = np.array([i == 0 for chain in gold_chains for i in range(len(chain))], dtype=bool)
    return error_propagation_steps(as_labels([g for chain in gold_chains for g in chain]),
                                   as_labels([p for chain in pred_chains for p in chain]), first, len(gold_chains))


def error_propagation_steps(gold, pred, first, n_chains: int) -> dict:
    """`error_propagation` from flat arrays: gold and predicted labels (NaN for None) of every step, chain after
    chain, `first` marking each chain's first step."""
    import numpy as np

    scored = ~np.isnan(gold)
    gold_flags, pred_flags = gold == 0, pred == 0
    gold_table = _propagation_table(gold_flags, scored, first)
    pred_table = _propagation_table(pred_flags, scored, first)
    odds_gold, odds_pred = _odds_ratio(gold_table), _odds_ratio(pred_table)
    n = int(scored.sum())
    return {"gold_incorrect_rate": int(gold_flags[scored].sum()) / n if n else None,
            "predicted_incorrect_rate": int(pred_flags[scored].sum()) / n if n else None,
            "odds_ratio_gold": odds_gold, "odds_ratio_pred": odds_pred,
            "propagation_bias": None if odds_pred is None or odds_gold is None else odds_pred / odds_gold,
            "table_gold": gold_table, "table_pred": pred_table, "n_steps": n, "n_chains": n_chains}
