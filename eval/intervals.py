"""Bootstrap intervals for the headline metrics of one judge's section (`tasks.Metric.headline`).

Each headline metric has a statistic, registered by its task (`tasks.Task.statistics`), that calls its own metric
function (`metrics`, `process`, `correction`) on the items the section read (the view's positions in the arrays of
`columns`), with the draws of `bootstrap.GroupBootstrap` as question weights: one value per resample, from the same
rules. With every question drawn once a statistic gives the metric's own value; a test checks that. The interval is
stored beside the value, at the metric's `ci_key`; an undefined metric has none (None).
"""

from __future__ import annotations

from functools import lru_cache

from stepcritic.eval import tasks as T
from stepcritic.eval.bootstrap import GroupBootstrap, interval


# the draws depend only on the questions: every judge gets the same. `results.compute_metrics` goes through the sets
# of chains one at a time, every judge on each, so one set's draws (35 MB at 35,000 questions) are held at a time.
@lru_cache(maxsize=1)
def _draws(groups: tuple) -> GroupBootstrap:
    return GroupBootstrap(groups)


# the statistic of every headline metric (`tasks.Metric.headline`), by metric name, as its task registers it
STATISTICS = {name: statistic for task in T.TASKS.values() for name, statistic in task.statistics.items()}


def add_intervals(section: dict, data, tasks, levels=None) -> None:
    """Put `[low, high]` at each headline metric's `ci_key` in `section`; None for an undefined metric, for
    fewer than two questions, or when too few resamples define it. With `levels`, only the metrics of those levels
    (the rest of the section is not shown)."""
    groups = tuple(sorted(set(data.view.group_ids()) | {q["group_id"] for q in data.picks}))
    for metric in (m for m in T.metrics_for(tasks) if m.headline and (levels is None or m.level in levels)):
        if metric.name not in STATISTICS:
            raise KeyError(f"headline metric {metric.name!r} has no bootstrap statistic in its task's statistics")
        defined = T.lookup(section, metric) is not None and len(groups) > 1
        ci = interval(STATISTICS[metric.name](data, _draws(groups))) if defined else None
        *parents, leaf = metric.ci_key.split(".")
        node = section[metric.task]
        for part in parents:
            node = node[part]
        node[leaf] = ci
