"""What an eval task is (`Task`), each number it reports (`Metric`), and the one registry both are added to.

Each task module of this package calls `register` once with its `Task` and its `Metric`s; the command line, the
runner, `results`, `intervals` and `report` read the registry and name no task. Only the standard library is imported
here: `stepcritic eval --help` reads the task names from the registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Task:
    name: str
    needs: str        # what the runner asks each judge for: "critiques" (one per chain), "picks" (ShiftCheck),
    #                   "pairwise" (a scorer's critiques, a generative judge's choice of each pair in both orders),
    #                   "verifier" (the answers to every verifier task, `eval/verifier.py`) or "corrections"
    #                   (critiques, then a corrector's answers after them, `eval/correction.py`)
    description: str
    default: bool = True  # run when `--tasks` is not given; off for tasks that multiply a judge's requests
    # the task's section of one judge's metrics, from what `results.JudgeData` holds of that judge
    section: Callable | None = None
    steps: bool = False  # its section can be computed on a slice of each chain's steps (the step-type breakdown)
    # by headline metric name, the bootstrap statistic (`intervals`): (`results.JudgeData`, the draws) -> one value per
    # resample, from the metric's own function on the items the section read, the draws as question weights
    statistics: dict = field(default_factory=dict, hash=False)
    # its part of report.md: (metrics.json's content, each judge's overall sections) -> lines, None for none. The
    # parts are in ascending `place`: under the leaderboard below `report.DIAGNOSTICS`, after the Diagnostics table
    # above it
    render: Callable | None = None
    place: int = 0
    diagnostics: str = ""  # what its columns of the Diagnostics table mean, said in the paragraph above that table
    # what the runner does for it beyond asking each judge what `needs` says, each hook None when it does nothing:
    # `questions` (gold chains) -> the questions each judge picks an option of (`runner.judge_picks`);
    # `prepare` (config, gold chains, the chains dataset) -> its block of metrics.json, before any judge is asked;
    # `ask_after` (config, gold chains, the judges' runs, the chain at a position, with images) -> ({judge: what it
    # adds to that judge's data for `results`}, its block of metrics.json), once every judge has answered;
    # `check` (config) raises `EvalError` when the task cannot run as configured, before the chains are read
    questions: Callable | None = None
    prepare: Callable | None = None
    ask_after: Callable | None = None
    check: Callable | None = None
    images: bool = False  # `ask_after` shows a model the chains' images
    options: tuple = ()  # the command-line options that serve this task alone (`check_options`)
    # (config) -> its settings in `results.JudgeData.settings`, under the task's name
    settings: Callable | None = None
    # by plot name, the figure (`eval/plots.py`): (metrics.json's content, the PNG's path) -> False when the metrics
    # hold nothing to draw; the name is the file's, `plots/NAME.png`, so it is unique across tasks
    plots: dict = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Metric:
    """One number of the report.

    `key` is the dotted path inside the task's section (`judges.NAME.overall.TASK.<key>`); a bootstrap
    interval, for `headline` metrics, sits beside it at `<key>_ci`. `higher_is_better` None means no
    direction (nothing is bolded). `level` says what the metric is computed over: "step" metrics also get a
    table per step type, "group" metrics (one question's chains compared) are only broken down by fields
    that are constant within a question. `undefined` says when the value is None ("–" in the report).
    """

    name: str
    task: str
    key: str
    display: str
    higher_is_better: bool | None
    aggregation: str
    description: str
    fn: Callable
    level: str
    undefined: str
    table: str = "leaderboard"   # or "diagnostics", "verifier", "rpts"
    scale: int = 100             # shown x100 (papers' style), or as is
    headline: bool = False       # bootstrap interval, and a place in the terminal summary
    note: Callable | None = None  # (its task's section) -> words the terminal summary adds after the value, or None

    @property
    def ci_key(self) -> str:
        return f"{self.key}_ci"


# the registry, in registration order: `--tasks` lists the tasks, and the report shows the metrics, in this order
TASKS: dict[str, Task] = {}
METRICS: dict[str, Metric] = {}


def register(task: Task, metrics: list[Metric]) -> Task:
    """Add a task and its metrics to the registry; a name taken twice (task, metric or plot), or a metric of another
    task, is a bug."""
    if task.name in TASKS:
        raise RuntimeError(f"task {task.name!r} is registered twice")
    if any(name in t.plots for t in TASKS.values() for name in task.plots):
        raise RuntimeError(f"task {task.name!r}: plot names must be unique, each names its file")
    for m in metrics:
        if m.task != task.name or m.name in METRICS:
            raise RuntimeError(f"metric {m.name!r}: metric names must be unique and every metric must belong to the "
                               "task it is registered with")
        METRICS[m.name] = m
    TASKS[task.name] = task
    return task


def check_options(tasks, given: set[str]) -> None:
    """An option given (`given`: the flags of those set) without the task it alone serves is an error, one line
    naming the task to add."""
    from stepcritic.eval.errors import EvalError

    for task in TASKS.values():
        flags = [flag for flag in task.options if flag in given]
        if flags and task.name not in tasks:
            raise EvalError(f"{' and '.join(flags)} only serve{'s' if len(flags) == 1 else ''} the {task.name} task: "
                            f"add --tasks {task.name}")


def metrics_for(tasks, table: str | None = None, level: str | None = None) -> list[Metric]:
    """The registered metrics of `tasks`, in registry order, optionally of one table or one level."""
    return [m for m in METRICS.values() if m.task in tasks and (table is None or m.table == table)
            and (level is None or m.level == level)]


def find(section: dict, task: str, key: str) -> tuple[bool, object]:
    """(whether the section holds `key` of `task`, its value)."""
    value = section.get(task)
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def lookup(section: dict, metric: Metric, ci: bool = False):
    """A metric's value (or its `[low, high]` interval) in one section of `metrics.json`, None when absent."""
    return find(section, metric.task, metric.ci_key if ci else metric.key)[1]


def has(section: dict, metric: Metric) -> bool:
    """Whether the section holds the metric's key (its value may be None: undefined)."""
    return find(section, metric.task, metric.key)[0]
