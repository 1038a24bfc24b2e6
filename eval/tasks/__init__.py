"""The tasks of `stepcritic eval` and every metric each one reports: the single list the rest follows.

Each task is one module of this package that registers its `Task` and its `Metric`s (`base.register`). A metric is
registered once with its task, its key (where `metrics.json` holds it, a dotted path inside the task's section), its
direction, what it is aggregated over and its column header. `results.compute_metrics` computes the sections of the
tasks asked and checks that every registered key of those tasks is there; `report` draws its tables from this list;
docs/metrics.md is generated from it (`metrics_doc`). A metric that is not registered is not advertised, and a
registered one cannot go missing unnoticed.

A new task is a new module here, imported below; the runner, the command line and the report pick it up from the
registry. Every module is stdlib at its top (the eval modules it names are too): `stepcritic eval --help` reads the
task names from here.
"""

from __future__ import annotations

# isort: off
# imported in the order `--tasks` lists the tasks and the report shows their metrics (the process benchmarks'
# first-error and PRMScore side by side, both read off the critique task's judgments)
from stepcritic.eval.tasks import (  # noqa: F401  (each registers itself)
    critique, choice, shiftcheck, verifier, rpts, best_of_n, correction, first_error, prmscore, pairwise,
)
# isort: on
from stepcritic.eval.tasks.base import (
    METRICS,
    TASKS,
    Metric,
    Task,
    check_options,
    find,
    has,
    lookup,
    metrics_for,
    register,
)

__all__ = ["METRICS", "TASKS", "Metric", "Task", "check_options", "find", "has", "lookup", "metrics_for", "register"]
