"""Run judges over a chains dataset, recording every judgment durably, then write the results.

`evaluate(config)` is the whole `stepcritic eval` job, in stages that hand their data one way: `make_plan` checks
the `EvalConfig` and loads the chains once; `ask_judges` has each judge judge only the chains (and the questions the
tasks ask, and the verifier questions of `eval/verifier.py`) its cache lacks, streaming the dataset through
`Judge.judge_stream` and saving each critique as it arrives, then reads every answer back from the caches;
`score` computes every task's metrics (`results`); `report` renders them. What a task needs beyond the judges'
answers, its questions, trees or corrector, it declares in its registry entry (`tasks.Task`): nothing here names a
task. A run killed at any moment and started
again with the same arguments finishes the job with exactly one judgment per chain and judge. The report covers
every judge whose cache in the output folder holds a judgment of every chain (and question) asked, not only the
judges of this command.

Its top level imports only the standard library: `stepcritic eval --help` reads `TASKS` from here.
"""

from __future__ import annotations

import gc
import os
import sys
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from stepcritic import distributed
from stepcritic.eval import failures as failed
from stepcritic.eval import pairwise, report, verifier
from stepcritic.eval import tasks as registry
from stepcritic.eval.cache import JsonlLog, JudgeCache, cached_judges, merge_shards, write_jsonl_atomic
from stepcritic.eval.config import DEFAULT_TASKS, EvalConfig  # noqa: F401  (DEFAULT_TASKS: read from here by callers)
from stepcritic.eval.errors import EvalError, FailedRequests
from stepcritic.eval.gold import chain_digest, gold_view, load_dataset  # noqa: F401  (chain_digest: policy.label's)
from stepcritic.eval.judge_matcher import build as build_matcher
from stepcritic.eval.judges.base import Critique, Judge, RequestFailed, best_index
from stepcritic.eval.judges.registry import build_judge  # noqa: F401  (read from here by scripts and the demo)
from stepcritic.eval.judging import batch_rows, is_current, judge_chains
from stepcritic.eval.shiftcheck import OPTION_LETTERS, question_task

TASKS = tuple(registry.TASKS)


def judge_picks(judge: Judge, dataset, questions: list[dict], cache: JudgeCache, progress: bool,
                chain_scores: dict | None = None) -> dict:
    """Ask `judge.pick_best` every shifted question missing from the cache.

    With `chain_scores` (chain_id -> the judge's cached chain score, for a judge that `picks_by_chain_score`)
    each shift is answered from those scores, as `Judge.pick_best` would answer it, without scoring again; a
    question showing a chain that has no judgment (it failed) is left unanswered. A question whose request got
    no answer (`RequestFailed`) is not saved: it is in `failures` ({question_id: error}) and asked again next run.
    """
    from tqdm.auto import tqdm  # loaded when a judge is asked, not for `--help`

    done = cache.picks.load()
    missing = [q for q in questions if done.get(q["question_id"], {}).get("options") != q["options"]]
    if chain_scores is not None:  # nothing to wait for: saved in one write
        answerable = [q for q in missing if all(cid in chain_scores for cid in q["options"])]
        picked = [best_index([chain_scores[cid] for cid in q["options"]]) for q in answerable]
        cache.picks.append([dict(q, prediction=None if k is None else OPTION_LETTERS[k], answered_from="chain_score")
                            for q, k in zip(answerable, picked)])
        return {"cached": len(questions) - len(missing), "judged": 0, "from_chain_scores": len(answerable),
                "failed": 0, "failures": {}}
    index_of = {cid: i for i, cid in enumerate(dataset["chain_id"])}
    # the bar names the tasks whose questions it counts: the pairwise task's are picks too
    asked_for = "+".join(dict.fromkeys(question_task(q) for q in missing))
    bar = tqdm(total=len(missing), desc=f"{judge.name} {asked_for}", unit="question", disable=not progress,
               file=sys.stderr)
    failures: dict[str, str] = {}
    chunk_size = max(1, judge.batch_size)  # questions whose chains are read from the dataset together
    for start in range(0, len(missing), chunk_size):
        chunk = missing[start:start + chunk_size]
        needed = sorted({index_of[cid] for q in chunk for cid in q["options"]})
        rows = {row["chain_id"]: row for row in batch_rows(dataset.select(needed)[:])}
        for q in chunk:
            try:
                picked = judge.pick_best([rows[cid] for cid in q["options"]])
            except RequestFailed as e:
                failures[q["question_id"]] = str(e)
                bar.update(1)
                continue
            except Exception as e:
                raise EvalError(f"judge {judge.name!r} failed on {question_task(q)} question {q['question_id']!r}: "
                                f"{type(e).__name__}: {e}") from e
            letter = OPTION_LETTERS[picked] if picked is not None and 0 <= picked < len(q["options"]) else None
            cache.picks.append([dict(q, prediction=letter)])  # saved as soon as it is answered
            bar.update(1)
    bar.close()
    return {"cached": len(questions) - len(missing), "judged": len(missing) - len(failures),
            "failed": len(failures), "failures": failures}


