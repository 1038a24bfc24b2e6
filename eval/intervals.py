"""Bootstrap intervals for the headline metrics of one judge's section (`tasks.Metric.headline`).

Each headline metric has a statistic here that calls its own metric function (`metrics`, `process`, `correction`)
on the items the section read (the view's positions in the arrays of `columns`), with the draws of
`bootstrap.GroupBootstrap` as question weights: one value per resample, from the same rules. With every question
drawn once a statistic gives the metric's own value; a test checks that. The interval is stored beside the value,
at the metric's `ci_key`; an undefined metric has none (None).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from stepcritic.eval import best_of_n, correction, pairwise, process, shiftcheck, verifier
from stepcritic.eval import metrics as M
from stepcritic.eval import tasks as T
from stepcritic.eval.bootstrap import GroupBootstrap, interval
from stepcritic.eval.scores import choice_records


# the draws depend only on the questions: every judge gets the same. `results.compute_metrics` goes through the sets
# of chains one at a time, every judge on each, so one set's draws (35 MB at 35,000 questions) are held at a time.
@lru_cache(maxsize=1)
def _draws(groups: tuple) -> GroupBootstrap:
    return GroupBootstrap(groups)


def _step_groups(data, boot: GroupBootstrap) -> np.ndarray:
    """Per step in view, its question's position in `boot`."""
    g = data.cols
    return boot.codes(g.group_names)[g.group[data.view.step_chain]]


def _chain_groups(data, boot: GroupBootstrap) -> np.ndarray:
    """Per chain in view, its question's position in `boot`."""
    g = data.cols
    return boot.codes(g.group_names)[g.group[data.view.chains]]


def step_f1(data, boot: GroupBootstrap) -> np.ndarray:
    steps = data.view.steps
    return M.step_f1(data.cols.correct[steps], data.answers.verdict[steps], _step_groups(data, boot), boot)["f1"]


def step_auroc(data, boot: GroupBootstrap) -> np.ndarray:
    steps = data.view.steps
    return M.step_auroc(data.cols.correct[steps], data.answers.score[steps], _step_groups(data, boot), boot)


def answer_f1(data, boot: GroupBootstrap) -> np.ndarray:
    chains = data.view.chains
    return M.answer_f1(data.cols.answer[chains], data.answers.answer[chains], _chain_groups(data, boot), boot)["f1"]


def explanation_f1(data, boot: GroupBootstrap) -> np.ndarray:
    steps = data.view.steps
    return M.explanation_match_f1(data.cols.correct[steps], data.answers.verdict[steps], data.answers.match[steps],
                                  _step_groups(data, boot), boot)["f1"]


def viscore(data, boot: GroupBootstrap) -> np.ndarray:
    return M.viscore(answer_f1(data, boot), step_f1(data, boot), explanation_f1(data, boot))


def invalid_rate(data, boot: GroupBootstrap) -> np.ndarray:
    chains, a = data.view.chains, data.answers
    return M.output_invalid_rate(np.column_stack([a.n_outputs[chains], a.n_invalid[chains]]),
                                 _chain_groups(data, boot), boot)


def choice_ranking_accuracy(data, boot: GroupBootstrap) -> np.ndarray:
    return M.choice_ranking_accuracy(choice_records(data.gold, data.preds), boot)["accuracy"]


def circular_accuracy(data, boot: GroupBootstrap) -> np.ndarray:
    picks = [q for q in data.picks if q.get("task") is None]  # ShiftCheck's, not the pairwise task's
    return shiftcheck.circular_accuracy(shiftcheck.group_outcomes(picks)[0], boot)


def verifier_avg(data, boot: GroupBootstrap) -> np.ndarray:
    per_task = []
    for task in verifier.TABLE_2_ORDER:
        scored = verifier.items(task, data.gold, data.verifier.get(task))
        per_task.append(M.verifier_accuracy([h for _, h, _ in scored], [p for _, _, p in scored],
                                            list(verifier.VERIFIER_TASKS[task]), [g for g, _, _ in scored],
                                            boot)["accuracy"])
    return M.verifier_average(per_task)


def bon_chain(data, boot: GroupBootstrap) -> np.ndarray:
    memo = data.answers.memo  # the section just computed the same values
    questions, keys = best_of_n.keyed_candidates(data.gold, data.preds, memo)
    return best_of_n.full_accuracy(best_of_n.full_values(questions, memo, keys), "chain", boot)


def correction_own_gain(data, boot: GroupBootstrap) -> np.ndarray:
    """VISCO's PCR - NCR after the judge's own critiques (`correction.section`), per resample."""
    return correction.own_gain(data.gold, data.corrections, boot)


def first_error_f1(data, boot: GroupBootstrap) -> np.ndarray:
    g, v, a = data.cols, data.view, data.answers
    return process.section_from_arrays(g.correct[v.steps], a.verdict[v.steps], a.unread[v.chains],
                                       np.searchsorted(v.chains, v.step_chain), len(v.chains), g.step_pos[v.steps],
                                       True, _chain_groups(data, boot), boot)["f1"]


def prmscore(data, boot: GroupBootstrap) -> np.ndarray:
    steps = data.view.steps
    return process.prm_score(data.cols.correct[steps], data.answers.verdict[steps], _step_groups(data, boot),
                             boot)["prmscore"]


def pairwise_accuracy(data, boot: GroupBootstrap) -> np.ndarray:
    selector = data.settings.get("pairwise", {}).get("score", pairwise.DEFAULT_SELECTOR)
    return pairwise.item_accuracy(pairwise.judged_items(data.gold, data.preds, data.picks, selector)[0], boot)


# the statistic of every headline metric (`tasks.Metric.headline`), by metric name
STATISTICS = {"step_f1": step_f1, "step_auroc": step_auroc, "answer_f1": answer_f1, "viscore": viscore,
              "invalid_rate": invalid_rate, "choice_ranking_accuracy": choice_ranking_accuracy,
              "circular_accuracy": circular_accuracy, "verifier_avg": verifier_avg, "bon_chain": bon_chain,
              "correction_own_gain": correction_own_gain, "first_error_f1": first_error_f1, "prmscore": prmscore,
              "pairwise_accuracy": pairwise_accuracy}


def add_intervals(section: dict, data, tasks, levels=None) -> None:
    """Put `[low, high]` at each headline metric's `ci_key` in `section`; None for an undefined metric, for
    fewer than two questions, or when too few resamples define it. With `levels`, only the metrics of those levels
    (the rest of the section is not shown)."""
    groups = tuple(sorted(set(data.view.group_ids()) | {q["group_id"] for q in data.picks}))
    for metric in (m for m in T.metrics_for(tasks) if m.headline and (levels is None or m.level in levels)):
        if metric.name not in STATISTICS:
            raise KeyError(f"headline metric {metric.name!r} has no bootstrap statistic in eval/intervals.py")
        defined = T.lookup(section, metric) is not None and len(groups) > 1
        ci = interval(STATISTICS[metric.name](data, _draws(groups))) if defined else None
        *parents, leaf = metric.ci_key.split(".")
        node = section[metric.task]
        for part in parents:
            node = node[part]
        node[leaf] = ci
