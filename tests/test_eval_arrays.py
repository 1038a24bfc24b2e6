"""The metrics computed over arrays (`eval/columns.py`, numpy in `eval/metrics.py`, `bootstrap`, `best_of_n`, `rpts`,
`rank_stats`) against straightforward implementations, on random data with unknown labels, missing scores and
breakdowns: every number the same to 1e-9."""

import math
import random

import numpy as np
import pytest
from helpers import critique_section

from stepcritic.eval import best_of_n as bon
from stepcritic.eval import metrics as M
from stepcritic.eval import results, sweep
from stepcritic.eval.bootstrap import GroupBootstrap
from stepcritic.eval.matchers import LexicalMatcher

SEEDS = range(8)


def close(a, b, path="") -> None:
    """Equal structure, floats within 1e-9, None where the other is None."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), path
        for k in a:
            close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and b is not None:
        assert b == pytest.approx(a, abs=1e-9, nan_ok=True), path
    else:
        assert a == b, path


def labels(rng, n, p_none=0.15, p_false=0.35):
    return [None if rng.random() < p_none else rng.random() >= p_false for _ in range(n)]


# ----------------------------------------------------------------------------- the reference implementations

def ref_step_f1(gold, pred):
    from sklearn.metrics import f1_score, precision_score, recall_score

    pairs = [(g is False, p is False) for g, p in zip(gold, pred) if g is not None]
    if not pairs:
        return None
    t, p = [a for a, _ in pairs], [b for _, b in pairs]
    return {"precision": precision_score(t, p, zero_division=0),
            "recall": recall_score(t, p, zero_division=0) if any(t) else None,
            "f1": f1_score(t, p, zero_division=0) if any(t) else None,
            "tp": sum(a and b for a, b in pairs), "fp": sum(b and not a for a, b in pairs),
            "fn": sum(a and not b for a, b in pairs)}


def ref_explanation(gold, pred, match):
    hits, n, flagged, incorrect = [], 0, 0, 0
    for g, p, m in zip(gold, pred, match):
        if g is None or (g is False and m is None):
            continue
        n, flagged, incorrect = n + 1, flagged + (p is False), incorrect + (g is False)
        hits.append(m if g is False and p is False else 0.0)
    return math.fsum(hits), n, flagged, incorrect


def ref_propagation_table(gold_chains, pred_chains, use_pred):
    table = [[0, 0], [0, 0]]
    for gs, ps in zip(gold_chains, pred_chains):
        earlier = False
        for i, (g, p) in enumerate(zip(gs, ps)):
            flagged = (p if use_pred else g) is False
            if i > 0 and g is not None:
                table[0 if earlier else 1][0 if flagged else 1] += 1
            earlier |= flagged
    return table


# ----------------------------------------------------------------------------- metric functions

@pytest.mark.parametrize("seed", SEEDS)
def test_flag_metrics_match_the_reference(seed):
    from sklearn.calibration import calibration_curve
    from sklearn.metrics import brier_score_loss, roc_auc_score

    rng = random.Random(seed)
    n = rng.choice([0, 1, 5, 60, 400])
    gold, pred = labels(rng, n), labels(rng, n, p_none=0.1)
    scores = [None if rng.random() < 0.1 else round(rng.random(), rng.choice([1, 3])) for _ in range(n)]
    got, ref = M.step_f1(gold, pred), ref_step_f1(gold, pred)
    assert got["n"] == sum(g is not None for g in gold)
    if ref is None:
        assert got["f1"] is None and got["precision"] is None
    else:
        close({k: got[k] for k in ref}, ref)
    assert M.step_f1(M.as_labels(gold), M.as_labels(pred)) == got  # arrays or lists: the same
    kept = [(g is False, 1 - s) for g, s in zip(gold, scores) if g is not None and s is not None]
    auroc = M.step_auroc(gold, scores)
    if len({k for k, _ in kept}) < 2:
        assert auroc is None
    else:
        assert auroc == pytest.approx(roc_auc_score(*zip(*kept)), abs=1e-12)
        y, p = [k for k, _ in kept], [min(1.0, max(0.0, 1 - s)) for _, s in kept]
        frac, mean_p = calibration_curve(y, p, n_bins=10)
        cal = M.calibration(y, p)
        close(cal, {"mean_predicted": mean_p.tolist(), "fraction_incorrect": frac.tolist(),
                    "brier": brier_score_loss(y, p), "n": len(y)})
    match = [None if rng.random() < 0.3 else rng.choice([0.0, 0.5, 1.0, 1 / 3]) for _ in range(n)]
    tp, n_counted, flagged, incorrect = ref_explanation(gold, pred, match)
    got = M.explanation_match_f1(gold, pred, match)
    assert (got["n"], got["fp"] + got["tp"], got["fn"] + got["tp"]) == pytest.approx((n_counted, flagged, incorrect))
    assert got["tp"] == tp  # the exact sum, rounded once


@pytest.mark.parametrize("seed", SEEDS)
def test_correlations_without_scipy_equal_scipys(seed):
    rng = random.Random(seed)
    n = rng.choice([2, 3, 40, 500])
    human = [None if rng.random() < 0.1 else rng.choice([0.0, 0.5, 1.0]) for _ in range(n)]
    judge = [None if rng.random() < 0.1 else round(rng.random(), rng.choice([0, 1, 2, 6])) for _ in range(n)]
    for x, y in ((human, judge), (judge, human), (judge, judge[::-1])):
        with_p, without = M.somers_d(x, y), M.somers_d(x, y, pvalue=False)
        assert without == {"d": with_p["d"], "n": with_p["n"]}
        with_p, without = M.spearman(x, y), M.spearman(x, y, pvalue=False)
        assert without == {"rho": with_p["rho"], "n": with_p["n"]}


@pytest.mark.parametrize("seed", SEEDS)
def test_error_propagation_and_rpts_match_the_reference(seed):
    rng = random.Random(seed)
    gold_chains = [labels(rng, rng.randint(1, 6)) for _ in range(rng.choice([1, 3, 30]))]
    pred_chains = [labels(rng, len(c), p_none=0.1) for c in gold_chains]
    got = M.error_propagation(gold_chains, pred_chains)
    assert got["table_gold"] == ref_propagation_table(gold_chains, pred_chains, False)
    assert got["table_pred"] == ref_propagation_table(gold_chains, pred_chains, True)

    lam = rng.choice([0.25, 0.5, 1.0])
    heights, scores, chain, focus = [], [], [], []
    expected = []
    for k in range(20):
        premises = [sorted(rng.sample(range(i), rng.randint(0, i))) for i in range(rng.randint(1, 6))]
        h = M.step_heights(premises)
        s = [None if rng.random() < 0.3 else rng.random() for _ in h]
        f = rng.choice([h[-1], 1, 3])
        expected.append(M.rpts(h, s, lam, f))
        heights += h
        scores += s
        chain += [k] * len(h)
        focus += [f] * len(h)
    got = M.rpts_chains(np.array(heights, float), M.as_labels(scores), np.array(chain), np.array(focus), lam, 20)
    assert [None if math.isnan(x) else x for x in got.tolist()] == expected  # the same sums: the same floats
    answers = [rng.choice([True, False, None]) for _ in expected]
    by_hand = [(a, s) for a, s in zip(answers, expected) if a is not None and s is not None]
    right = [s for a, s in by_hand if a]
    got = M.rpts_filter(answers, expected)
    assert (got["n"], got["n_right"], got["n_filtered"]) == (len(by_hand), len(right), sum(s < 0.5 for s in right))


@pytest.mark.parametrize("seed", SEEDS)
def test_threshold_sweep_chooses_sklearns_best_threshold(seed):
    from sklearn.metrics import precision_recall_curve

    rng = random.Random(seed)
    n = 300
    gold, verdicts = labels(rng, n), labels(rng, n)
    scores = [None if rng.random() < 0.1 else round(rng.random(), 2) for _ in range(n)]
    in_dev = [rng.random() < 0.3 for _ in range(n)]
    got = sweep.threshold_sweep(gold, scores, verdicts, in_dev)
    dev = [(g is False, 1 - s) for g, s, d in zip(gold, scores, in_dev) if g is not None and s is not None and d]
    precision, recall, thresholds = precision_recall_curve(*map(list, zip(*dev)))
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)[:len(thresholds)]
    assert got["threshold"] == thresholds[int(np.argmax(f1))] and got["dev_f1"] == f1.max()


# ----------------------------------------------------------------------------- bootstrap and best-of-n

def test_bootstrap_draws_and_statistics_match_expanded_data():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(5)
    groups = [f"q{i}" for i in range(40)]
    boot = GroupBootstrap(groups, n_resamples=50, seed=3)
    ref = np.random.default_rng(3).multinomial(40, np.full(40, 1 / 40), size=50)
    assert (boot.counts == ref).all()  # the draws of one multinomial call, kept small
    items = rng.integers(0, 40, 300)
    positive, score = rng.random(300) < 0.4, np.round(rng.random(300), 1)
    got = boot.auroc([groups[i] for i in items], positive, score, chunk_cells=500)
    f1 = M.step_f1(np.where(positive, 0.0, 1.0), np.where(score < 0.5, 0.0, 1.0), [groups[i] for i in items],
                   boot)["f1"]
    for b in range(50):
        weight = ref[b][boot.codes(groups)[items]]  # boot's questions are in sorted order
        if len(set(positive[weight > 0])) == 2:
            assert got[b] == pytest.approx(roc_auc_score(positive, score, sample_weight=weight), abs=1e-12)
        tp = (weight * (positive & (score < 0.5))).sum()
        assert f1[b] == pytest.approx(2 * tp / ((weight * positive).sum() + (weight * (score < 0.5)).sum()),
                                      nan_ok=True)


def subset_values(candidates: list[dict], selectors=bon.SELECTORS) -> dict:
    """Every method's accuracy on one set of candidates, by the functions on lists; None for a selector not given."""
    correct = [c["correct"] for c in candidates]
    out = {s: bon.pick_accuracy([c["scores"].get(s) for c in candidates], correct) if s in selectors else None
           for s in bon.SELECTORS}
    out.update(random=bon.random_accuracy(correct), oracle=bon.oracle_accuracy(correct),
               majority=bon.majority_accuracy([c["answer"] for c in candidates], correct))
    return out