# ----------------------------------------------------------------------------- the job

def prediction_record(cached: dict, judge_name: str, fingerprint: str, chain_id: str | None = None) -> dict:
    """A cached judgment as predictions.jsonl holds it; `chain_id`, the gold chain's own id (the same string),
    spares a copy of it per chain."""
    critique = Critique.from_json(cached)
    return {"chain_id": critique.chain_id if chain_id is None else chain_id, "judge": judge_name,
            "fingerprint": fingerprint,
            "verdicts": critique.verdicts, "p_incorrect": critique.p_incorrect,
            "explanations": critique.explanations, "answer_correct": critique.answer_correct,
            "chain_score": critique.chain_score, "valid": critique.valid, "error": critique.error,
            "raw": critique.raw, "extra": critique.extra}


def critiques_wanted(judge: Judge, wants_critiques: bool, pairwise_scores: bool) -> bool:
    """Whether `judge` is asked for a critique of every chain: when a task asked reads every judge's critiques
    (`Plan.wants_critiques`), or, with `pairwise_scores`, when it answers the pairwise questions from its chain
    scores. A generative judge is asked the pairs themselves: its critiques would be read by no metric."""
    return wants_critiques or (pairwise_scores and judge.picks_by_chain_score())


def run_judge(judge: Judge, dataset, gold: list[dict], questions: list[dict], out_dir: str,
              wants_critiques: bool, progress: bool, wants_verifier: bool = False,
              pairwise_scores: bool = False, world: distributed.World = distributed.ONE_PROCESS) -> dict:
    """Judge (and ask) what this judge's cache lacks. Returns {"fingerprint", "dir": its cache folder, "run": the
    counts, "failures": {"chains": {chain_id: error}, "questions": {question_id: error}}}; `read_back` then reads
    its results for the chains that are reported. `wants_critiques` and `pairwise_scores` are the plan's
    (`critiques_wanted`); under several ranks, what this rank judges goes to its own cache shard (`world.shard`)."""
    wants_critiques = critiques_wanted(judge, wants_critiques, pairwise_scores)
    fingerprint = judge.fingerprint()
    cache = JudgeCache(out_dir, judge.cache_name, fingerprint, shard=world.shard, owner=world.main)
    run: dict = {"critiques": None, "picks": None}
    failures: dict = {"chains": {}, "questions": {}}
    try:
        if wants_critiques:
            run["critiques"] = judge_chains(judge, dataset, gold, cache, progress)
            failures["chains"].update(run["critiques"].pop("failures"))
        if questions:
            scores = None
            if wants_critiques and judge.picks_by_chain_score():
                cached = cache.critiques.load()
                scores = {g["chain_id"]: cached[g["chain_id"]].get("chain_score") for g in gold
                          if is_current(cached.get(g["chain_id"]), g)}
            run["picks"] = judge_picks(judge, dataset, questions, cache, progress, scores)
            failures["questions"].update(run["picks"].pop("failures"))
        if wants_verifier:
            run["verifier"] = verifier.ask(judge, dataset, gold, cache.dir, progress, world.shard, world.main)
            for task, counts in run["verifier"].items():
                for chain_id, error in (counts.pop("failures") if counts else {}).items():
                    failures["chains"].setdefault(chain_id, f"verifier {task}: {error}")
    finally:
        cache.close()
    return {"fingerprint": fingerprint, "dir": cache.dir, "run": run, "failures": failures}


