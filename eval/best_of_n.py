"""`--tasks best-of-n`: a judge picks one of N candidate chains of a question; is the picked answer right?

Best-of-N selection is what most process reward models are trained for (Lightman et al., 2023, "Let's Verify Step by
Step", Sec. 2.6 and 3: a solution's score is the minimum of its step scores; VisualPRM, Wang et al., 2025, reports
it on multimodal chains). The candidates of a question are the chains sharing its `group_id` whose answer label is
known; a question counts when it has two or more. Every judge that scores chains picks with each of its selectors:
- `chain`: its chain score (`scores.chain_score`: a reward model's score, a generative judge's rating or, for a
  critique, the share of steps judged correct);
- `min`, `mean`, `last`: its step scores (`scores.step_scores`: 1 - P(incorrect), else the verdict as 1/0)
  aggregated PRM-style over the steps it scored (`last`: the final step's score, None when that step has none).
A selector the judge gives no score for is None throughout, never a random pick. The pick is the top-scored
candidate; a tie for the top scores its expected accuracy, the share of right answers among the tied (a constant
judge is exactly random pick), and a candidate without a score ranks below any score.

Against three references, the same for every judge:
- random pick: the expected accuracy of a uniform pick, the share of right answers (its expectation, not a draw);
- majority vote: the most frequent final answer (answers compared by `data_prep.answers.normalize_answer`; chains
  without one abstain, ties shared as above; None where no chain of a question has a final answer);
- oracle: right when any candidate is right.

As a function of N (1, 2, 4, ... and the largest group size): for each question with at least N candidates, every
N-subset when there are at most `max_subsets` of them, else `max_subsets` subsets drawn without replacement from a
generator seeded by `seed` and the question's id (so a question gets the same subsets in every breakdown), each
method averaged over the subsets, then over the questions. `full` is each question with all its candidates.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections import defaultdict
from itertools import combinations

from stepcritic.data_prep.answers import normalize_answer
from stepcritic.eval.scores import chain_score, step_scores

DEFAULT_MAX_SUBSETS = 32
DEFAULT_SEED = 0
SELECTORS = ("chain", "min", "mean", "last")
REFERENCES = ("random", "majority", "oracle")
METHODS = SELECTORS + REFERENCES


# ----------------------------------------------------------------------------- one subset

def pick_accuracy(scores: list[float | None], correct: list[bool]) -> float:
    """Expected correctness of the top-scored candidate, ties shared; a candidate without a score ranks below every
    score, and when none has one all tie (a random pick, as choice ranking treats such a group)."""
    # rounded: a mean of equal step scores differs in its last bits with the number of steps, which is no preference
    scores = [None if s is None else round(s, 9) for s in scores]
    known = [s for s in scores if s is not None]
    if not known:
        return random_accuracy(correct)
    top = [c for s, c in zip(scores, correct) if s == max(known)]
    return sum(top) / len(top)


def random_accuracy(correct: list[bool]) -> float:
    """The expectation of a uniform random pick: the share of right answers."""
    return sum(correct) / len(correct)


def majority_accuracy(answers: list[str | None], correct: list[bool]) -> float | None:
    """Expected correctness of the most frequent answer (ties shared over the tied answers, each answer right as
    often as its chains are); candidates without an answer abstain. None when none has an answer (MiCEval's chains
    carry no final answer): there is nothing to vote on, and a random pick would pass for a vote."""
    by_answer: dict[str, list[bool]] = defaultdict(list)
    for a, c in zip(answers, correct):
        if a is not None:
            by_answer[a].append(c)
    if not by_answer:
        return None
    most = max(len(v) for v in by_answer.values())
    tied = [v for v in by_answer.values() if len(v) == most]
    return statistics.fmean(sum(v) / len(v) for v in tied)


def oracle_accuracy(correct: list[bool]) -> float:
    return float(any(correct))


# ----------------------------------------------------------------------------- many subsets at once

def _row(candidate) -> tuple:
    """A candidate as a tuple: right or not, answer, then its score by each of `SELECTORS`. `keyed_candidates` gives
    them so (one tuple per chain, kept for the judge's breakdowns); a candidate dict is read into one."""
    if isinstance(candidate, tuple):
        return candidate
    return (candidate["correct"], candidate["answer"], *(candidate["scores"].get(s) for s in SELECTORS))


class _Table:
    """Candidates as arrays, one entry per candidate: right or not, answer (a code, -1 for none), and each selector's
    score rounded as `pick_accuracy` rounds it (NaN for none)."""

    def __init__(self, flat: list):
        import numpy as np

        rows = [_row(c) for c in flat]
        self.correct = np.array([bool(r[0]) for r in rows], dtype=float)
        codes: dict = {}
        self.answer = np.array([-1 if r[1] is None else codes.setdefault(r[1], len(codes)) for r in rows],
                               dtype=np.int64)
        self.scores = {s: np.array([np.nan if r[2 + k] is None else round(r[2 + k], 9) for r in rows], dtype=float)
                       for k, s in enumerate(SELECTORS)}


def _rows_values(table: _Table, idx, selectors) -> dict:
    """Every method's accuracy on many subsets of one size at once (`idx`: one row of candidate positions per subset):
    `pick_accuracy` by each selector in `selectors` (the others NaN), `random_accuracy`, `oracle_accuracy` and
    `majority_accuracy`, NaN for None; each value computed with the same operations as those, so the same float."""
    import numpy as np

    correct = table.correct[idx]
    n_right = correct.sum(axis=1)
    random = n_right / idx.shape[1]
    out = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for s in SELECTORS:
            if s not in selectors:
                out[s] = np.full(len(idx), np.nan)
                continue
            scores = table.scores[s][idx]
            known = ~np.isnan(scores)
            top = scores == np.max(np.where(known, scores, -np.inf), axis=1, keepdims=True)
            out[s] = np.where(known.any(axis=1), (top * correct).sum(axis=1) / top.sum(axis=1), random)
        answer = table.answer[idx]
        has = answer >= 0
        same = (answer[:, :, None] == answer[:, None, :]) & has[:, None, :] & has[:, :, None]
        count = same.sum(axis=2)  # per member, how many share its answer (0 without one)
        most = count.max(axis=1)
        earlier = np.tril(same, -1).any(axis=2)  # its answer came up before: counted with that member
        tied = ~earlier & has & (count == most[:, None])
        share = np.where(tied, (same * correct[:, None, :]).sum(axis=2) / np.maximum(count, 1), 0.0)
        n_tied = tied.sum(axis=1)
        majority = np.where(n_tied > 0, share.sum(axis=1) / np.maximum(n_tied, 1), np.nan)
    for r in np.flatnonzero(n_tied > 2):  # `statistics.fmean` adds exactly: more than two shares can round apart
        majority[r] = statistics.fmean(share[r][tied[r]].tolist())
    out.update(random=random, oracle=(n_right > 0).astype(float), majority=majority)
    return out


def _question_means(values: dict, ends) -> list[dict]:
    """Per question (its rows end at `ends`), each method's mean over its subsets: None when a subset has none, else
    `statistics.fmean` (an exactly rounded sum, divided)."""
    import numpy as np

    starts = [0, *ends[:-1]]
    per_method = []
    for m in METHODS:
        column = values[m]
        undefined = np.add.reduceat(np.isnan(column), starts) > 0 if len(column) else []
        column = column.tolist()
        per_method.append([None if bad else column[lo] if hi - lo == 1 else math.fsum(column[lo:hi]) / (hi - lo)
                           for lo, hi, bad in zip(starts, ends, undefined)])
    return [dict(zip(METHODS, row)) for row in zip(*per_method)]


def _many_question_values(questions: dict, groups: list[str], n: int | None, max_subsets: int, seed: int,
                          selectors) -> list[dict]:
    """Each method's accuracy at N = n of each question in `groups`, averaged over its N-subsets (`subsets`; n None:
    every candidate once, `full_values`), computed over all their subsets together, a batch per subset size."""
    import numpy as np

    table = _Table([c for g in groups for c in questions[g]])
    by_size: dict[int, list] = defaultdict(list)  # subset size: (question, its subsets as candidate positions)
    every: dict[tuple, np.ndarray] = {}  # (size, n): all n-subsets of a question of that size, as `subsets` lists them
    offset = 0
    for k, g in enumerate(groups):
        size = len(questions[g])
        if n is None:
            picked = np.arange(size, dtype=np.int64)[None, :]
        elif math.comb(size, n) <= max_subsets:
            if (size, n) not in every:
                every[size, n] = np.array(subsets(size, n, g, max_subsets, seed), dtype=np.int64).reshape(-1, n)
            picked = every[size, n]
        else:
            picked = np.array(subsets(size, n, g, max_subsets, seed), dtype=np.int64)
        by_size[picked.shape[1]].append((k, picked + offset))
        offset += size
    out: list = [None] * len(groups)
    for batch in by_size.values():
        ends = np.cumsum([len(rows) for _, rows in batch]).tolist()
        values = _rows_values(table, np.concatenate([rows for _, rows in batch]), selectors)
        for (k, _), means in zip(batch, _question_means(values, ends)):
            out[k] = means
    return out


def _cached_values(questions: dict, groups: list[str], n: int | None, max_subsets: int, seed: int, selectors,
                   memo: dict | None, keys: dict | None) -> list[dict]:
    """`_many_question_values`, remembered in `memo` by question, N, candidates and selectors: a breakdown holds
    whole questions, whose values it then reads instead of drawing and scoring their subsets again."""
    if memo is None or keys is None:
        return _many_question_values(questions, groups, n, max_subsets, seed, selectors)
    # kept per setting and question as tuples of shared floats (at 100,000 chains, dicts of their own were a tenth of
    # the job's memory), valid while the question has the candidates they were computed from
    ids = memo.setdefault("ids", {})
    kept = memo.setdefault((n, max_subsets, seed, tuple(selectors)), {})
    for g in groups:
        if ids.get(g) != keys[g]:  # other candidates than before: every value of the question is stale
            ids[g] = keys[g]
            for values in (v for k, v in memo.items() if isinstance(k, tuple)):
                values.pop(g, None)
    missing = [g for g in groups if g not in kept]
    for g, v in zip(missing, _many_question_values(questions, missing, n, max_subsets, seed, selectors)):
        kept[g] = tuple(_shared(memo, v[m]) for m in METHODS)
    return [dict(zip(METHODS, kept[g])) for g in groups]


def _shared(memo: dict, value):
    """One object per distinct value in `memo` (accuracies repeat: 0, 1/2, 1...)."""
    return memo.setdefault("values", {}).setdefault((type(value), value), value)


# ----------------------------------------------------------------------------- subsets and curves

def n_values(max_size: int) -> list[int]:
    """1, 2, 4, ... below the largest group size, then that size."""
    ns, n = [], 1
    while n < max_size:
        ns.append(n)
        n *= 2
    return ns + [max_size] if max_size >= 1 else []


def subsets(size: int, n: int, group_id: str, max_subsets: int = DEFAULT_MAX_SUBSETS,
            seed: int = DEFAULT_SEED) -> list[tuple[int, ...]]:
    """The N-subsets of a question's candidates: all of them when there are at most `max_subsets`, else that many
    drawn without replacement, from a generator seeded by `seed` and the question's id."""
    import numpy as np  # only where a number is computed: `tasks` imports this module for `--help`

    if math.comb(size, n) <= max_subsets:
        return list(combinations(range(size), n))
    digest = hashlib.sha256(f"{seed}\x00{group_id}\x00{n}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "big"))
    return [tuple(sorted(rng.choice(size, size=n, replace=False).tolist())) for _ in range(max_subsets)]


def _mean(values: list) -> float | None:
    return None if not values or any(v is None for v in values) else statistics.fmean(values)


def given_selectors(questions: dict[str, list[dict]]) -> tuple[str, ...]:
    """The selectors the judge gives a score for, on at least one candidate: it can pick with those only."""
    rows = [_row(c) for cs in questions.values() for c in cs]
    return tuple(s for k, s in enumerate(SELECTORS) if any(r[2 + k] is not None for r in rows))


def full_values(questions: dict[str, list[dict]], memo: dict | None = None, keys: dict | None = None) -> dict:
    """Per question, each method's accuracy with all its candidates (N = its group size). `memo` and `keys` (each
    question's candidates, `keyed_candidates`) remember the values for the next call on the same questions."""
    groups = sorted(questions)
    values = _cached_values(questions, groups, None, 0, 0, given_selectors(questions), memo, keys)
    return dict(zip(groups, values))


def full_accuracy(per_question: dict[str, dict], method: str, weights=None):
    """`method`'s accuracy with all candidates (`full_values`), the mean over questions; None when a question has no
    value for it. With `weights`, per resample of the questions (`metrics.question_sums`)."""
    from stepcritic.eval.metrics import question_mean, undefined

    values = [v[method] for v in per_question.values()]
    if not values or any(v is None for v in values):
        return undefined(weights)
    return question_mean(list(per_question), values, weights)


def best_of_n(questions: dict[str, list[dict]], max_subsets: int = DEFAULT_MAX_SUBSETS,
              seed: int = DEFAULT_SEED, memo: dict | None = None, keys: dict | None = None) -> dict:
    """The best-of-N section for one judge, from its candidates per question (`candidates`).

    `curve[method][str(N)]` is the mean over questions with at least N candidates; `full[method]` the mean over
    every question with all its candidates. A selector the judge gives no score for is None; everything is None
    when no question has two candidates with a known answer label.
    """
    selectors = given_selectors(questions)
    sizes = {g: len(c) for g, c in questions.items()}
    ns = n_values(max(sizes.values(), default=0))
    curve: dict[str, dict] = {m: {} for m in METHODS}
    n_questions = {}
    for n in ns:
        counted = [g for g in sorted(questions) if sizes[g] >= n]
        n_questions[str(n)] = len(counted)
        values = _cached_values(questions, counted, n, max_subsets, seed, selectors, memo, keys)
        for m in METHODS:
            curve[m][str(n)] = _mean([v[m] for v in values])
    per_question = full_values(questions, memo, keys)
    full = {m: full_accuracy(per_question, m) for m in METHODS}
    counts = defaultdict(int)
    for size in sizes.values():
        counts[str(size)] += 1
    return {"n_questions": len(questions), "group_sizes": dict(sorted(counts.items(), key=lambda kv: int(kv[0]))),
            "ns": ns, "n_questions_at": n_questions, "curve": curve, "full": full,
            "selectors": list(selectors), "subsets": {"max": max_subsets, "seed": seed}}


# ----------------------------------------------------------------------------- from gold and predictions

def selector_scores(pred: dict) -> dict:
    """A judge's score of one chain under every selector (None where it gives none)."""
    steps = step_scores(pred)
    known = [s for s in steps if s is not None]
    return {"chain": chain_score(pred), "min": min(known) if known else None,
            "mean": statistics.fmean(known) if known else None, "last": steps[-1] if steps else None}


def candidate(chain: dict, pred: dict) -> dict:
    answer = chain.get("final_answer")
    return {"correct": bool(chain["answer_correct"]), "answer": normalize_answer(answer) if answer else None,
            "scores": selector_scores(pred)}


def candidates(gold: list[dict], preds: list[dict], memo: dict | None = None) -> dict[str, list[dict]]:
    """Per question (group_id) with two or more chains of known answer label: its candidates, by chain_id."""
    return {g: [{"correct": r[0], "answer": r[1], "scores": dict(zip(SELECTORS, r[2:]))} for r in rows]
            for g, rows in keyed_candidates(gold, preds, memo)[0].items()}


def keyed_candidates(gold: list[dict], preds: list[dict], memo: dict | None = None) -> tuple[dict, dict]:
    """`candidates` as tuples (`_row`), and per question the ids of its candidate chains; `memo` keeps each chain's
    candidate for the next call (a breakdown) with the same judge."""
    memo = {} if memo is None else memo
    made = memo.setdefault("candidates", {})  # chain_id: the candidate as a tuple
    groups: dict[str, list] = defaultdict(list)
    for chain, pred in sorted(zip(gold, preds), key=lambda cp: cp[0]["chain_id"]):
        if chain["answer_correct"] is None:
            continue
        if chain["chain_id"] not in made:
            c = candidate(chain, pred)
            made[chain["chain_id"]] = (c["correct"], _shared(memo, c["answer"]),
                                       *(_shared(memo, c["scores"][s]) for s in SELECTORS))
        groups[chain["group_id"]].append((chain["chain_id"], made[chain["chain_id"]]))
    kept = {g: c for g, c in groups.items() if len(c) >= 2}
    return {g: [c for _, c in cs] for g, cs in kept.items()}, {g: tuple(i for i, _ in cs) for g, cs in kept.items()}


def section(gold: list[dict], preds: list[dict], max_subsets: int = DEFAULT_MAX_SUBSETS,
            seed: int = DEFAULT_SEED, memo: dict | None = None) -> dict:
    """The best-of-n section of one judge (`results.TASK_SECTIONS`). `memo`, one dict per judge, keeps what a
    breakdown of the same judge would compute again (each chain's candidate, each question's values)."""
    questions, keys = keyed_candidates(gold, preds, memo)
    return best_of_n(questions, max_subsets, seed, memo, keys)