def question_values(group_id: str, candidates: list[dict], n: int, max_subsets: int, seed: int, selectors) -> dict:
    """Each method's accuracy at N for one question, averaged over its N-subsets, one subset at a time."""
    per_subset = [subset_values([candidates[i] for i in idx], selectors)
                  for idx in bon.subsets(len(candidates), n, group_id, max_subsets, seed)]
    return {m: bon._mean([v[m] for v in per_subset]) for m in bon.METHODS}


@pytest.mark.parametrize("seed", SEEDS)
def test_best_of_n_equals_scoring_every_subset_one_by_one(seed):
    rng = random.Random(seed)
    questions = {}
    for g in range(rng.choice([1, 5, 12])):
        size = rng.choice([2, 3, 4, 9])  # 9: more subsets than max_subsets, drawn
        questions[f"q{g}"] = [{"correct": rng.random() < 0.4,
                               "answer": rng.choice([None, "a", "b", "c", "d"]),
                               "scores": {"chain": rng.choice([None, 0.5, round(rng.random(), 1)]),
                                          "min": rng.choice([None, rng.random()]), "mean": None,
                                          "last": sum([0.1] * rng.randint(1, 4)) / 3}} for _ in range(size)]
    got = bon.best_of_n(questions, max_subsets=8, seed=seed)
    selectors = bon.given_selectors(questions)
    sizes = {g: len(c) for g, c in questions.items()}
    for n in got["ns"]:
        values = [question_values(g, questions[g], n, 8, seed, selectors)
                  for g in sorted(questions) if sizes[g] >= n]
        for m in bon.METHODS:
            expected = bon._mean([v[m] for v in values])
            assert got["curve"][m][str(n)] == expected, (n, m)  # the same operations: the same floats
    full = {g: subset_values(questions[g], selectors) for g in sorted(questions)}
    assert got["full"] == {m: bon._mean([v[m] for v in full.values()]) for m in bon.METHODS}
    memo = {}
    keyed = {g: tuple(range(len(c))) for g, c in questions.items()}
    assert bon.best_of_n(questions, 8, seed, memo, keyed) == got == bon.best_of_n(questions, 8, seed, memo, keyed)
    # a question whose candidates change is computed again, not read from what was kept
    changed = dict(questions, q0=[dict(c, correct=not c["correct"]) for c in questions["q0"]])
    assert bon.best_of_n(changed, 8, seed, memo, dict(keyed, q0=("other",))) == bon.best_of_n(changed, 8, seed)


