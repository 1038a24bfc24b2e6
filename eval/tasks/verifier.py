"""MiCEval's nine single-label verifier questions (Sec. 6.1, Table 2's columns), each where the human labels apply."""

from __future__ import annotations

from stepcritic.data_prep.prompts import CHAIN_LEVEL_TASKS
from stepcritic.eval import metrics as M
from stepcritic.eval import tables
from stepcritic.eval import verifier as V
from stepcritic.eval.tasks.base import Metric, Task, register
from stepcritic.eval.verifier import TABLE_2_ORDER

VERIFIER_COLUMNS = {  # task: (column, MiCEval's question)
    "step_type": ("Step type", "is the step a description, reasoning, or both? (Sec. 2.3)"),
    "description_relevance": ("Desc. relevance", "is a description step relevant to the image, the question, "
                              "both or neither? (Sec. 2.3.1)"),
    "description_correctness": ("Desc. correctness", "is a description step fully correct, partially correct or "
                                "unsupported? (Sec. 2.3.1)"),
    "description_error": ("Desc. error type", "is a wrong description step's error about an entity, an attribute, "
                          "a spatial or a non-spatial relation? (App. B.1)"),
    "logic_relevance": ("Logic relevance", "is a reasoning step relevant to the question? (Sec. 2.3.2)"),
    "logic_correctness": ("Logic correctness", "is a reasoning step logically correct? (Sec. 2.3.2)"),
    "informativeness": ("Informativeness", "does a reasoning step add information, or repeat? (Sec. 2.3.2)"),
    "logic_error": ("Logic error type", "is a wrong reasoning step's error inter-step, intra-step or both? "
                    "(App. B.1)"),
    "chain_correctness": ("MCoT correctness", "is the whole chain good? (Sec. 2.3.3)"),
}
if tuple(VERIFIER_COLUMNS) != TABLE_2_ORDER:
    raise RuntimeError("the verifier columns must follow MiCEval Table 2")
NO_VERIFIER = "the judge cannot answer verifier prompts (score-based judges, baselines), or no {} has its label"
METRICS = [
    Metric(f"verifier_{task}", "verifier", f"{task}.accuracy", display, True,
           "over chains with a human label" if task in CHAIN_LEVEL_TASKS else "over the steps the task applies to",
           f"accuracy of the answers to MiCEval's question \"{what}\", a reply naming no label counted wrong "
           "(App. C.1)", M.verifier_accuracy,
           "chain" if task in CHAIN_LEVEL_TASKS else "step",
           NO_VERIFIER.format("chain" if task in CHAIN_LEVEL_TASKS else "step the task applies to"), table="verifier")
    for task, (display, what) in VERIFIER_COLUMNS.items()
] + [
    Metric("verifier_avg", "verifier", "avg", "Verifier Avg.", True, "mean of the nine task accuracies",
           "MiCEval's Avg. (Table 2), each task counting once", M.verifier_average, "chain",
           "any of the nine accuracies is undefined", table="verifier", headline=True),
    Metric("verifier_invalid_rate", "verifier", "invalid_rate", "Verifier invalid %", False,
           "over every verifier reply", "share of replies that name no label of their task (MiCEval Sec. 6.3, "
           "Table 5: per reply)", M.output_invalid_rate, "chain", NO_VERIFIER.format("step or chain"),
           table="verifier"),
    Metric("somers_d_miceval_chain", "verifier", "miceval_chain.d", "Somers' D MiCEval chain", True,
           "over chains with a human good/bad label and every aspect answered",
           "Somers' D(MiCEval chain score | human MCoT label): the geometric mean over steps of the geometric mean "
           "of a step's aspect answers (1 / 0.5 partial / 0) by its human type, MiCEval Sec. 5 and App. D.4",
           M.somers_d, "chain",
           "the judge cannot answer verifier prompts, no chain has every aspect answered, or the human labels "
           "are constant", table="verifier"),
]


def section(d) -> dict:
    return V.section(d.gold, d.verifier)


def average(data, boot):
    """The bootstrap statistic of MiCEval's Avg. (`intervals`): the nine accuracies, each resampled, averaged."""
    per_task = []
    for task in V.TABLE_2_ORDER:
        scored = V.items(task, data.gold, data.verifier.get(task))
        per_task.append(M.verifier_accuracy([h for _, h, _ in scored], [p for _, _, p in scored],
                                            list(V.VERIFIER_TASKS[task]), [g for g, _, _ in scored],
                                            boot)["accuracy"])
    return M.verifier_average(per_task)


def render(metrics: dict, overall: dict) -> list[str]:
    tasks = metrics["tasks"]
    return ["## Verifier tasks", "",
            "MiCEval's nine single-label questions (Table 2's columns), each asked where the human labels "
            "apply; accuracy with a reply naming no label counted wrong, Avg. their mean, invalid % per "
            "reply. \"–\" for a judge that cannot answer verifier prompts. Somers' D MiCEval chain: the "
            "geometric-mean chain score of the aspect answers against the human good/bad label.", "",
            tables.leaderboard(overall, tasks, metrics["matcher"], tables.columns(tasks, "verifier")), ""]


TASK = register(Task(
    "verifier", "verifier", "MiCEval's nine single-label verifier questions, each where the human labels apply",
    # opt-in: nine more prompts per step for every generative judge (about ten times the requests of an API run)
    default=False, section=section, steps=True, statistics={"verifier_avg": average}, render=render, place=40,
), METRICS)
