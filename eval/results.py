"""From gold labels and judges' predictions to the numbers of `metrics.json`: plain data, no rendering.

`compute_metrics` computes, for every judge, the section of each task asked (its `Task.section`, applying the
functions of `stepcritic.eval.metrics`), checks that it holds every metric `stepcritic.eval.tasks` registers
for that task, adds bootstrap intervals over questions to the headline metrics (`intervals`), and does the
same per source, generator, category and step type wherever the data has more than one. `report` renders
these numbers (markdown, plots); anything else can render them differently from `metrics.json` alone.

Judge scores used for correlations and ranking:
- step score: 1 - p_incorrect when the judge gives a probability, else its verdict (1 correct, 0 not).
- chain score: the judge's `chain_score`; a judge without one is scored by the fraction of steps it
  judged correct (an unparsed verdict counts as not correct), and a judge with neither has none (None).
- human scores (MiCEval Sec. 6.2, App. D): a step's `human_score` (1 / 0.5 / 0); a chain's good/bad
  MCoT label (`chain_correct`: 1 / 0), not a mean of step scores.

What a judge cannot produce is None ("–" in the report), never 0: step P/R/F1 for a judge that gives no
step verdict at all (a reward model), answer F1 for one that gives no answer verdict, explanation F1 for
one that writes no explanations or on data without reference critiques (and VISCore with it).
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager

import numpy as np

from stepcritic.eval import best_of_n as bon
from stepcritic.eval import columns, correction
from stepcritic.eval import metrics as M
from stepcritic.eval import sweep as sw
from stepcritic.eval import tasks as T
from stepcritic.eval import verifier as verifier_task
from stepcritic.eval.bootstrap import settings as bootstrap_settings
from stepcritic.eval.config import EvalConfig
from stepcritic.eval.intervals import add_intervals
from stepcritic.eval.matchers import MATCHERS

# what the report breaks every table down by, whenever the data holds more than one value of it
BREAKDOWNS = ("source", "generator", "category", "step_type", "step_kind")
STEP_FIELDS = {"step_type": "type", "step_kind": "kind"}  # breakdowns of steps, not of chains: the step's key


# ----------------------------------------------------------------------------- judge data

def _explanation_item(chain: dict, pred: dict, i: int) -> dict:
    """Step `i` as an item for `metrics.explanation_f1`: gold and predicted verdict, explanation, references, and the
    step in its chain (question, step texts, final answer, index) for a matcher that reads it (`judge_matcher`)."""
    step = chain["steps"][i]
    return {"gold": step["correct"], "pred": pred["verdicts"][i], "references": step["explanations"],
            "explanation": (pred.get("explanations") or [None] * len(pred["verdicts"]))[i],
            "question": chain.get("question"), "steps": [t.get("text") for t in chain["steps"]],
            "final_answer": chain.get("final_answer"), "step_index": i}


def explanation_matches(gold: list[dict], preds: list[dict], matcher) -> list[list[float | None]]:
    """Per chain, per step, the matcher's score (`metrics.explanation_match_scores`): computed once per judge,
    then sliced for every breakdown, so a slow matcher (an LLM) is asked once per explanation. Only the steps it
    matches (incorrect, flagged, explained, with references) are made into items; the others score as it would score
    them: None without references, else 0."""
    out, asked = [], []
    for k, (c, p) in enumerate(zip(gold, preds)):
        explanations = p.get("explanations")
        row = []
        for i, (s, v) in enumerate(zip(c["steps"], p["verdicts"])):
            row.append(0.0 if s["explanations"] else None)
            if s["explanations"] and s["correct"] is False and v is False and explanations and explanations[i]:
                asked.append((k, i))
        out.append(row)
    found = M.explanation_match_scores([_explanation_item(gold[k], preds[k], i) for k, i in asked], matcher)
    for (k, i), score in zip(asked, found):
        out[k][i] = score
    return out


class JudgeData:
    """What one judge's sections are computed from: gold and predictions of the chains in view, the ShiftCheck
    picks about their questions, and the explanation matches of their steps; and the same as arrays (`columns`):
    `cols` of every gold chain, `answers` of the judge on them, `view` the chains and steps in view."""

    def __init__(self, gold: list[dict], preds: list[dict], picks: list[dict], matcher, matches: list[list],
                 verifier: dict | None = None, rpts=None, corrections: dict | None = None,
                 settings: dict | None = None, view: columns.View | None = None, answers: columns.Answers | None = None,
                 cols: columns.Gold | None = None):
        self._dicts = (gold, preds, matches, verifier)
        self.picks, self.matcher = picks, matcher
        self.rpts = rpts  # RPTS's settings (`rpts.Settings`), None for the defaults
        self.corrections = corrections  # the corrected answers of `correction.run`, None without a corrector
        # `dev`: the questions that choose the sweep's threshold; `best_of_n`: its subset settings
        self.settings = settings or {}
        self._cols, self._view, self._answers = cols, view, answers

    # the dicts of the chains in view, made when a section that reads dicts asks (a step breakdown builds them
    # only for the verifier task); `_dicts` is either those dicts or a function that makes them
    def _dict(self, i: int):
        if callable(self._dicts):
            self._dicts = self._dicts()
        return self._dicts[i]

    gold = property(lambda self: self._dict(0))
    preds = property(lambda self: self._dict(1))
    matches = property(lambda self: self._dict(2))
    verifier = property(lambda self: self._dict(3))  # the judge's verifier answers (`verifier.read`), or None

    @property
    def cols(self) -> columns.Gold:
        if self._cols is None:
            self._cols = columns.Gold(self.gold)
        return self._cols

    @property
    def view(self) -> columns.View:
        if self._view is None:
            self._view = columns.View.whole(self.cols)
        return self._view

    @property
    def answers(self) -> columns.Answers:
        if self._answers is None:
            self._answers = columns.Answers(self.cols, self.preds, self.matches)
        return self._answers

    def step_groups(self, boot) -> np.ndarray:
        """Per step in view, its question's position in the bootstrap draws `boot`."""
        return boot.codes(self.cols.group_names)[self.cols.group[self.view.step_chain]]

    def chain_groups(self, boot) -> np.ndarray:
        """Per chain in view, its question's position in the bootstrap draws `boot`."""
        return boot.codes(self.cols.group_names)[self.cols.group[self.view.chains]]

    def _with(self, dicts, view: columns.View, picks, corrections) -> "JudgeData":
        out = JudgeData([], [], picks, self.matcher, [], None, self.rpts, corrections, self.settings, view,
                        self.answers if self.preds else None, self.cols)
        out._dicts = dicts
        return out

    def chains(self, keep: list[int]) -> "JudgeData":
        groups = {self.gold[i]["group_id"] for i in keep}
        dicts = ([self.gold[i] for i in keep], [self.preds[i] for i in keep] if self.preds else [],
                 [self.matches[i] for i in keep] if self.matches else [],
                 verifier_task.slice_chains(self.verifier, keep))
        return self._with(dicts, self.view.of_chains(keep), [q for q in self.picks if q["group_id"] in groups],
                          correction.slice_chains(self.corrections, keep))

    def steps(self, field: str, value) -> "JudgeData":
        """Only the steps whose `field` (a step breakdown: `step_values`) is `value`; chains left without a step are
        dropped. For step-level metrics only."""
        values = self.cols.values(field, STEP_FIELDS[field])
        return self._with(lambda: self._step_dicts(field, value), self.view.of_steps(values == value), [], None)

    def _step_dicts(self, field: str, value) -> tuple:
        gold, preds, matches, kept = [], [], [], []
        for k, c in enumerate(self.gold):
            idx = [i for i, v in enumerate(step_values(c, field)) if v == value]
            if not idx:
                continue
            kept.append((k, idx))
            # premise links point into the whole chain: a slice of it has no tree
            gold.append(dict(c, steps=[dict(c["steps"][i], premises=None) for i in idx]))
            if self.preds:  # none when only the verifier task runs
                p, m = self.preds[k], self.matches[k]
                preds.append(dict(p, **{f: [p[f][i] for i in idx] for f in ("verdicts", "p_incorrect", "explanations")
                                        if p.get(f) is not None}))
                matches.append([m[i] for i in idx])
        return gold, preds, matches, verifier_task.slice_steps(self.verifier, kept)