# ----------------------------------------------------------------------------- sections and breakdowns

def random_gold_and_preds(rng):
    gold, preds = [], []
    for k in range(rng.choice([3, 25, 80])):
        n = rng.randint(1, 6)
        steps = [{"type": rng.choice(["description", "reasoning", "both", None]), "kind": rng.choice(["a", "b", None]),
                  "correct": c, "human_score": rng.choice([None, 0.0, 0.5, 1.0]),
                  "explanations": rng.choice([[], ["the colour is wrong"]]), "text": f"step {i}",
                  "premises": None if rng.random() < 0.2 else sorted(rng.sample(range(i), rng.randint(0, i)))}
                 for i, c in enumerate(labels(rng, n))]
        gold.append({"chain_id": f"c{k}", "group_id": f"q{k // 3}", "source": rng.choice(["s1", "s2"]),
                     "generator": rng.choice(["g1", "g2"]), "category": None, "question": "q?",
                     "final_answer": rng.choice(["a", "b", None]), "answer_correct": rng.choice([True, False, None]),
                     "chain_correct": rng.choice([True, False, None]), "steps": steps})
        verdicts = labels(rng, n, p_none=0.1)
        probabilities = [None if rng.random() < 0.2 else rng.random() for _ in range(n)]
        preds.append({"chain_id": f"c{k}", "verdicts": verdicts, "p_incorrect": rng.choice([None, probabilities]),
                      "explanations": rng.choice([None, ["the colour is wrong" if v is False else None
                                                         for v in verdicts]]),
                      "answer_correct": rng.choice([True, False, None]),
                      "chain_score": rng.choice([None, rng.random()]), "valid": rng.random() > 0.1, "extra": {}})
    return gold, preds


