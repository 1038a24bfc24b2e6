"""The critique task: every step of every chain judged (VISCO's critique F1s, MiCEval's correlations)."""

from __future__ import annotations

from stepcritic.eval import metrics as M
from stepcritic.eval import plots, tables
from stepcritic.eval import sweep as S
from stepcritic.eval.tasks.base import Metric, Task, register

NO_VERDICTS = "the judge gives no step verdicts, or no scored step is incorrect"
NO_SCORES = "the judge gives no step scores, or the steps are all of one class"
NO_SWEEP = "the judge gives no step scores, no step of the dev questions is incorrect, or no test step is incorrect"
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


def _undefined(result: dict) -> dict:
    return result | {k: None for k in ("precision", "recall", "f1")}


def _correlations(human, judge) -> dict:
    somers = M.somers_d(human, judge, pvalue=False)
    return {"d": somers["d"], "rho": M.spearman(human, judge, pvalue=False)["rho"], "n": somers["n"]}


def _sweep(d) -> dict:
    """`sweep.threshold_sweep` over every step, the questions in `d.settings["dev"]` choosing the threshold (by
    default the split `sweep.dev_groups` draws from these chains' questions)."""
    import numpy as np  # loaded when a judge is scored, not for `stepcritic eval --help`

    dev = d.settings.get("dev")
    if dev is None:
        dev = S.dev_groups(d.view.group_ids())
    g, a, steps = d.cols, d.answers, d.view.steps
    in_dev = np.array([name in dev for name in g.group_names], dtype=bool)[g.group[d.view.step_chain]]
    return S.threshold_sweep(g.correct[steps], a.score[steps], a.verdict[steps], in_dev)


def section(d) -> dict:
    """The critique section of one judge on the chains and steps of `d.view` (`results.JudgeData`)."""
    import numpy as np

    g, a, v = d.cols, d.answers, d.view
    steps, chains = v.steps, v.chains
    gold_steps, pred_steps, judge_steps = g.correct[steps], a.verdict[steps], a.score[steps]
    unread = bool(a.unread[chains].any())  # `scores.gives`: an unreadable output meant to give verdicts
    gives_verdicts = unread or bool((~np.isnan(pred_steps)).any())
    step = M.step_f1(gold_steps, pred_steps)
    if not gives_verdicts:
        step = _undefined(step)
    answer = M.answer_f1(g.answer[chains], a.answer[chains])
    if not (unread or (~np.isnan(a.answer[chains])).any()):
        answer = _undefined(answer)
    explanation = M.explanation_match_f1(gold_steps, pred_steps, a.match[steps]) | {"matcher": d.matcher.name}
    if not a.explained[chains].any():  # the judge kind writes no explanations
        explanation = _undefined(explanation)
    n_outputs, n_invalid = int(a.n_outputs[chains].sum()), int(a.n_invalid[chains].sum())

    macro = M.step_macro_f1(gold_steps, pred_steps) if gives_verdicts else {
        "f1_incorrect": None, "f1_correct": None, "macro_f1": None, "n": 0}
    step = {**step, **{k: macro[k] for k in ("f1_incorrect", "f1_correct", "macro_f1")},
            "auroc": M.step_auroc(gold_steps, judge_steps), "sweep": _sweep(d)}
    human = g.human[steps]
    correlation = {
        "step": _correlations(human, judge_steps),
        # MiCEval App. D.3 reports step-level correlation per step type; a "both" step counts in each
        "step_description": _correlations(np.where(g.describes[steps], human, np.nan), judge_steps),
        "step_reasoning": _correlations(np.where(g.reasons[steps], human, np.nan), judge_steps),
        "chain": _correlations(g.chain_human[chains], a.chain_score[chains]),
        "chain_rpts": {"d": None, "rho": None, "n": 0},
    }
    annotated = chains[g.annotated[chains]] if not v.sliced else chains[:0]
    if len(annotated):  # RPTS needs the premise tree; chains without premise annotations are left out
        on = np.isin(g.step_chain[steps], annotated)
        chain = np.searchsorted(annotated, g.step_chain[steps][on])
        heights = g.heights()[steps][on]
        focus = g.heights()[g.starts[annotated + 1] - 1][chain]  # the final step's height, `metrics.rpts_chain`
        correlation["chain_rpts"] = _correlations(
            *(M.rpts_chains(heights, x[on], chain, focus, M.DEFAULT_RPTS_LAMBDA, len(annotated))
              for x in (human, judge_steps)))

    probability = a.has_probability[v.step_chain] & ~np.isnan(gold_steps) & ~np.isnan(a.p_incorrect[steps])
    return {
        "n_chains": len(chains), "n_outputs": n_outputs, "n_invalid": n_invalid,
        "invalid_rate": M.output_invalid_rate([(n_outputs, n_invalid)]),
        "step": step, "confusion": {"tp": step["tp"], "fp": step["fp"], "fn": step["fn"],
                                    "tn": step["n"] - step["tp"] - step["fp"] - step["fn"]},
        "answer": answer, "explanation": explanation,
        "viscore": M.viscore(answer["f1"], step["f1"], explanation["f1"]),
        "correlation": correlation,
        "error_propagation": M.error_propagation_steps(gold_steps, pred_steps, v.first_steps(), len(chains)),
        "calibration": M.calibration(gold_steps[probability] == 0, a.p_incorrect[steps][probability]),
    }


