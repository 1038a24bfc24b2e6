"""`--tasks first-error` (ProcessBench) and PRMBench's PRMScore: a judge's step verdicts read as the process
benchmarks read them.

ProcessBench (Zheng et al., 2024, Sec. 3.1 and 4.1) asks for the earliest erroneous step of a solution, or -1 when
every step is right. Its score on a set is the accuracy on the erroneous samples (the predicted index equals the
label) and on the correct samples (the prediction is -1), and their harmonic mean, which it calls F1. A judge's
prediction here is its first flagged step (the first verdict "incorrect"), -1 when it flags none; a PRM's verdicts
are its step scores already thresholded (`judges/prm.py`), as the paper thresholds the scalar PRMs. A chain's label
is its first incorrect step when every step before it is labelled correct, -1 when every step is labelled correct;
any other chain (a step before the first error unlabelled, or no step labelled) has no label here and is left out.
An output the judge could not read answers nothing: wrong on either kind of chain, as an unparsed critique is wrong
in ProcessBench's own scoring.

PRMBench (Song et al., 2025, Sec. 4.1) scores a PRM by PRMScore = 0.5 F1_negative + 0.5 F1_positive over the steps:
the F1 of finding erroneous steps and the F1 of finding correct ones, weighted equally. StepCritic pools every step
with a gold label (a step the judge gives no verdict for counts as "not flagged", as in `metrics.step_f1`).

Only the standard library at the top: `tasks` imports this module for the registry.
"""

from __future__ import annotations

NO_LABEL = -2  # a chain without a first-error label: left out


def harmonic_mean(a, b):
    """ProcessBench's F1 of the two accuracies (0 when both are 0); None when either is undefined (NaN per resample,
    given arrays)."""
    import numpy as np

    if np.ndim(a) or np.ndim(b):
        both = a + b
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(both > 0, 2 * a * b / np.where(both > 0, both, 1.0), np.where(np.isnan(both), np.nan, 0.0))
    if a is None or b is None:
        return None
    return 2 * a * b / (a + b) if a + b else 0.0


def first_error_accuracy(gold: list[int], pred: list[int | None], groups=None, weights=None) -> dict:
    """ProcessBench's three numbers from per-chain first-error indices: `gold` -1 (no error) or the labelled step,
    `pred` the judge's first flagged step, -1, or None (its output could not be read: wrong either way). Accuracy on
    erroneous chains, on correct chains (each None when there is no such chain) and their harmonic mean. With
    `groups` (each chain's question) and `weights`, per resample (`metrics.question_sums`)."""
    import numpy as np

    from stepcritic.eval.metrics import question_sums, ratio

    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} first-error labels but pred has {len(pred)}")
    labels = np.asarray(gold, dtype=np.int64).reshape(-1)
    hit = np.array([p == g for g, p in zip(gold, pred)], dtype=bool)
    erroneous, correct = labels >= 0, labels == -1
    accuracy = lambda kind: ratio(question_sums(hit & kind, groups, weights), question_sums(kind, groups, weights))
    acc_error, acc_correct = accuracy(erroneous), accuracy(correct)
    return {"error_accuracy": acc_error, "correct_accuracy": acc_correct, "f1": harmonic_mean(acc_error, acc_correct),
            "n_error": int(erroneous.sum()), "n_correct": int(correct.sum())}


def first_indices(flags, chain, n_chains: int, pos):
    """Per chain, the position of its first step where `flags` holds, -1 where none does (`chain`: each step's chain
    as 0..n_chains-1, steps in order; `pos` each step's position in its chain)."""
    import numpy as np

    out = np.full(n_chains, -1, dtype=np.int64)
    hit = np.flatnonzero(flags)
    if len(hit):
        # steps are in chain order: the first hit of a chain is where its chain number first appears among the hits
        chains, first = np.unique(chain[hit], return_index=True)
        out[chains] = pos[hit[first]]
    return out


def gold_first_errors(gold_steps, chain, n_chains: int, pos):
    """Per chain, its ProcessBench label from the step labels (1.0 correct, 0.0 incorrect, NaN unknown): the first
    incorrect step when every earlier step is correct, -1 when every step is correct, else `NO_LABEL`."""
    import numpy as np

    first_bad = first_indices(gold_steps == 0, chain, n_chains, pos)
    first_unknown = first_indices(np.isnan(gold_steps), chain, n_chains, pos)
    has_steps = np.bincount(chain, minlength=n_chains) > 0
    labelled = np.where(first_bad >= 0, (first_unknown < 0) | (first_unknown > first_bad), first_unknown < 0)
    return np.where(labelled & has_steps, first_bad, NO_LABEL)


def section_from_arrays(gold_steps, verdicts, unread, chain, n_chains: int, pos, gives_verdicts: bool, groups=None,
                        weights=None) -> dict:
    """The first-error section from the steps of some chains (as `columns` holds them): `unread` per chain (its
    output could not be read), `gives_verdicts` whether the judge gives step verdicts at all (a reward model does
    not: everything None). With `groups` (each chain's question) and `weights`, per resample."""
    kept, erroneous, hit = chain_hits(gold_steps, verdicts, unread, chain, n_chains, pos)
    out = first_error_accuracy([0 if e else -1 for e in erroneous.tolist()],
                               [(0 if e else -1) if h else None for e, h in zip(erroneous.tolist(), hit.tolist())],
                               None if groups is None else groups[kept], weights)
    if not gives_verdicts:
        out.update(error_accuracy=None, correct_accuracy=None, f1=None)
    return out | {"n_unlabelled": int((~kept).sum())}


def chain_hits(gold_steps, verdicts, unread, chain, n_chains: int, pos):
    """Per chain: whether it has a first-error label (`kept`); and per kept chain, whether it is erroneous and
    whether the judge's first flagged step is right (an unreadable output never is)."""
    import numpy as np

    gold = gold_first_errors(gold_steps, chain, n_chains, pos)
    pred = first_indices(verdicts == 0, chain, n_chains, pos)
    kept = gold != NO_LABEL
    hit = (gold == pred) & ~np.asarray(unread, dtype=bool)
    return kept, gold[kept] >= 0, hit[kept]


def prm_score(gold: list[bool | None], pred: list[bool | None], groups=None, weights=None) -> dict:
    """PRMBench's PRMScore: 0.5 F1 of the erroneous steps + 0.5 F1 of the correct ones (`metrics.step_macro_f1`'s
    two classes), None unless both classes occur; per resample with `groups` and `weights` (`metrics`)."""
    from stepcritic.eval.metrics import step_macro_f1

    macro = step_macro_f1(gold, pred, groups, weights)
    return {"prmscore": macro["macro_f1"], "f1_negative": macro["f1_incorrect"], "f1_positive": macro["f1_correct"],
            "n": macro["n"]}
