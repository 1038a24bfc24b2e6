"""RPTS (`eval/rpts.py`): each chain's reasoning tree scored with the judge as step scorer."""

from __future__ import annotations

from stepcritic.eval import metrics as M
from stepcritic.eval import rpts as R
from stepcritic.eval import rpts_tree, tables
from stepcritic.eval.tasks.base import Metric, Task, register

NO_RPTS = "no chain has a tree (premises in the data, or a --tree-builder) and a step score from the judge"
NO_RPTS_HUMAN = "no chain has a tree, human step scores and a score from the judge"
METRICS = [
    Metric("rpts_mean", "rpts", "mean", "RPTS", None, "mean over chains with a tree and a scored step",
           "tree-weighted mean of the step scores, w = lambda^|h_f - h| (RPTS Sec. 3), the judge scoring the steps",
           M.rpts, "chain", NO_RPTS, table="rpts"),
    Metric("rpts_accuracy_before", "rpts", "accuracy.before", "Acc. before", None,
           "over chains with an answer label and an RPTS", "share of chains whose final answer is right",
           M.rpts_filter, "chain", NO_RPTS, table="rpts"),
    Metric("rpts_accuracy_after", "rpts", "accuracy.after", "Acc. after filter", None,
           "over the same chains", "share whose answer is right and whose RPTS reaches the threshold (the paper's "
           "filter, RPTS < 0.5 by default: right for the wrong reasons)", M.rpts_filter, "chain", NO_RPTS,
           table="rpts"),
    Metric("rpts_filtered_rate", "rpts", "accuracy.filtered_rate", "Filtered %", None,
           "over right answers with an RPTS", "share of right answers the filter removes", M.rpts_filter, "chain",
           NO_RPTS + ", or no answer is right", table="rpts"),
    Metric("rpts_visual", "rpts", "visual.mean", "RPTS (V)", None, "mean over chains with a scored visual step",
           "RPTS over the conclusions that read a visual clue (the image) directly, heights from the whole tree "
           "(the paper's V column)", M.rpts, "chain", NO_RPTS + ", or no step reads the image", table="rpts"),
    Metric("rpts_textual", "rpts", "textual.mean", "RPTS (T)", None, "mean over chains with a scored textual step",
           "RPTS over the conclusions that read a textual clue (the question, earlier conclusions) directly "
           "(the paper's T column)", M.rpts, "chain", NO_RPTS + ", or no step reads text", table="rpts"),
    Metric("rpts_gold_mean", "rpts", "gold.mean", "Gold RPTS", None, "mean over chains with a tree and human scores",
           "RPTS of the same trees from the human step scores (the data, not the judge)", M.rpts, "chain",
           "no chain has a tree and human step scores", table="rpts"),
    Metric("rpts_gold_accuracy_after", "rpts", "gold.accuracy_after", "Gold acc. after", None,
           "over chains with an answer label and a gold RPTS", "accuracy after the filter applied to the gold RPTS",
           M.rpts_filter, "chain", "no chain has a tree, human step scores and an answer label", table="rpts"),
    Metric("rpts_filter_agreement", "rpts", "filter_agreement", "Filter agreement", True,
           "over right answers with both RPTS", "share of right answers the judge's filter treats as the gold "
           "filter does (both keep, or both drop)", M.rpts_filter, "chain", NO_RPTS_HUMAN + ", or no answer is right",
           table="rpts"),
    Metric("rpts_somers_d", "rpts", "correlation.d", "Somers' D vs gold RPTS", True, "over chains with both RPTS",
           "Somers' D(judge RPTS | gold RPTS), MiCEval's statistic on RPTS's chain scores", M.somers_d, "chain",
           NO_RPTS_HUMAN + ", or the gold RPTS is constant", table="rpts"),
]


def section(d) -> dict:
    trees = d.cols.memo("rpts trees", lambda: R.Trees(d.cols.chains))
    return R.section(d.gold, d.preds, d.rpts, trees.take(d.view.chains), d.answers.score[d.view.steps])


def render(metrics: dict, overall: dict) -> list[str]:
    """RPTS's table (each judge as the step scorer), then each judge's sensitivity to lambda and h_f."""
    tasks = metrics["tasks"]
    parts = ["## RPTS", "", *R.notes(metrics.get("rpts") or {}),
             tables.leaderboard(overall, tasks, metrics["matcher"], tables.columns(tasks, "rpts")), ""]
    scored = {name: sec["rpts"] for name, sec in overall.items() if sec["rpts"]["mean"] is not None}
    if scored:
        parts += ["Sensitivity (RPTS's study of lambda and h_f), x100:", ""]
    for name, sec in scored.items():
        parts += R.sensitivity_table(name, sec)
    return parts


def prepare(config, gold: list[dict], chains) -> dict:
    """Every chain's tree, before any judge that scores by it (`--rpts-scorer`) is asked; what metrics.json says of the
    trees and of RPTS's settings."""
    settings = config.rpts or R.Settings()
    return {"settings": settings.as_json(), **rpts_tree.attach(
        gold, rpts_tree.step_texts_only(chains), config.out_dir, config.judges, config.tree_builder, settings.clues,
        config.progress)}


TASK = register(Task(
    "rpts", "critiques", "each chain's reasoning tree scored with the judge's step scores, the RPTS filter and "
    "accuracy before and after it (RPTS)",
    section=section, render=render, place=60, prepare=prepare, options=("--tree-builder", "--rpts-scorer"),
), METRICS)