# the bootstrap statistics of its headline metrics (`intervals`)
def step_f1(data, boot):
    steps = data.view.steps
    return M.step_f1(data.cols.correct[steps], data.answers.verdict[steps], data.step_groups(boot), boot)["f1"]


def step_auroc(data, boot):
    steps = data.view.steps
    return M.step_auroc(data.cols.correct[steps], data.answers.score[steps], data.step_groups(boot), boot)


def answer_f1(data, boot):
    chains = data.view.chains
    return M.answer_f1(data.cols.answer[chains], data.answers.answer[chains], data.chain_groups(boot), boot)["f1"]


def explanation_f1(data, boot):
    steps = data.view.steps
    return M.explanation_match_f1(data.cols.correct[steps], data.answers.verdict[steps], data.answers.match[steps],
                                  data.step_groups(boot), boot)["f1"]


def viscore(data, boot):
    return M.viscore(answer_f1(data, boot), step_f1(data, boot), explanation_f1(data, boot))


def invalid_rate(data, boot):
    import numpy as np

    chains, a = data.view.chains, data.answers
    return M.output_invalid_rate(np.column_stack([a.n_outputs[chains], a.n_invalid[chains]]),
                                 data.chain_groups(boot), boot)


def render(metrics: dict, overall: dict) -> list[str]:
    """The threshold sweep: each judge's step scores thresholded where the dev questions say."""
    tasks = metrics["tasks"]
    sweep = metrics.get("sweep") or {}
    return ["## Threshold sweep", "",
            f"Each judge's step scores flag a step when 1 - score (P(incorrect)) reaches a threshold. The threshold "
            f"with the best step F1 is chosen on the chains of {sweep.get('n_dev_questions', '?')} questions (a share "
            f"of {sweep.get('dev_fraction', '?')}, drawn with seed {sweep.get('seed', '?')}; `--sweep-dev`, "
            "`--sweep-seed`) and scored on the chains of the other questions only, beside the F1 of the judge's own "
            "verdicts on those same chains. The curves (`plots/threshold_sweep.png`) show F1 against the threshold "
            "on both parts.", "",
            tables.leaderboard(overall, tasks, metrics["matcher"], tables.columns(tasks, "sweep")), ""]


def _critiques(metrics: dict) -> dict:
    return {name: r["overall"]["critique"] for name, r in metrics["judges"].items() if "critique" in r["overall"]}


def step_prf(metrics: dict, path: str) -> bool:
    critiques = _critiques(metrics)
    if not critiques:
        return False
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(critiques)), 3.5))
    width = 0.8 / 3
    for k, label in enumerate(("precision", "recall", "f1")):
        xs = [i + (k - 1) * width for i in range(len(critiques))]
        plots.bars(ax, xs, [None if c["step"][label] is None else 100 * c["step"][label] for c in critiques.values()],
                   width, label)
    ax.set_xticks(range(len(critiques)), list(critiques), rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 100)
    ax.set_ylabel("x100 (incorrect step = positive)")
    ax.set_title("Step-level critique")
    ax.legend(fontsize=8)
    plots.save(fig, path)
    return True