def read_back(folder: str, name: str, fingerprint: str, gold: list[dict], questions: list[dict],
              wants_critiques: bool, wants_verifier: bool, pairwise_scores: bool = False) -> dict | None:
    """A judge's results from its cache folder: {"fingerprint", "predictions" (one per gold chain, in order; none
    when its critiques are not wanted), "picks" (one per question), "verifier" (`verifier.read`)}; None when the
    cache lacks a current judgment of some chain or question. With `pairwise_scores` (`critiques_wanted`) a judge
    whose cached pairwise answers came from its chain scores needs its critiques, one asked the pairs does not: the
    cache says which, for a judge of an earlier command that is not built again."""
    picks: dict = {}
    if questions:
        by_qid = {q["question_id"]: q for q in questions}
        for record in JsonlLog(os.path.join(folder, "picks.jsonl"), "question_id").records():
            q = by_qid.get(record["question_id"])
            if q is not None:
                picks[q["question_id"]] = _sharing(record, q)
    if pairwise_scores and any(p.get("task") == pairwise.TASK and p.get("answered_from") == "chain_score"
                               for p in picks.values()):
        wants_critiques = True
    # each chain's latest judgment as its prediction (None: not a current judgment), made as the log is read, so
    # that only one cached record is held at a time
    latest: dict = {}
    if wants_critiques:
        by_id = {g["chain_id"]: g for g in gold}
        for record in JsonlLog(os.path.join(folder, "critiques.jsonl"), "chain_id").records():
            g = by_id.get(record["chain_id"])
            if g is not None:
                latest[g["chain_id"]] = (prediction_record(record, name, fingerprint, g["chain_id"])
                                         if is_current(record, g) else None)
    answers = verifier.read(folder, gold) if wants_verifier else None
    if ((wants_critiques and not all(latest.get(g["chain_id"]) is not None for g in gold))
            or any(picks.get(q["question_id"], {}).get("options") != q["options"] for q in questions)
            or (wants_verifier and answers is None)):
        return None
    return {"fingerprint": fingerprint,
            "predictions": [latest[g["chain_id"]] for g in gold] if wants_critiques else [],
            "picks": [picks[q["question_id"]] for q in questions], "verifier": answers}


def _sharing(record: dict, like: dict) -> dict:
    """`record` with the values it has equal to `like`'s taken from `like`: a cached ShiftCheck answer repeats its
    question (options, ids), and read back it would hold a second copy of every one of those strings and lists."""
    return {k: like[k] if k in like and like[k] == v else v for k, v in record.items()}


def earlier_runs(out_dir: str, judges: list[Judge], gold: list[dict], questions: list[dict],
                 wants_critiques: bool, wants_verifier: bool = False,
                 pairwise_scores: bool = False) -> tuple[dict, list[str]]:
    """The judges an earlier command left in `out_dir`'s cache, read back for the report: those whose cache
    holds a current judgment of every chain (and ShiftCheck question) asked now. A judge of this command
    supersedes its older caches (same name, another fingerprint); of several older caches of one name the one
    last used counts; with `wants_verifier`, its verifier answers (`verifier.read`) must cover every chain too, and
    with `pairwise_scores` its critiques only if it answered the pairs from its chain scores (`read_back`).
    Returns (results as `read_back` gives them, names left out for an incomplete cache)."""
    current = {j.cache_name for j in judges} | {j.name for j in judges}
    latest: dict[str, dict] = {}
    for entry in cached_judges(out_dir):
        if entry["judge"] not in current and entry["used"] >= latest.get(entry["judge"], {"used": -1})["used"]:
            latest[entry["judge"]] = entry
    runs, left_out = {}, []
    for name, entry in sorted(latest.items()):
        found = read_back(entry["dir"], name, entry["fingerprint"], gold, questions, wants_critiques, wants_verifier,
                          pairwise_scores)
        if found is None:
            left_out.append(name)
        else:
            runs[name] = dict(found, run={"critiques": None, "picks": None, "earlier_command": True})
    return runs, left_out


def evaluate(config: EvalConfig | str, *args, **kwargs) -> dict:
    """Judge, cache, and write predictions.jsonl, metrics.json, report.md and plots/ under `config.out_dir`.

    Requests that got no answer (`eval/failures.py`) stop the job with `FailedRequests` once every judge has run,
    before any result is written; with `config.allow_failures` the chains and questions they leave unjudged are left
    out of every judge's metrics and named in the report.

    `evaluate(chains, judges, out_dir, tasks=..., ...)`, the call of earlier versions that scripts still make, takes
    `EvalConfig`'s fields as arguments.
    """
    if not isinstance(config, EvalConfig):
        config = EvalConfig(config, *args, **kwargs)
    elif args or kwargs:
        raise TypeError("evaluate(config) takes no other argument: set them in the EvalConfig")
    return _evaluate(config)