# the section of each registered task, from one judge's data (`tasks.Task.section`)
TASK_SECTIONS = {name: task.section for name, task in T.TASKS.items()}
# the tasks whose sections can be computed on a slice of each chain's steps (the step-type breakdown)
STEP_SLICEABLE = tuple(name for name, task in T.TASKS.items() if task.steps)


# ----------------------------------------------------------------------------- sections, intervals, breakdowns

def section(data: JudgeData, tasks, levels=None) -> dict:
    """Every task's metrics for one judge, with bootstrap intervals on the headline ones.

    `levels` keeps only the registered metrics of those levels (a step-type breakdown: step metrics only).
    A registered metric missing from a task's section is a bug (the registry and the computation drifted
    apart), raised here rather than shown as "–".
    """
    out = {}
    for task in tasks:
        if TASK_SECTIONS.get(task) is None:
            raise KeyError(f"task {task!r} is registered in eval/tasks/ without a section")
        out[task] = TASK_SECTIONS[task](data)
        missing = [m.key for m in T.metrics_for([task]) if not T.has(out, m)]
        if missing:
            raise KeyError(f"task {task!r} computed no {missing}, which eval/tasks/ registers")
    add_intervals(out, data, tasks, levels)
    return out if levels is None else _only(out, [m for m in T.metrics_for(tasks) if m.level in levels])


