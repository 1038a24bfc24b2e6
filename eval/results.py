"""From gold labels and judges' predictions to the numbers of `metrics.json`: plain data, no rendering.

`compute_metrics` computes, for every judge, the section of each task asked (`TASK_SECTIONS`, applying the
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

import statistics
from collections import defaultdict

from stepcritic.data_prep.schema import describes, reasons
from stepcritic.eval import best_of_n as bon
from stepcritic.eval import correction
from stepcritic.eval import metrics as M
from stepcritic.eval import sweep as sw
from stepcritic.eval import tasks as T
from stepcritic.eval import verifier as verifier_task
from stepcritic.eval.bootstrap import settings as bootstrap_settings
from stepcritic.eval.config import EvalConfig
from stepcritic.eval.intervals import add_intervals
from stepcritic.eval.matchers import MATCHERS
from stepcritic.eval.rpts import section as rpts_section
from stepcritic.eval.scores import chain_score, choice_records, gives, output_counts, step_scores

# what the report breaks every table down by, whenever the data holds more than one value of it
BREAKDOWNS = ("source", "generator", "category", "step_type", "step_kind")
STEP_FIELDS = {"step_type": "type", "step_kind": "kind"}  # breakdowns of steps, not of chains: the step's key


# ----------------------------------------------------------------------------- judge scores

def human_chain_score(chain: dict) -> float | None:
    """MiCEval's human label of a whole MCoT (good 1 / bad 0, Sec. 2.3.3 and App. D.1), None if unknown."""
    label = chain.get("chain_correct")
    return None if label is None else float(label)


def human_step_mean(chain: dict) -> float | None:
    scores = [s["human_score"] for s in chain["steps"] if s["human_score"] is not None]
    return statistics.fmean(scores) if scores else None


def _undefined(result: dict) -> dict:
    return result | {k: None for k in ("precision", "recall", "f1")}


# ----------------------------------------------------------------------------- task sections

def _correlations(human: list, judge: list) -> dict:
    somers = M.somers_d(human, judge)
    return {"d": somers["d"], "rho": M.spearman(human, judge)["rho"], "n": somers["n"]}


def _step_correlations(gold: list[dict], judge_steps: list[list], keep=lambda step: True) -> dict:
    human = [s["human_score"] if keep(s) else None for c in gold for s in c["steps"]]
    return _correlations(human, [x for scores in judge_steps for x in scores])


def explanation_items(gold: list[dict], preds: list[dict]) -> list[dict]:
    """One item per step for `metrics.explanation_f1`: gold and predicted verdict, explanation, references, and the
    step in its chain (question, step texts, final answer, index) for a matcher that reads it (`judge_matcher`)."""
    return [{"gold": s["correct"], "pred": v, "references": s["explanations"],
             "explanation": (p.get("explanations") or [None] * len(p["verdicts"]))[i],
             "question": c.get("question"), "steps": [t.get("text") for t in c["steps"]],
             "final_answer": c.get("final_answer"), "step_index": i}
            for c, p in zip(gold, preds) for i, (s, v) in enumerate(zip(c["steps"], p["verdicts"]))]


def explanation_matches(gold: list[dict], preds: list[dict], matcher) -> list[list[float | None]]:
    """Per chain, per step, the matcher's score (`metrics.explanation_match_scores`): computed once per judge,
    then sliced for every breakdown, so a slow matcher (an LLM) is asked once per explanation."""
    flat = iter(M.explanation_match_scores(explanation_items(gold, preds), matcher))
    return [[next(flat) for _ in c["steps"]] for c in gold]


def sweep_metrics(gold: list[dict], preds: list[dict], dev: frozenset | None = None) -> dict:
    """`sweep.threshold_sweep` over every step, the questions in `dev` choosing the threshold (by default the
    split `sweep.dev_groups` draws from these chains' questions)."""
    if dev is None:
        dev = sw.dev_groups(c["group_id"] for c in gold)
    in_dev = [c["group_id"] in dev for c in gold for _ in c["steps"]]
    return sw.threshold_sweep([s["correct"] for c in gold for s in c["steps"]],
                           [x for p in preds for x in step_scores(p)],
                           [v for p in preds for v in p["verdicts"]], in_dev)


