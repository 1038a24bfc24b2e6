"""MiCEval's verifier tasks (`stepcritic eval --tasks verifier`): what a judge is asked, where its answers are kept,
and the section of `metrics.json` they give.

MiCEval (Sec. 6.1, App. C) asks a verifier nine single-label questions: the type of a step; for a description step
its relevance, correctness and, when it is wrong, the kind of error; for a reasoning step its relevance,
correctness, informativeness and, when it is wrong, the kind of error; and whether the whole MCoT is good. Each is
asked only where the human annotation has its label (`prompts.verifier_target`: a "both" step gets the questions of
both types), one prompt per step, and scored by accuracy with a reply outside the label set counted wrong
(App. C.1). The paper's "Avg." is the mean of the nine accuracies (Table 2); its invalid rate is per reply
(Sec. 6.3, Table 5).

A judge answers through `Judge.verifier(task)`: a judge that asks the prompt (a generative judge in mode=verifier),
or None for a judge that cannot answer it (score-based judges, baselines), whose accuracies are then None ("–"),
never 0. The answers are cached in the judge's own cache folder, under `verifier/`, one JSON-lines file per task
named by the answering judge's fingerprint (the verifier template, the model, every option that changes a reply),
saved one chain at a time as critiques are; `index.json` there records which tasks the judge answers and under
which fingerprint, so a later command's report can read them back.

The five aspect answers also give MiCEval's chain score (Sec. 5): each label put on MiCEval's human scale (1,
0.5 for "partial", 0; Sec. 6.2), a step scored by the geometric mean of the aspects of its human-annotated type
(App. D.4 uses the human types; Sec. 5.2 a model's) and the chain by the geometric mean of its steps. Its
Somers' D against the chain's human good/bad label is MiCEval's chain-level correlation (Table 3, "Step,
MiCEval").

The top level imports only the standard library and stdlib-only modules: `eval/tasks/verifier.py` reads the task order
from here.
"""

from __future__ import annotations

import json
import os

from stepcritic.data_prep.prompts import CHAIN_LEVEL_TASKS, VERIFIER_TASKS, verifier_target
from stepcritic.eval import metrics as M
from stepcritic.eval.cache import JsonlLog, is_judgment, write_json_atomic
from stepcritic.eval.judges.generative import VERDICT_LABELS
from stepcritic.eval.judging import judge_chains

# MiCEval Table 2's columns, in its order: step type; description relevance, correctness, error types; logic
# relevance, correctness, informativeness, error types; MCoT
TABLE_2_ORDER = ("step_type", "description_relevance", "description_correctness", "description_error",
                 "logic_relevance", "logic_correctness", "informativeness", "logic_error", "chain_correctness")
STEP_TASKS = tuple(t for t in TABLE_2_ORDER if t not in CHAIN_LEVEL_TASKS)
if set(TABLE_2_ORDER) != set(VERIFIER_TASKS):
    raise RuntimeError("TABLE_2_ORDER must list every task of prompts.VERIFIER_TASKS")
# the verifier task behind each aspect score of `metrics.miceval_chain_score`
ASPECTS = {"description_correctness": "description_correct", "description_relevance": "description_relevant",
           "logic_correctness": "logic_correct", "logic_relevance": "logic_relevant",
           "informativeness": "informative"}
INDEX = "index.json"


# ----------------------------------------------------------------------------- gold

def targets(chain: dict) -> tuple[dict, list[dict]]:
    """The human label of every task: ({chain-level task: label}, per step {step task: label}); None where the
    task does not apply to the chain or step, or its label is missing."""
    return ({t: verifier_target(t, chain, None) for t in CHAIN_LEVEL_TASKS},
            [{t: verifier_target(t, chain, i) for t in STEP_TASKS} for i in range(len(chain["steps"]))])


# ----------------------------------------------------------------------------- asking and caching

class _Log:
    """What `judging.judge_chains` writes to: one task's answers, in the place of a judge's critiques."""

    def __init__(self, path: str, shard: str | None = None):
        self.critiques = JsonlLog(path, "chain_id", shard=shard)


def _task_file(folder: str, task: str, fingerprint: str) -> str:
    return os.path.join(folder, "verifier", f"{task}-{fingerprint}.jsonl")


def ask(judge, dataset, gold: list[dict], folder: str, progress: bool, shard: str | None = None,
        owner: bool = True) -> dict:
    """Ask `judge` (through `judge.verifier(task)`) every task on the chains its cache in `folder` (the judge's
    cache folder) lacks. Returns, per task, the counts of `judging.judge_chains` (None for a task it cannot answer),
    whose `failures` are the chains left unanswered (no reply came back: not saved, asked again next run). `shard`
    and `owner` are a rank's (`cache.JudgeCache`): its answers go to its own files, and only rank 0 writes the index."""
    answering = {task: judge.verifier(task) for task in TABLE_2_ORDER}
    index = {task: None if j is None else j.fingerprint() for task, j in answering.items()}
    os.makedirs(os.path.join(folder, "verifier"), exist_ok=True)
    if owner:
        write_json_atomic(os.path.join(folder, "verifier", INDEX), index)
    counts = {}
    for task, asked in answering.items():
        if asked is None:
            counts[task] = None
            continue
        log = _Log(_task_file(folder, task, index[task]), shard)
        try:
            counts[task] = judge_chains(asked, dataset, gold, log, progress)
        finally:
            log.critiques.close()
    return counts