@dataclass
class Plan:
    """What an evaluation asks, worked out from its config before any judge is asked: the tasks asked (`tasks`, their
    registry entries in registry order), the chains (`plain` without images; `decoded` with them, None when no judge
    and no task shows a model the images), their gold labels, the questions the tasks ask each judge to pick an option
    of (`Task.questions`), and whether the tasks need every judge's critiques and verifier answers.
    `pairwise_scores`: the pairwise task is asked and no other task reads every judge's critiques, so only the judges
    that answer the pairs from their chain scores are asked for critiques (`critiques_wanted`)."""

    tasks: list
    plain: Any
    decoded: Any
    gold: list[dict]
    questions: list[dict]
    wants_critiques: bool
    wants_verifier: bool
    pairwise_scores: bool = False


def make_plan(config: EvalConfig) -> Plan:
    """The config checked and the chains loaded, before any judge is asked: bad input fails here (`EvalError`)."""
    judges = config.judges
    unknown = set(config.tasks) - set(TASKS)
    if unknown:
        raise EvalError(f"unknown task(s) {sorted(unknown)}; choose from {list(TASKS)}")
    names = [j.name for j in judges]
    if not judges or len(set(names)) != len(names):
        raise EvalError(f"give one or more judges with distinct names, got {names}")
    tasks = [task for name, task in registry.TASKS.items() if name in config.tasks]
    registry.check_options(config.tasks, given_options(config))
    for task in (t for t in tasks if t.check is not None):
        task.check(config)
    plain = load_dataset(config.chains, decode_images=False, limit=config.limit)
    if len(plain) == 0:
        raise EvalError(f"chains: {config.chains} holds no chains")
    shows_images = any(j.needs_images for j in judges) or any(t.images for t in tasks)
    decoded = load_dataset(config.chains, True, config.limit) if shows_images else None
    needs = {task.needs for task in tasks}
    gold = gold_view(plain, verifier_targets="verifier" in needs)
    questions = [q for task in tasks if task.questions is not None for q in task.questions(gold)]
    try:
        os.makedirs(config.out_dir, exist_ok=True)
    except OSError as e:
        raise EvalError(f"output folder {config.out_dir}: {e.strerror}") from None
    wants_critiques = bool(needs & {"critiques", "corrections"})
    return Plan(tasks, plain, decoded, gold, questions, wants_critiques=wants_critiques,
                wants_verifier="verifier" in needs, pairwise_scores="pairwise" in needs and not wants_critiques)


def given_options(config: EvalConfig) -> set[str]:
    """The options of `config` that serve one task alone (`Task.options`), by their command-line flags."""
    given = {"--corrector": config.corrector is not None, "--tree-builder": config.tree_builder is not None,
             "--rpts-scorer": any(hasattr(j, "bind_trees") for j in config.judges)}
    return {flag for flag, on in given.items() if on}


@dataclass
class Answers:
    """What the judges answered, narrowed to what is reported: `runs` by judge name (this command's judges and those
    an earlier command left in the output folder, as `read_back` gives them), the chains kept (`gold`, at
    `positions` of the dataset) and the questions kept once failed requests are left out, and what the report says
    of the failures, of earlier commands' judges and what the tasks prepared before judging (`Task.prepare`: RPTS's
    trees), by task name."""

    runs: dict
    gold: list[dict]
    positions: list[int]
    questions: list[dict]
    failed: dict | None
    earlier: list[str]
    left_out: list[str]
    prepared: dict