def critique_metrics(gold: list[dict], preds: list[dict], matcher, matches: list[list] | None = None,
                     dev: frozenset | None = None) -> dict:
    if matches is None:
        matches = explanation_matches(gold, preds, matcher)
    gold_steps = [s["correct"] for c in gold for s in c["steps"]]
    pred_steps = [v for p in preds for v in p["verdicts"]]
    step = M.step_f1(gold_steps, pred_steps)
    if not gives(preds, "verdicts"):
        step = _undefined(step)
    answer = M.answer_f1([c["answer_correct"] for c in gold], [p["answer_correct"] for p in preds])
    if not gives(preds, "answer_correct"):
        answer = _undefined(answer)
    explanation = M.explanation_match_f1(gold_steps, pred_steps, [m for chain in matches for m in chain]) | {
        "matcher": matcher.name}
    if all(p.get("explanations") is None for p in preds):  # the judge kind writes no explanations
        explanation = _undefined(explanation)
    counts = [output_counts(p) for p in preds]

    judge_steps = [step_scores(p) for p in preds]
    macro = M.step_macro_f1(gold_steps, pred_steps) if gives(preds, "verdicts") else {
        "f1_incorrect": None, "f1_correct": None, "macro_f1": None, "n": 0}
    step = {**step, **{k: macro[k] for k in ("f1_incorrect", "f1_correct", "macro_f1")},
            "auroc": M.step_auroc(gold_steps, [x for scores in judge_steps for x in scores]),
            "sweep": sweep_metrics(gold, preds, dev)}
    correlation = {
        "step": _step_correlations(gold, judge_steps),
        # MiCEval App. D.3 reports step-level correlation per step type; a "both" step counts in each
        "step_description": _step_correlations(gold, judge_steps, describes),
        "step_reasoning": _step_correlations(gold, judge_steps, reasons),
        "chain": _correlations([human_chain_score(c) for c in gold], [chain_score(p) for p in preds]),
        "chain_rpts": {"d": None, "rho": None, "n": 0},
    }
    annotated = [i for i, c in enumerate(gold) if all(s["premises"] is not None for s in c["steps"])]
    if annotated:  # RPTS needs the premise tree; chains without premise annotations are left out
        premises = {i: [s["premises"] for s in gold[i]["steps"]] for i in annotated}
        correlation["chain_rpts"] = _correlations(
            [M.rpts_chain(premises[i], [s["human_score"] for s in gold[i]["steps"]]) for i in annotated],
            [M.rpts_chain(premises[i], judge_steps[i]) for i in annotated])

    with_probability = [(g is False, p) for c, pred in zip(gold, preds) if pred.get("p_incorrect")
                        for g, p in zip((s["correct"] for s in c["steps"]), pred["p_incorrect"])
                        if g is not None and p is not None]
    return {
        "n_chains": len(gold), "n_outputs": sum(n for n, _ in counts), "n_invalid": sum(k for _, k in counts),
        "invalid_rate": M.output_invalid_rate(counts),
        "step": step, "confusion": {"tp": step["tp"], "fp": step["fp"], "fn": step["fn"],
                                    "tn": step["n"] - step["tp"] - step["fp"] - step["fn"]},
        "answer": answer, "explanation": explanation,
        "viscore": M.viscore(answer["f1"], step["f1"], explanation["f1"]),
        "correlation": correlation,
        "error_propagation": M.error_propagation([[s["correct"] for s in c["steps"]] for c in gold],
                                                 [p["verdicts"] for p in preds]),
        "calibration": M.calibration(*map(list, zip(*with_probability)) if with_probability else ([], [])),
    }


def choice_metrics(gold: list[dict], preds: list[dict]) -> dict:
    n_own = sum(p.get("chain_score") is not None for p in preds)
    source = ("chain_score" if n_own == len(preds) else
              "fraction of steps judged correct" if n_own == 0 else "chain_score, else fraction judged correct")
    return M.choice_ranking_accuracy(choice_records(gold, preds)) | {"score": source}


class JudgeData:
    """What one judge's sections are computed from: gold and predictions of the chains in view, the ShiftCheck
    picks about their questions, and the explanation matches of their steps."""

    def __init__(self, gold: list[dict], preds: list[dict], picks: list[dict], matcher, matches: list[list],
                 verifier: dict | None = None, rpts=None, corrections: dict | None = None,
                 settings: dict | None = None):
        self.gold, self.preds, self.picks, self.matcher, self.matches = gold, preds, picks, matcher, matches
        self.verifier = verifier  # the judge's verifier answers (`verifier.read`), None when it has none
        self.rpts = rpts  # RPTS's settings (`rpts.Settings`), None for the defaults
        self.corrections = corrections  # the corrected answers of `correction.run`, None without a corrector
        # `dev`: the questions that choose the sweep's threshold; `best_of_n`: its subset settings
        self.settings = settings or {}

    def chains(self, keep: list[int]) -> "JudgeData":
        groups = {self.gold[i]["group_id"] for i in keep}
        return JudgeData([self.gold[i] for i in keep], [self.preds[i] for i in keep] if self.preds else [],
                         [q for q in self.picks if q["group_id"] in groups], self.matcher,
                         [self.matches[i] for i in keep] if self.matches else [],
                         verifier_task.slice_chains(self.verifier, keep), self.rpts,
                         correction.slice_chains(self.corrections, keep), self.settings)

    def steps(self, field: str, value) -> "JudgeData":
        """Only the steps whose `field` (a step breakdown: `step_values`) is `value`; chains left without a step are
        dropped. For step-level metrics only."""
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
        return JudgeData(gold, preds, [], self.matcher, matches, verifier_task.slice_steps(self.verifier, kept),
                         self.rpts, None, self.settings)


# the section of each registered task, from one judge's data; a new task adds its function here
def _best_of_n(d: JudgeData) -> dict:
    return bon.section(d.gold, d.preds, **d.settings.get("best_of_n", {}))