def read(folder: str, gold: list[dict]) -> dict | None:
    """A judge's answers from its cache folder: {task: one record per gold chain, or None where the judge cannot
    answer the task}. A record is {"labels": the label read per step (the chain-level task: a one-item list), None
    where nothing was asked or the reply was unreadable}. None when the folder lacks a current answer of any
    chain (never asked, or asked about other chains)."""
    try:
        with open(os.path.join(folder, "verifier", INDEX)) as f:
            index = json.load(f)
    except (OSError, ValueError):
        return None
    answers = {}
    for task in TABLE_2_ORDER:
        if task not in index:
            return None
        if index[task] is None:
            answers[task] = None
            continue
        cached = JsonlLog(_task_file(folder, task, index[task]), "chain_id").load()
        if any(not is_judgment(cached.get(c["chain_id"])) or cached[c["chain_id"]].get("digest") != c["digest"]
               for c in gold):
            return None
        answers[task] = [{"labels": (cached[c["chain_id"]].get("extra") or {}).get("labels")} for c in gold]
    return answers


# ----------------------------------------------------------------------------- scoring

def _label(record: dict | None, position: int):
    labels = (record or {}).get("labels")
    return labels[position] if isinstance(labels, list) and position < len(labels) else None


def items(task: str, gold: list[dict], records: list[dict] | None) -> list[tuple]:
    """(group_id, human label, judge's label) for every chain or step the task applies to."""
    if task in CHAIN_LEVEL_TASKS:
        pairs = [(c["group_id"], c["verifier"][task], _label(r, 0))
                 for c, r in zip(gold, records or [None] * len(gold))]
    else:
        pairs = [(c["group_id"], s["verifier"][task], _label(r, i))
                 for c, r in zip(gold, records or [None] * len(gold)) for i, s in enumerate(c["steps"])]
    return [p for p in pairs if p[1] is not None]


def aspect_score(task: str, label: str | None) -> float | None:
    """A verifier label on MiCEval's human scale (Sec. 6.2): 1 for the task's good labels, 0.5 for "partial"
    (partially correct), 0 otherwise; None for no label."""
    if label not in VERIFIER_TASKS[task]:
        return None
    return 1.0 if label in VERDICT_LABELS[task] else 0.5 if label == "partial" else 0.0


def chain_scores(gold: list[dict], answers: dict) -> list[float | None]:
    """MiCEval's MCoT score of every chain from the judge's aspect answers (`metrics.miceval_chain_score`, mode
    "type", with the human step types); None where an aspect its steps need is missing or unreadable."""
    scores = []
    for k, c in enumerate(gold):
        steps = [{"type": s["type"], **{key: aspect_score(task, _label((answers.get(task) or [None] * len(gold))[k], i))
                                        for task, key in ASPECTS.items()}}
                 for i, s in enumerate(c["steps"])]
        scores.append(M.miceval_chain_score(steps, mode="type"))
    return scores


def section(gold: list[dict], answers: dict | None) -> dict:
    """The verifier section of one judge: accuracy (with invalid rate and per-class F1) per task, their mean (the
    paper's Avg.), the invalid rate over every reply, and the MiCEval chain score's correlation with the human
    chain labels. Everything is None for a judge that cannot answer (`answers` None, or None for a task)."""
    out: dict = {"answers": answers is not None and any(r is not None for r in answers.values())}
    n_outputs = n_invalid = 0
    for task in TABLE_2_ORDER:
        records = None if answers is None else answers.get(task)
        scored = items(task, gold, records)
        if records is None:
            out[task] = {"accuracy": None, "invalid_rate": None, "per_class_f1": {}, "macro_f1": None,
                         "n": len(scored)}
            continue
        out[task] = M.verifier_accuracy([g for _, g, _ in scored], [p for _, _, p in scored],
                                        list(VERIFIER_TASKS[task]))
        n_outputs += len(scored)
        n_invalid += sum(p not in VERIFIER_TASKS[task] for _, _, p in scored)
    out["avg"] = M.verifier_average([out[t]["accuracy"] for t in TABLE_2_ORDER])
    out["n_outputs"], out["n_invalid"] = n_outputs, n_invalid
    out["invalid_rate"] = M.output_invalid_rate([(n_outputs, n_invalid)])
    human = [None if c["chain_correct"] is None else float(c["chain_correct"]) for c in gold]
    judge = chain_scores(gold, answers) if out["answers"] else [None] * len(gold)
    somers = M.somers_d(human, judge, pvalue=False)
    out["miceval_chain"] = {"d": somers["d"], "rho": M.spearman(human, judge, pvalue=False)["rho"], "n": somers["n"]}
    return out


def slice_chains(answers: dict | None, keep: list[int]) -> dict | None:
    if answers is None:
        return None
    return {t: None if r is None else [r[i] for i in keep] for t, r in answers.items()}


def slice_steps(answers: dict | None, kept: list[tuple[int, list[int]]]) -> dict | None:
    """The answers about some steps of some chains (`kept`: (chain index, its step indices)); the chain-level
    task's answers stay whole."""
    if answers is None:
        return None
    out = {}
    for task, records in answers.items():
        if records is None or task in CHAIN_LEVEL_TASKS:
            out[task] = None if records is None else [records[k] for k, _ in kept]
        else:
            out[task] = [{"labels": [_label(records[k], i) for i in idx]} for k, idx in kept]
    return out
