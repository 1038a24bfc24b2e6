"""`EvalConfig`: everything one `stepcritic eval` job is asked to do, built by the command line (`eval/cli.py`), the
demo or a user's script and handed whole to `runner.evaluate`.

Stdlib at the top (with the task registry, itself stdlib at the top), so building a config costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from stepcritic.eval.tasks import TASKS

DEFAULT_TASKS = tuple(name for name, task in TASKS.items() if task.default)


@dataclass
class EvalConfig:
    """One evaluation job. The fields keep the order of `evaluate`'s former parameters, so
    `EvalConfig(chains, judges, out_dir, tasks=...)` reads as the older call did."""

    chains: str  # a chains dataset folder (saved by `stepcritic data`) or a canonical .jsonl file
    judges: list  # built `Judge`s with distinct names (`runner.build_judge`)
    out_dir: str  # predictions.jsonl, metrics.json, report.md, plots/ and cache/ go here
    tasks: Sequence[str] = DEFAULT_TASKS
    limit: int | None = None  # judge only the first `limit` chains
    # "lexical", "embedding", "judge:SPEC" (`judge_matcher.build`) or a matcher object, which the caller closes
    matcher: Any = "lexical"
    progress: bool = True
    log: Callable[[str], Any] = print
    rpts: Any = None  # RPTS's settings (`rpts.Settings`), None for the defaults; only the `rpts` task reads them
    tree_builder: Any = None  # the generative judge that restates chains without premises as trees (`rpts_tree`)
    corrector: Any = None  # the `correction` task's generative judge; None: each generative judge corrects its own
    sweep: dict | None = None  # {"dev_fraction", "seed"} of the threshold sweep; None for its defaults
    best_of_n: dict | None = None  # {"max_subsets", "seed"} of best-of-n; None for its defaults
    # report even when some requests got no answer, leaving the chains and questions they leave unjudged out
    allow_failures: bool = False
    pairwise: dict | None = None  # {"score": "chain" / "min" / "mean" / "last"} of the pairwise task; None: "chain"
    jobs: int = 1  # judges asked at once, each in a worker process (`eval/parallel.py`)
    # this process's rank among those a launcher started (`distributed.World`); None: one process
    world: Any = None