def confusion(metrics: dict, path: str) -> bool:
    critiques = _critiques(metrics)
    if not critiques:
        return False
    plt = plots.pyplot()
    fig, axes = plt.subplots(1, len(critiques), figsize=(3.2 * len(critiques), 3.2), squeeze=False)
    for ax, (name, c) in zip(axes[0], critiques.items()):
        cm = c["confusion"]
        table = [[cm["tn"], cm["fp"]], [cm["fn"], cm["tp"]]]  # rows: gold correct / incorrect
        ax.imshow(table, cmap="Blues")
        dark = max(max(row) for row in table) / 2
        for i in range(2):
            for j in range(2):
                ax.text(j, i, str(table[i][j]), ha="center", va="center",
                        color="white" if table[i][j] > dark else "black")
        ax.set_xticks([0, 1], ["judged ok", "flagged"])
        ax.set_yticks([0, 1], ["gold ok", "gold wrong"])
        ax.set_title(name, fontsize=8)
    plots.save(fig, path)
    return True


def somers_d(metrics: dict, path: str) -> bool:
    critiques = _critiques(metrics)
    if not critiques:
        return False
    # a level no judge has a value at (RPTS without premise annotations, say) would only draw empty bars
    levels = sorted({level for c in critiques.values() for level, corr in c["correlation"].items()
                     if corr.get("d") is not None})
    if not levels:
        return False
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(critiques)), 3.5))
    width = 0.8 / len(levels)
    for k, level in enumerate(levels):
        xs = [i + (k - (len(levels) - 1) / 2) * width for i in range(len(critiques))]
        plots.bars(ax, xs, [(c["correlation"].get(level) or {}).get("d") for c in critiques.values()], width, level)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(critiques)), list(critiques), rotation=20, ha="right", fontsize=8)
    ax.set_ylim(-1, 1)
    ax.set_ylabel("Somers' D (judge | human)")
    ax.legend(fontsize=8)
    plots.save(fig, path)
    return True


def calibration(metrics: dict, path: str) -> bool:
    curves = {name: c["calibration"] for name, c in _critiques(metrics).items()
              if (c.get("calibration") or {}).get("brier") is not None}
    if not curves:
        return False
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfect")
    for name, curve in curves.items():
        ax.plot(curve["mean_predicted"], curve["fraction_incorrect"], marker="o",
                label=f"{name} (Brier {curve['brier']:.3f})")
    ax.set_xlabel("predicted P(step incorrect)")
    ax.set_ylabel("observed share incorrect")
    ax.set_title("Calibration")
    ax.legend(fontsize=7)
    plots.save(fig, path)
    return True


def threshold_sweep(metrics: dict, path: str) -> bool:
    """Step F1 against the threshold on P(incorrect), each judge's test chains (solid) and dev chains (dashed), a
    dotted line at the threshold the dev chains chose."""
    curves = {name: c["step"]["sweep"] for name, c in _critiques(metrics).items()
              if (c["step"].get("sweep") or {}).get("curve")}
    if not curves:
        return False
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, (name, sweep) in enumerate(curves.items()):
        color = f"C{k % 10}"
        curve = sweep["curve"]
        for part, style in (("test", "-"), ("dev", "--")):
            ax.plot(curve["thresholds"], [float("nan") if v is None else 100 * v for v in curve[part]], style,
                    color=color, label=f"{name} ({part})", linewidth=1.2)
        ax.axvline(sweep["threshold"], color=color, linestyle=":", linewidth=1)
    ax.set_xlabel("threshold on P(step incorrect) = 1 - step score")
    ax.set_ylabel("step F1 x100")
    ax.set_ylim(0, 100)
    ax.set_title("Threshold sweep (dotted: chosen on dev)")
    ax.legend(fontsize=7)
    plots.save(fig, path)
    return True


TASK = register(Task(
    "critique", "critiques", "every step of every chain judged (VISCO's critique, MiCEval's correlations)",
    section=section, steps=True,
    statistics={"step_f1": step_f1, "step_auroc": step_auroc, "answer_f1": answer_f1, "viscore": viscore,
                "invalid_rate": invalid_rate},
    render=render, place=70,
    plots={"step_prf": step_prf, "confusion": confusion, "somers_d": somers_d, "calibration": calibration,
           "threshold_sweep": threshold_sweep},
    diagnostics="Flagged % vs gold incorrect %: VISCO's reluctance to say \"incorrect\". Propagation bias: odds "
                "ratio of flagging after an earlier flag, judge over gold (1 ideal, > 1 = assumes errors propagate). "
                "Brier: calibration of p_incorrect (lower is better).",
), METRICS)