@pytest.mark.parametrize("seed", SEEDS)
def test_breakdown_views_equal_sections_of_the_sliced_chains(seed):
    rng = random.Random(seed)
    gold, preds = random_gold_and_preds(rng)
    matcher = LexicalMatcher(0.5)
    matches = results.explanation_matches(gold, preds, matcher)
    # the matches from every step's item, as the matcher scores them one by one
    items = [results._explanation_item(c, p, i) for c, p in zip(gold, preds) for i in range(len(p["verdicts"]))]
    flat = M.explanation_match_scores(items, matcher)
    assert [m for chain in matches for m in chain] == flat
    tasks = ("critique", "choice", "rpts", "best-of-n")
    data = results.JudgeData(gold, preds, [], matcher, matches, settings={"dev": frozenset({"q0", "q2"})})
    for source in ("s1", "s2"):
        keep = [i for i, c in enumerate(gold) if c["source"] == source]
        view = results.section(data.chains(keep), tasks)
        alone = results.JudgeData([gold[i] for i in keep], [preds[i] for i in keep], [], matcher,
                                  [matches[i] for i in keep], settings=data.settings)
        close(results.section(alone, tasks), view)
    for field in ("step_type", "step_kind"):
        values = {v for c in gold for v in results.step_values(c, field)} - {None}
        for value in values:
            part = data.steps(field, value)
            sliced_gold, sliced_preds, sliced_matches, _ = data._step_dicts(field, value)
            alone = results.JudgeData(sliced_gold, sliced_preds, [], matcher, sliced_matches, settings=data.settings)
            close(results.section(alone, ["critique"], levels=["step"]),
                  results.section(part, ["critique"], levels=["step"]))
            # the step slice against the metric functions on lists, the way they were first computed
            gold_steps = [s["correct"] for c in sliced_gold for s in c["steps"]]
            pred_steps = [v for p in sliced_preds for v in p["verdicts"]]
            got = results.section(part, ["critique"], levels=["step"])["critique"]["step"]
            assert got["f1"] == M.step_f1(gold_steps, pred_steps)["f1"] or not any(
                v is not None for v in pred_steps)
    whole = critique_section(gold, preds, matcher, matches, data.settings["dev"])
    assert whole["n_chains"] == len(gold)
    assert whole["explanation"]["tp"] == M.explanation_match_f1(
        [s["correct"] for c in gold for s in c["steps"]], [v for p in preds for v in p["verdicts"]],
        [m for chain in matches for m in chain])["tp"]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_headline_metric_with_every_question_drawn_once_is_its_point_value(seed):
    # the intervals call the metric functions themselves: with weights of one they must give the section's number
    from stepcritic.eval import intervals
    from stepcritic.eval import tasks as T

    rng = random.Random(seed)
    gold, preds = random_gold_and_preds(rng)
    matcher = LexicalMatcher(0.5)
    data = results.JudgeData(gold, preds, [], matcher, results.explanation_matches(gold, preds, matcher))
    tasks = ("critique", "choice", "prmscore", "first-error", "best-of-n")
    sec = results.section(data, tasks)
    once = GroupBootstrap(data.view.group_ids(), n_resamples=1)
    once.counts = np.ones_like(once.counts)
    checked = 0
    for metric in (m for m in T.metrics_for(tasks) if m.headline):
        point = T.lookup(sec, metric)
        if point is not None:
            assert intervals.STATISTICS[metric.name](data, once)[0] == pytest.approx(point, abs=1e-12), metric.name
            checked += 1
    assert checked >= 4