def _only(sec: dict, metrics: list) -> dict:
    """The registered values (and intervals) of `metrics` alone, in the same nesting: the rest of a section
    computed on a slice of each chain's steps (chain scores, propagation) would describe no real chain."""
    kept: dict = {}
    for m in metrics:
        for key in (m.key, m.ci_key):
            found, value = T.find(sec, m.task, key)
            if found:
                *parents, leaf = [m.task, *key.split(".")]
                node = kept
                for part in parents:
                    node = node.setdefault(part, {})
                node[leaf] = value
    return kept


def step_values(chain: dict, field: str) -> list:
    """Per step of a gold chain, its value of a step breakdown: MiCEval's step type, or the kind of claim it makes
    (`gold.step_kinds`)."""
    return [s.get(STEP_FIELDS[field]) for s in chain["steps"]]


def breakdown_plan(gold: list[dict]) -> dict:
    """For each field of `BREAKDOWNS` with more than one value: its values, how many chains (steps) each
    has, and the metric levels its tables can show. A field that differs between the chains of one question
    (the generator, usually) cannot split a comparison of those chains: group metrics are left out there."""
    plan = {}
    for field in BREAKDOWNS:
        if field in STEP_FIELDS:
            counts = defaultdict(int)
            for c in gold:
                for value in step_values(c, field):
                    if value is not None:
                        counts[value] += 1
            unit, levels = "steps", ["step"]
        else:
            counts = defaultdict(int)
            by_group = defaultdict(set)
            for c in gold:
                by_group[c["group_id"]].add(c.get(field))
                if c.get(field) is not None:
                    counts[c[field]] += 1
            unit = "chains"
            levels = ["step", "chain"] + (["group"] if all(len(v) == 1 for v in by_group.values()) else [])
        if len(counts) > 1:
            plan[field] = {"values": sorted(counts), "counts": {k: counts[k] for k in sorted(counts)},
                           "unit": unit, "levels": levels}
    return plan


def _breakdown_value(data: JudgeData, tasks, field: str, spec: dict, value) -> dict:
    if field in STEP_FIELDS:
        part = data.steps(field, value)
        return section(part, [t for t in tasks if t in STEP_SLICEABLE], levels=spec["levels"])
    keep = np.flatnonzero(data.cols.values(field)[data.view.chains] == value).tolist()
    shown = [t for t in tasks if any(m.level in spec["levels"] for m in T.metrics_for([t]))]
    return section(data.chains(keep), shown)