def _correction(d: JudgeData) -> dict:
    return correction.section(d.gold, d.corrections)


TASK_SECTIONS = {
    "critique": lambda d: critique_metrics(d.gold, d.preds, d.matcher, d.matches, d.settings.get("dev")),
    "choice": lambda d: choice_metrics(d.gold, d.preds),
    "shiftcheck": lambda d: M.shiftcheck(d.picks),
    "verifier": lambda d: verifier_task.section(d.gold, d.verifier),
    "rpts": lambda d: rpts_section(d.gold, d.preds, d.rpts),
    "best-of-n": _best_of_n,
    "correction": _correction,
}
# the tasks whose sections can be computed on a slice of each chain's steps (the step-type breakdown)
STEP_SLICEABLE = ("critique", "verifier")


# ----------------------------------------------------------------------------- sections, intervals, breakdowns

def section(data: JudgeData, tasks, levels=None) -> dict:
    """Every task's metrics for one judge, with bootstrap intervals on the headline ones.

    `levels` keeps only the registered metrics of those levels (a step-type breakdown: step metrics only).
    A registered metric missing from a task's section is a bug (the registry and the computation drifted
    apart), raised here rather than shown as "–".
    """
    out = {}
    for task in tasks:
        if task not in TASK_SECTIONS:
            raise KeyError(f"task {task!r} is registered in eval/tasks.py but has no section in TASK_SECTIONS")
        out[task] = TASK_SECTIONS[task](data)
        missing = [m.key for m in T.metrics_for([task]) if not T.has(out, m)]
        if missing:
            raise KeyError(f"task {task!r} computed no {missing}, which eval/tasks.py registers")
    add_intervals(out, data, tasks)
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
    (`runner.step_kinds`)."""
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


def _breakdown(data: JudgeData, tasks, field: str, spec: dict) -> dict:
    out = {}
    for value in spec["values"]:
        if field in STEP_FIELDS:
            part = data.steps(field, value)
            out[value] = section(part, [t for t in tasks if t in STEP_SLICEABLE], levels=spec["levels"])
        else:
            keep = [i for i, c in enumerate(data.gold) if c.get(field) == value]
            shown = [t for t in tasks if any(m.level in spec["levels"] for m in T.metrics_for([t]))]
            out[value] = section(data.chains(keep), shown)
    return out


def compute_metrics(gold: list[dict], answers: dict, config: EvalConfig, matcher=None) -> dict:
    """metrics.json: per judge, every registered metric of `config.tasks` overall and per breakdown value, with counts.

    answers[judge] holds what the judge answered: "predictions", one per gold chain in gold order (empty when no
    task needs critiques); "picks", the ShiftCheck records (each with `group_id`); "verifier", its verifier answers
    (`verifier.read`; None when it has none); "corrections", its corrected answers (`correction.run`; None without
    a corrector). Of `config`, the tasks, RPTS's settings (the trees are on the gold chains, `rpts_tree.attach`),
    the threshold sweep's split and best-of-n's subsets count. `matcher` is the explanation matcher, built (a
    `judge_matcher.LLMJudgeMatcher`, say) or a name of `MATCHERS`; None: `config.matcher`.
    """
    matcher = config.matcher if matcher is None else matcher
    match = MATCHERS[matcher]() if isinstance(matcher, str) else matcher
    tasks = config.tasks
    sweep = {"dev_fraction": sw.DEFAULT_DEV_FRACTION, "seed": sw.DEFAULT_SEED, **(config.sweep or {})}
    best_of_n = {"max_subsets": bon.DEFAULT_MAX_SUBSETS, "seed": bon.DEFAULT_SEED, **(config.best_of_n or {})}
    # one split for every judge and every breakdown: a question chooses thresholds or is tested, never both
    dev = sw.dev_groups((c["group_id"] for c in gold), sweep["dev_fraction"], sweep["seed"])
    options = {"dev": dev, "best_of_n": best_of_n}
    plan = {field: spec for field, spec in breakdown_plan(gold).items()
            if any(m.level in spec["levels"] for m in T.metrics_for(tasks))}
    judges = {}
    for name, answered in answers.items():
        preds = answered["predictions"]
        matches = explanation_matches(gold, preds, match) if preds else []
        data = JudgeData(gold, preds, answered["picks"], match, matches, answered.get("verifier"), config.rpts,
                         answered.get("corrections"), options)
        judges[name] = {"overall": section(data, tasks),
                        "breakdowns": {field: _breakdown(data, tasks, field, spec) for field, spec in plan.items()}}
    return {"tasks": list(tasks), "matcher": match.name, "n_chains": len(gold),
            "n_steps": sum(len(c["steps"]) for c in gold), "n_questions": len({c["group_id"] for c in gold}),
            "bootstrap": bootstrap_settings(), "breakdowns": plan, "judges": judges,
            "sweep": {**sweep, "n_dev_questions": len(dev), "dev_questions": sorted(dev)}, "best_of_n": best_of_n}