def ask_judges(config: EvalConfig, plan: Plan) -> Answers | None:
    """Every judge asked what its cache lacks (after what the tasks prepare first: RPTS's trees); failed requests stop
    here with `FailedRequests` unless `config.allow_failures`. Under several ranks (`config.world`) each asks its share
    (`ask_on_ranks`) and only rank 0 goes on, with the answers of all; the others get None."""
    judges, out_dir, progress, log = config.judges, config.out_dir, config.progress, config.log
    gold, questions = plan.gold, plan.questions
    wants_critiques, wants_verifier = plan.wants_critiques, plan.wants_verifier
    if config.world is not None and config.world.size > 1 and (config.tree_builder is not None or config.jobs > 1):
        raise EvalError("--tree-builder and --jobs run in one process: start the command without torchrun or "
                        "accelerate launch for them (a builder's trees, once cached, serve a run of several ranks)")
    prepared = {task.name: task.prepare(config, gold, plan.plain) for task in plan.tasks if task.prepare is not None}
    pairwise_scores = plan.pairwise_scores
    world = config.world or distributed.ONE_PROCESS
    if world.main:  # what a killed run of any number of ranks saved, in the logs every rank reads
        merge_shards(os.path.join(out_dir, "cache"))
    args = (gold, questions, out_dir, wants_critiques, progress, wants_verifier, pairwise_scores)
    if world.size > 1:
        runs = ask_on_ranks(config, plan, world)
        if runs is None:
            return None
    elif config.jobs > 1 and len(judges) > 1:
        from stepcritic.eval import parallel

        runs = parallel.run_judges(run_judge, load_dataset, judges, config.jobs, config.chains, config.limit,
                                   {True: plan.decoded, False: plan.plain}, args)
    else:
        runs = {judge.name: run_judge(judge, plan.decoded if judge.needs_images else plan.plain, *args)
                for judge in judges}
    failures = {name: run.pop("failures") for name, run in runs.items()}
    if failed.any_failed(failures) and not config.allow_failures:
        for name, run in runs.items():
            log(report.counts_line(name, run["run"]))
        raise FailedRequests(failed.message(failures, len(gold), len(questions)))
    failed_section = failed.summary(failures, gold, questions) if failed.any_failed(failures) else None
    n_chains, n_questions = len(gold), len(questions)
    gold, positions, questions = failed.keep(gold, questions, failures)
    if not gold:
        raise FailedRequests(f"no chain is left to report, every one failed for some judge: "
                             f"{failed.message(failures, n_chains, n_questions, allowed=True)}")
    by_name = {judge.name: judge for judge in judges}
    for name, run in runs.items():
        found = read_back(run.pop("dir"), name, run["fingerprint"], gold, questions,
                          critiques_wanted(by_name[name], wants_critiques, pairwise_scores), wants_verifier)
        if found is None:
            raise EvalError(f"judge {name!r}: its cache lacks judgments this command saved; was {out_dir} changed "
                            "during the run?")
        run.update(found)
    earlier, left_out = earlier_runs(out_dir, judges, gold, questions, wants_critiques, wants_verifier,
                                     pairwise_scores)
    if left_out:
        log(f"left out of the report: {', '.join(left_out)} (from earlier commands into {out_dir}; their cache lacks "
            "some of these chains or questions)")
    runs.update(earlier)
    return Answers(runs, gold, positions, questions, failed_section, sorted(earlier), left_out, prepared)