def compute_metrics(gold: list[dict], answers: dict, config: EvalConfig, matcher=None) -> dict:
    """metrics.json: per judge, every registered metric of `config.tasks` overall and per breakdown value, with counts.

    answers[judge] holds what the judge answered: "predictions", one per gold chain in gold order (empty when no
    task needs critiques); "picks", the ShiftCheck records (each with `group_id`); "verifier", its verifier answers
    (`verifier.read`; None when it has none); "corrections", its corrected answers (`correction.run`; None without
    a corrector). Of `config`, the tasks, RPTS's settings (the trees are on the gold chains, `rpts_tree.attach`),
    the threshold sweep's split and best-of-n's subsets count. `matcher` is the explanation matcher, built (a
    `judge_matcher.LLMJudgeMatcher`, say) or a name of `MATCHERS`; None: `config.matcher`.
    """
    with _one_blas_thread():
        return _compute_metrics(gold, answers, config, matcher)


@contextmanager
def _one_blas_thread():
    """The bootstrap's matrix products are many and small: BLAS threads waiting between them cost more time than
    they save (a third of the CPU time of a 10,000-chain evaluation on two cores). One thread computes the same
    numbers. threadpoolctl comes with scikit-learn; without it the products run as they are."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _compute_metrics(gold: list[dict], answers: dict, config: EvalConfig, matcher=None) -> dict:
    matcher = config.matcher if matcher is None else matcher
    match = MATCHERS[matcher]() if isinstance(matcher, str) else matcher
    tasks = config.tasks
    sweep = {"dev_fraction": sw.DEFAULT_DEV_FRACTION, "seed": sw.DEFAULT_SEED, **(config.sweep or {})}
    best_of_n = {"max_subsets": bon.DEFAULT_MAX_SUBSETS, "seed": bon.DEFAULT_SEED, **(config.best_of_n or {})}
    # one split for every judge and every breakdown: a question chooses thresholds or is tested, never both
    dev = sw.dev_groups((c["group_id"] for c in gold), sweep["dev_fraction"], sweep["seed"])
    options = {"dev": dev, "best_of_n": best_of_n}
    for task in (T.TASKS[t] for t in dict.fromkeys(tasks)):
        if task.settings is not None:
            options[task.name] = task.settings(config)
    plan = {field: spec for field, spec in breakdown_plan(gold).items()
            if any(m.level in spec["levels"] for m in T.metrics_for(tasks))}
    cols = columns.Gold(gold)  # every judge's arrays index the same gold arrays
    data = {}
    for name, answered in answers.items():
        preds = answered["predictions"]
        matches = explanation_matches(gold, preds, match) if preds else []
        data[name] = JudgeData(gold, preds, answered["picks"], match, matches, answered.get("verifier"), config.rpts,
                               answered.get("corrections"), options, cols=cols)
    # every judge on one set of chains before the next set: the bootstrap draws of a set are made once, and only
    # those of one set are held at a time (step breakdowns first: their steps' questions are often all of them, the
    # overall set's)
    judges = {name: {"overall": section(d, tasks), "breakdowns": {field: {} for field in plan}}
              for name, d in data.items()}
    for field in sorted(plan, key=lambda f: f not in STEP_FIELDS):
        for value in plan[field]["values"]:
            for name, d in data.items():
                judges[name]["breakdowns"][field][value] = _breakdown_value(d, tasks, field, plan[field], value)
    return {"tasks": list(tasks), "matcher": match.name, "n_chains": len(gold),
            "n_steps": sum(len(c["steps"]) for c in gold), "n_questions": len({c["group_id"] for c in gold}),
            "bootstrap": bootstrap_settings(), "breakdowns": plan, "judges": judges,
            "sweep": {**sweep, "n_dev_questions": len(dev), "dev_questions": sorted(dev)}, "best_of_n": best_of_n}
