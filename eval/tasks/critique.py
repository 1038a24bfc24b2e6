"""The critique task: every step of every chain judged (VISCO's critique F1s, MiCEval's correlations)."""

from __future__ import annotations

from stepcritic.eval import metrics as M
from stepcritic.eval import sweep as S
from stepcritic.eval.tasks.base import Metric, Task, register

NO_VERDICTS = "the judge gives no step verdicts, or no scored step is incorrect"
NO_SCORES = "the judge gives no step scores, or the steps are all of one class"
NO_SWEEP = "the judge gives no step scores, no step of the dev questions is incorrect, or no test step is incorrect"
TASK = Task("critique", "critiques", "every step of every chain judged (VISCO's critique, MiCEval's correlations)")
METRICS = [
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
]
register(TASK, METRICS)