def rank_share(gold: list[dict], questions: list[dict], world: distributed.World,
               batch_size: int = 1) -> tuple[list[int], list[dict]]:
    """This rank's share of the chains (their positions) and questions: whole questions (`group_id`), so that
    choice ranking, best-of-n, pairwise and ShiftCheck see whole groups, dealt out by the steps a judge reads.

    The unit dealt out is a block of the batches one process would ask of a judge of `batch_size` (its chains in
    order, `batch_size` at a time), joined where a question's chains fall in two: each rank then asks the very
    batches one process asks, so that a model whose scores move a little with a batch's padding (a PRM, a critic)
    scores every chain as one process does, and the metrics are the same bytes."""
    size = max(1, batch_size)
    block = list(range((len(gold) + size - 1) // size))  # union-find over the batches, by question

    def root(b: int) -> int:
        while block[b] != b:
            block[b] = block[block[b]]
            b = block[b]
        return b

    first: dict = {}
    for i, g in enumerate(gold):
        a, b = root(first.setdefault(g["group_id"], i // size)), root(i // size)
        block[max(a, b)] = min(a, b)
    work: dict = defaultdict(int)
    for i, g in enumerate(gold):
        work[root(i // size)] += 1 + len(g["steps"])
    mine = distributed.share(world, work)
    positions = [i for i, g in enumerate(gold) if root(i // size) in mine]
    groups = {gold[i]["group_id"] for i in positions}
    return positions, [q for q in questions if q["group_id"] in groups]


def ask_on_ranks(config: EvalConfig, plan: Plan, world: distributed.World) -> dict | None:
    """`run_judge` of every judge on this rank's share (a judge that does not shard, `Judge.shards`, on rank 0 with
    every question), each rank saving to its own cache shards; after every rank is done, rank 0 merges the shards
    and gets every rank's counts added up, as one process would have counted them; the others get None."""
    distributed.barrier(world)  # rank 0 has merged what earlier runs left in shards
    progress = config.progress and world.main  # the bars of several ranks would interleave
    runs = {}
    for judge in config.judges:
        dataset = plan.decoded if judge.needs_images else plan.plain
        if judge.shards:
            positions, questions = rank_share(plan.gold, plan.questions, world, judge.batch_size)
            gold = [plan.gold[i] for i in positions]
            runs[judge.name] = run_judge(judge, dataset.select(positions), gold, questions, config.out_dir,
                                         plan.wants_critiques, progress, plan.wants_verifier, plan.pairwise_scores,
                                         world)
        elif world.main:
            runs[judge.name] = run_judge(judge, dataset, plan.gold, plan.questions, config.out_dir,
                                         plan.wants_critiques, progress, plan.wants_verifier, plan.pairwise_scores,
                                         world)
    distributed.barrier(world)
    every_rank = distributed.gather(world, runs)
    if not world.main:
        return None
    merge_shards(os.path.join(config.out_dir, "cache"))
    return {judge.name: _added([ranks[judge.name] for ranks in every_rank if judge.name in ranks])
            for judge in config.judges}


def _added(values: list):
    """Counts of several ranks added up key by key (the first rank's order); None where a rank had nothing."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    first = present[0]
    if isinstance(first, dict):
        keys = list(dict.fromkeys(k for v in present for k in v))
        return {k: _added([v.get(k) for v in present]) for k in keys}
    if isinstance(first, bool) or not isinstance(first, (int, float)):
        return first  # a fingerprint, a folder: the same on every rank; an error: one rank's (its key is unique)
    return sum(present)


def score(config: EvalConfig, plan: Plan, answers: Answers) -> dict:
    """metrics.json's content: every task's metrics of every judge (`results.compute_metrics`, after what the tasks
    ask once the judges have answered, `Task.ask_after`: the corrector's answers), with what the judges were asked and
    answered."""
    from stepcritic.eval import results  # numpy, for the bootstrap intervals: kept out of `stepcritic eval --help`

    runs, gold, matcher = answers.runs, answers.gold, config.matcher
    judged = {name: {"predictions": r["predictions"], "picks": r["picks"], "verifier": r["verifier"]}
              for name, r in runs.items()}
    asked_after = {}
    for task in (t for t in plan.tasks if t.ask_after is not None):
        by_judge, asked_after[task.name] = task.ask_after(config, gold, runs,
                                                          lambda i: plan.decoded[answers.positions[i]])
        for name, more in by_judge.items():
            judged[name].update(more)
    match = build_matcher(matcher, config.out_dir, config.progress) if isinstance(matcher, str) else matcher
    try:
        metrics = results.compute_metrics(gold, judged, config, match)
    finally:
        if match is not matcher and hasattr(match, "close"):
            match.close()
    for name, result in runs.items():
        metrics["judges"][name].update(run=result["run"], fingerprint=result["fingerprint"])
    metrics["earlier_judges"] = {"included": answers.earlier, "left_out": answers.left_out}
    metrics["failed"] = answers.failed
    metrics.update(answers.prepared)  # what the tasks prepared before judging, and asked after it, by task name
    if hasattr(match, "requests"):
        metrics["matcher_requests"] = match.requests
    metrics.update(asked_after)
    return metrics


@contextmanager
def _long_lived_data():
    """Python's cycle collector walks every tracked object on its full collections, which come each time the objects
    alive have grown by a quarter: a job building a million dicts (the gold chains, the judgments) then spent more
    time in the collector than in its own work (twice as long in all at 100,000 chains). Within the job, collections
    come after 100,000 new objects instead of 700, and what a stage hands on (the gold chains, the answers) is frozen,
    out of the collector's walks, until the job ends; freed objects are freed as ever, by their reference counts."""
    threshold = gc.get_threshold()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def _evaluate(config: EvalConfig) -> dict | None:
    with _long_lived_data():
        plan = make_plan(config)
        gc.freeze()
        answers = ask_judges(config, plan)
        if answers is None:  # a rank other than 0 under torchrun: rank 0 writes every output
            return None
        plan.plain = None  # read by no later stage: its memory-mapped pages need not stay in memory
        gc.freeze()
        write_jsonl_atomic(os.path.join(config.out_dir, "predictions.jsonl"),
                           (p for run in answers.runs.values() for p in run["predictions"]))
        metrics = score(config, plan, answers)
    report.write_report(metrics, config.out_dir)
    for name in [j.name for j in config.judges] + answers.earlier:
        config.log(report.summary_line(name, metrics["judges"][name]))
    return metrics
