"""The tasks of `stepcritic eval` and every metric each one reports: the single list the rest follows.

Each metric is registered once here with its task, its key (where `metrics.json` holds it, a dotted path
inside the task's section), its direction, what it is aggregated over and its column header.
`results.compute_metrics` computes the sections of the tasks asked and checks that every registered key of
those tasks is there; `report` draws its tables from this list; docs/metrics.md is generated from it (`metrics_doc`).
A metric that is not registered is not advertised, and a registered one cannot go missing unnoticed.

A new task adds a `Task`, its `Metric`s and its section function in `results.TASK_SECTIONS`; the runner, the
command line and the report pick it up from here.

Only the standard library (and `metrics`, `process`, `pairwise`, `best_of_n`, `sweep`, `verifier` and
`data_prep.prompts`, themselves stdlib at the top) is imported: `stepcritic eval --help` reads the task names from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from stepcritic.data_prep.prompts import CHAIN_LEVEL_TASKS
from stepcritic.eval import best_of_n as BON
from stepcritic.eval import metrics as M
from stepcritic.eval import pairwise as PW
from stepcritic.eval import process as P
from stepcritic.eval import sweep as S
from stepcritic.eval.verifier import TABLE_2_ORDER


@dataclass(frozen=True)
class Task:
    name: str
    needs: str        # what the runner asks each judge for: "critiques" (one per chain), "picks" (ShiftCheck),
    #                   "pairwise" (a scorer's critiques, a generative judge's choice of each pair in both orders),
    #                   "verifier" (the answers to every verifier task, `eval/verifier.py`) or "corrections"
    #                   (critiques, then a corrector's answers after them, `eval/correction.py`)
    description: str
    default: bool = True  # run when `--tasks` is not given; off for tasks that multiply a judge's requests


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

    @property
    def ci_key(self) -> str:
        return f"{self.key}_ci"


TASKS: dict[str, Task] = {t.name: t for t in (
    Task("critique", "critiques", "every step of every chain judged (VISCO's critique, MiCEval's correlations)"),
    Task("choice", "critiques", "the chains of one question ranked by the judge's chain scores (MiCEval App. D.1)"),
    Task("shiftcheck", "picks", "\"which chain is best?\" asked under every circular shift of the options (CMMU)"),
    # opt-in: nine more prompts per step for every generative judge (about ten times the requests of an API run)
    Task("verifier", "verifier", "MiCEval's nine single-label verifier questions, each where the human labels apply",
         default=False),
    Task("rpts", "critiques", "each chain's reasoning tree scored with the judge's step scores, the RPTS filter and "
         "accuracy before and after it (RPTS)"),
    Task("best-of-n", "critiques", "the chain each judge scores highest among N candidates of a question, against "
         "random pick, majority vote and the oracle, for N = 1, 2, 4, ... (PRM best-of-N selection)"),
    # opt-in: two corrector requests per chain and judge, and a corrector to name
    Task("correction", "corrections", "a corrector revises each chain's answer given the gold critique and given the "
         "judge's own: PCR, NCR and correction gain (VISCO Sec. 3.1.2)", default=False),
    # opt-in: the process benchmarks' scores, read off the same critiques as the critique task
    Task("first-error", "critiques", "each judge's first flagged step against the chain's labelled first error (-1: "
         "none): accuracy on erroneous and on correct chains and their harmonic mean (ProcessBench Sec. 4.1)",
         default=False),
    # opt-in: a generative judge is asked each pair in both orders, two requests more per pair
    Task("pairwise", "pairwise", "reward-model benchmarks' preference items: each judge prefers one of two responses "
         "(higher score, or asked in both orders); accuracy, per category, macro, ACC+ (VL-RewardBench, Multimodal "
         "RewardBench, MM-RLHF-RewardBench)", default=False),
    Task("prmscore", "critiques", "PRMBench's PRMScore: the F1 of finding erroneous steps and of finding correct ones, "
         "weighted equally (PRMBench Sec. 4.1)", default=False),
)}

NO_VERDICTS = "the judge gives no step verdicts, or no scored step is incorrect"
NO_SCORES = "the judge gives no step scores, or the steps are all of one class"
NO_SWEEP = "the judge gives no step scores, no step of the dev questions is incorrect, or no test step is incorrect"

_METRICS = [
    # ------------------------------------------------------------------ critique: leaderboard
    Metric("step_precision", "critique", "step.precision", "Step P", True, "pooled over all steps",
           "precision of flagging incorrect steps (VISCO Sec. 3.1.1)", M.step_f1, "step",
           "the judge gives no step verdicts"),
    Metric("step_recall", "critique", "step.recall", "Step R", True, "pooled over all steps",
           "recall of incorrect steps (VISCO Sec. 3.1.1)", M.step_f1, "step", NO_VERDICTS),
    Metric("step_f1", "critique", "step.f1", "Step F1", True, "pooled over all steps",
           "F1 of flagging incorrect steps, VISCO's F1_s (Sec. 3.1.1); unparseable = not flagged", M.step_f1,
           "step", NO_VERDICTS, headline=True),
    Metric("step_auroc", "critique", "step.auroc", "Step AUROC", True, "pooled over all steps with a score",
           "ROC AUC of finding incorrect steps from the judge's step scores (threshold-free)", M.step_auroc,
           "step", NO_SCORES, headline=True),
    Metric("answer_f1", "critique", "answer.f1", "Answer F1", True, "pooled over chains",
           "F1 of flagging incorrect final answers, VISCO's F1_a (Sec. 3.1.1)", M.answer_f1, "chain",
           "the judge gives no answer verdicts, or no answer is incorrect", headline=True),
    Metric("explanation_f1", "critique", "explanation.f1", "Expl. F1 ({matcher})", True,
           "pooled over steps, fractional true positives",
           "step F1 counting a hit only as far as the explanation matches the reference error, VISCO's F1_e "
           "(Sec. 3.1.1)", M.explanation_f1, "step",
           "the judge writes no explanations, or the data has no reference critiques"),
    Metric("viscore", "critique", "viscore", "VISCore", True, "geometric mean of answer, step and explanation F1",
           "VISCO's holistic critique score (Sec. 3.1.1)", M.viscore, "chain",
           "any of answer, step or explanation F1 is undefined", headline=True),
    Metric("invalid_rate", "critique", "invalid_rate", "Invalid %", False, "mean over the judge's outputs",
           "share of outputs that could not be read (MiCEval Sec. 6.1: per output, not per chain)",
           M.output_invalid_rate, "chain", "no output was asked for", headline=True),
    Metric("somers_d_step", "critique", "correlation.step.d", "Somers' D step", True,
           "over steps scored by human and judge",
           "Somers' D(judge step score | human step score), MiCEval Sec. 6.2", M.somers_d, "step",
           "the judge gives no step scores, or the human scores are constant"),
    Metric("somers_d_chain", "critique", "correlation.chain.d", "Somers' D chain", True,
           "over chains with a human good/bad label and a judge chain score",
           "Somers' D(judge chain score | human MCoT label), MiCEval Sec. 6.2 and App. D.1", M.somers_d, "chain",
           "the judge gives no chain score and no step verdicts, or the human labels are constant"),
    # ------------------------------------------------------------------ critique: diagnostics
    Metric("step_macro_f1", "critique", "step.macro_f1", "Step macro-F1", True,
           "mean of the two classes' F1, pooled over all steps",
           "VisualProcessBench's macro F1 over incorrect and correct steps", M.step_macro_f1, "step",
           "the judge gives no step verdicts, or the steps are all of one class", table="diagnostics"),
    Metric("flagged_rate", "critique", "error_propagation.predicted_incorrect_rate", "Flagged %", None,
           "share of steps with a gold label",
           "share of steps the judge calls incorrect; against the gold share, VISCO's reluctance to say "
           "\"incorrect\" (Sec. 4.2)", M.error_propagation, "step", "no step has a gold label",
           table="diagnostics"),
    Metric("gold_incorrect_rate", "critique", "error_propagation.gold_incorrect_rate", "Gold incorrect %", None,
           "share of steps with a gold label", "share of steps that are incorrect (the data, not the judge)",
           M.error_propagation, "step", "no step has a gold label", table="diagnostics"),
    Metric("propagation_bias", "critique", "error_propagation.propagation_bias", "Propagation bias", None,
           "ratio of two odds ratios over non-first steps",
           "odds ratio of flagging after an earlier flag, judge over gold; 1 is ideal, above 1 is VISCO's "
           "exaggerated propagation (Sec. 4.2, Fig. 12)", M.error_propagation, "chain",
           "the judge never (or always) flags, or the gold table has an empty row or column",
           table="diagnostics", scale=1),
    Metric("spearman_step", "critique", "correlation.step.rho", "Spearman step", True,
           "over steps scored by human and judge", "Spearman's rho of judge and human step scores",
           M.spearman, "step", "either side is constant", table="diagnostics"),
    Metric("spearman_chain", "critique", "correlation.chain.rho", "Spearman chain", True,
           "over chains with a human label and a judge score", "Spearman's rho of judge chain scores and the "
           "human good/bad label", M.spearman, "chain", "either side is constant", table="diagnostics"),
    Metric("somers_d_description", "critique", "correlation.step_description.d", "Somers' D desc. steps", True,
           "over description (and both) steps", "step-level Somers' D on description steps, MiCEval App. D.3",
           M.somers_d, "step", "no description step has both scores, or their human scores are constant",
           table="diagnostics"),
    Metric("somers_d_reasoning", "critique", "correlation.step_reasoning.d", "Somers' D reas. steps", True,
           "over reasoning (and both) steps", "step-level Somers' D on reasoning steps, MiCEval App. D.3",
           M.somers_d, "step", "no reasoning step has both scores, or their human scores are constant",
           table="diagnostics"),
    Metric("somers_d_rpts_chain", "critique", "correlation.chain_rpts.d", "Somers' D RPTS chain", True,
           "over chains with annotated premises", "Somers' D of the judge's RPTS against the human RPTS "
           "(RPTS Sec. 3, tree-weighted step scores)", M.rpts_chain, "chain",
           "no chain has its premises annotated, or the judge gives no step scores", table="diagnostics"),
    Metric("step_sweep_threshold", "critique", "step.sweep.threshold", "Dev threshold", None,
           "chosen on the dev questions' steps", "the P(incorrect) threshold (1 - step score) with the best step F1 on "
           "the dev split of the questions (`--sweep-dev`), the candidates being the dev scores", S.threshold_sweep,
           "step", "the judge gives no step scores, or no step of the dev questions is incorrect (or none is left to "
           "test)", table="sweep", scale=1),
    Metric("step_sweep_f1", "critique", "step.sweep.f1", "Step F1 @ dev thr.", True,
           "pooled over the steps of the other (test) questions",
           "VISCO's step F1 on the test questions, flagging a step when 1 - its score reaches the dev threshold: "
           "the best-F1 threshold never chosen on the steps it is scored on", S.threshold_sweep, "step",
           NO_SWEEP, table="sweep"),
    Metric("step_sweep_f1_default", "critique", "step.sweep.f1_default", "Step F1 own verdicts (test)", True,
           "pooled over the same test steps", "step F1 of the judge's own verdicts on the same test steps, for "
           "comparison with the swept threshold", S.threshold_sweep, "step", NO_SWEEP, table="sweep"),
    Metric("brier", "critique", "calibration.brier", "Brier", False, "mean over steps with a probability",
           "Brier score of the judge's p_incorrect against the gold step labels (calibration)", M.calibration,
           "step", "the judge gives no step probabilities, or the steps are all of one class",
           table="diagnostics", scale=1),
    # ------------------------------------------------------------------ choice
    Metric("choice_ranking_accuracy", "choice", "accuracy", "Choice rank.", True,
           "mean over questions with a correct and an incorrect chain",
           "share of questions whose top-scored chain is fully correct; a tie scores its share of correct "
           "chains (MiCEval App. D.1)", M.choice_ranking_accuracy, "group",
           "no question has both a correct and an incorrect chain, or the judge scores no chain", headline=True),
    # ------------------------------------------------------------------ ShiftCheck
    Metric("circular_accuracy", "shiftcheck", "circular_accuracy", "ShiftCheck acc", True,
           "mean over complete shift groups with a correct option",
           "right under every circular shift of the options (CMMU ShiftCheck)", M.shiftcheck, "group",
           "no question has exactly one fully correct option", headline=True),
    Metric("consistency", "shiftcheck", "consistency", "Consistency", True, "mean over complete shift groups",
           "the same option content chosen under every shift (CMMU)", M.shiftcheck, "group",
           "no question has two or more chains"),
    Metric("bias_rate", "shiftcheck", "bias_rate", "BiasRate", False,
           "variance over positions of failed 4-option questions",
           "CMMU's BiasRate: variance of the pick percentages (0-100 scale) per position", M.shiftcheck, "group",
           "no 4-option question was failed", scale=1),
]
# ------------------------------------------------------------------ verifier (MiCEval Sec. 6.1, Table 2's columns)
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
_METRICS += [
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
# ------------------------------------------------------------------ RPTS (`eval/rpts.py`): the judge as step scorer
NO_RPTS = "no chain has a tree (premises in the data, or a --tree-builder) and a step score from the judge"
NO_RPTS_HUMAN = "no chain has a tree, human step scores and a score from the judge"
_METRICS += [
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
# ------------------------------------------------------------------ best-of-N (`eval/best_of_n.py`)
NO_QUESTIONS = "no question has two or more chains with a known answer label"
BON_SELECTORS = {  # selector: (column, what picks)
    "chain": ("BoN chain score", "the judge's chain score (a reward model's, a generative judge's rating, a "
              "critique's share of steps judged correct)"),
    "min": ("BoN min", "the lowest of the chain's step scores (the usual PRM aggregation)"),
    "mean": ("BoN mean", "the mean of the chain's step scores"),
    "last": ("BoN last", "the score of the chain's final step"),
}
BON_REFERENCES = {  # reference: (column, what it is)
    "random": ("Random pick", "expected accuracy of a uniform pick among the chains (the share of right answers)",
               BON.random_accuracy),
    "majority": ("Majority vote", "accuracy of the most frequent final answer among the chains (self-consistency), "
                 "ties shared", BON.majority_accuracy),
    "oracle": ("Oracle", "share of questions with at least one right chain: the ceiling of any selector",
               BON.oracle_accuracy),
}
_BON_OVER = "mean over questions with two or more chains of known answer label, each with all its chains"
_METRICS += [
    Metric(f"bon_{selector}", "best-of-n", f"full.{selector}", display, True, _BON_OVER,
           f"accuracy of the answer of the chain picked by {what}; a tie for the top shares its expected accuracy",
           BON.pick_accuracy, "group",
           f"{NO_QUESTIONS}, or the judge gives no {'chain' if selector == 'chain' else 'step'} score",
           table="best_of_n", headline=selector == "chain")
    for selector, (display, what) in BON_SELECTORS.items()
] + [
    # the same for every judge (they do not depend on its scores): no direction, nothing bolded
    Metric(f"bon_{ref}", "best-of-n", f"full.{ref}", display, None, _BON_OVER, what, fn, "group",
           NO_QUESTIONS + (", or the chains of a question give no final answer" if ref == "majority" else ""),
           table="best_of_n")
    for ref, (display, what, fn) in BON_REFERENCES.items()
]
# ------------------------------------------------------------------ correction (`eval/correction.py`)
NO_CORRECTOR = "the judge has no corrector (give --corrector, or use a generative judge)"
_CORRECTION_CRITIQUES = {"gold": ("gold critique", "the data's critique (VISCO's human critique)"),
                         "own": ("own critique", "the judge's own critique")}
_METRICS += [
    m for setting, (short, what) in _CORRECTION_CRITIQUES.items() for m in (
        Metric(f"correction_{setting}_pcr", "correction", f"{setting}.pcr", f"PCR ({short})", True,
               "over chains whose answer was wrong",
               f"share of wrong answers the corrector makes right after {what}, VISCO's PCR (Sec. 3.1.2)",
               M.correction_gain, "chain",
               f"{NO_CORRECTOR}{'' if setting == 'gold' else ', the judge gives no critique'}, or no answer was wrong",
               table="correction"),
        Metric(f"correction_{setting}_ncr", "correction", f"{setting}.ncr", f"NCR ({short})", False,
               "over chains whose answer was right",
               f"share of right answers the corrector makes wrong after {what}, VISCO's NCR (Sec. 3.1.2)",
               M.correction_gain, "chain",
               f"{NO_CORRECTOR}{'' if setting == 'gold' else ', the judge gives no critique'}, or no answer was right",
               table="correction"),
        Metric(f"correction_{setting}_gain", "correction", f"{setting}.gain", f"Gain ({short})", True,
               "PCR - NCR", f"VISCO's correction gain after {what} (Sec. 3.1.2)", M.correction_gain, "chain",
               "PCR or NCR is undefined", table="correction", headline=setting == "own"),
    )
]
# ------------------------------------------------------------------ process benchmarks (`eval/process.py`)
NO_FIRST_ERROR = "the judge gives no step verdicts, or no chain of that kind has a first-error label"
_METRICS += [
    Metric("first_error_accuracy_error", "first-error", "error_accuracy", "FE acc. (error)", True,
           "mean over chains whose first error is labelled",
           "share of erroneous chains whose first flagged step is the labelled first error (ProcessBench Sec. 4.1); "
           "an unreadable output is wrong", P.first_error_accuracy, "chain", NO_FIRST_ERROR),
    Metric("first_error_accuracy_correct", "first-error", "correct_accuracy", "FE acc. (correct)", True,
           "mean over chains with every step labelled correct",
           "share of correct chains in which the judge flags no step (ProcessBench Sec. 4.1); an unreadable output is "
           "wrong", P.first_error_accuracy, "chain", NO_FIRST_ERROR),
    Metric("first_error_f1", "first-error", "f1", "FE F1", True, "harmonic mean of the two accuracies",
           "ProcessBench's F1 (Sec. 4.1, Table 3): 2ab / (a + b) of the accuracy on erroneous (a) and on correct (b) "
           "chains", P.first_error_accuracy, "chain", "either accuracy is undefined", headline=True),
    Metric("prmscore", "prmscore", "prmscore", "PRMScore", True, "pooled over all steps with a gold label",
           "PRMBench's PRMScore (Sec. 4.1): 0.5 F1 of flagging erroneous steps + 0.5 F1 of passing correct ones; a "
           "step without a verdict counts as passed", P.prm_score, "step",
           "the judge gives no step verdicts, or the steps are all of one class", headline=True),
]
# ------------------------------------------------------------------ pairwise (`eval/pairwise.py`)
NO_PAIRS = "no group has two responses of different preference rank, or the judge gives no such score"
_ITEMS = "mean over items (groups of ranked responses), an item the mean over its pairs"
NOT_ASKED = ("the judge scores responses (its choice does not depend on the order), or no pair has both orders "
             "answered")
_METRICS += [
    Metric("pairwise_accuracy", "pairwise", "accuracy", "Pair acc.", True, _ITEMS,
           "share of items whose preferred response the judge prefers (VL-RewardBench's overall accuracy, Multimodal "
           "RewardBench's accuracy); equal scores count half, a generative judge's two orders count half each",
           PW.accuracy, "group", NO_PAIRS, headline=True),
    Metric("pairwise_macro_category", "pairwise", "macro.category", "Pair macro (category)", True,
           "mean of the per-category accuracies", "each category's accuracy counting once, however many items it "
           "holds (VL-RewardBench's macro average accuracy)", PW.accuracy, "group", NO_PAIRS),
    Metric("pairwise_macro_subset", "pairwise", "macro.subset", "Pair macro (subset)", True,
           "mean of the per-subset accuracies", "the same over the data's `subset` (VL-RewardBench's domains: "
           "general, hallucination, reasoning)", PW.accuracy, "group", NO_PAIRS),
    Metric("pairwise_acc_plus", "pairwise", "acc_plus", "ACC+", True, "mean over sets (`set_id`)",
           "share of sets whose every pair the judge gets right, a tie not right (MM-RLHF-RewardBench's ACC+)",
           PW.acc_plus, "group", NO_PAIRS + ", or no item belongs to a set"),
    Metric("pairwise_accuracy_first", "pairwise", "order.first", "Pair acc. (data order)", True,
           "mean over pairs asked in both orders", "accuracy of a generative judge shown the responses in the "
           "data's order (by chain id)", PW.order_stats, "group", NOT_ASKED, table="diagnostics"),
    Metric("pairwise_accuracy_swapped", "pairwise", "order.swapped", "Pair acc. (swapped)", True,
           "mean over pairs asked in both orders", "accuracy of the same judge shown them swapped", PW.order_stats,
           "group", NOT_ASKED, table="diagnostics"),
    Metric("pairwise_flip_rate", "pairwise", "flip_rate", "Pair flip %", False, "mean over pairs asked in both orders",
           "share of pairs whose chosen response changes when the order is swapped (JudgeBench's and CMMU's position "
           "consistency); an unreadable reply is a flip", PW.order_stats, "group", NOT_ASKED, table="diagnostics"),
]
METRICS: dict[str, Metric] = {m.name: m for m in _METRICS}
if len(METRICS) != len(_METRICS) or any(m.task not in TASKS for m in _METRICS):
    raise RuntimeError("metric names must be unique and every metric must belong to a registered task")


def metrics_for(tasks, table: str | None = None, level: str | None = None) -> list[Metric]:
    """The registered metrics of `tasks`, in registry order, optionally of one table or one level."""
    return [m for m in _METRICS if m.task in tasks and (table is None or m.table == table)
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
