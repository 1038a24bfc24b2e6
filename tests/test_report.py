"""report.md, metrics.json and plots written by the runner agree with the metrics applied by hand."""

import json
import os

import pytest
from helpers import two_category_chains

from stepcritic.data_prep.schema import save_chains
from stepcritic.eval import metrics as M
from stepcritic.eval.report import leaderboard, render
from stepcritic.eval.runner import build_judge, evaluate

JUDGES = ("always-correct", "random,rate=0.4,seed=3")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    chains = two_category_chains()
    save_chains(chains, str(root / "chains"))
    out = str(root / "out")
    evaluate(str(root / "chains"), [build_judge(s) for s in JUDGES], out, progress=False, log=lambda line: None)
    with open(os.path.join(out, "metrics.json")) as f:
        metrics = json.load(f)
    with open(os.path.join(out, "predictions.jsonl")) as f:
        preds = [json.loads(line) for line in f]
    with open(os.path.join(out, "report.md")) as f:
        report = f.read()
    return {"out": out, "chains": chains, "metrics": metrics, "preds": preds, "report": report}


def test_report_lists_every_judge_and_the_paper_columns(run):
    report = run["report"]
    for name in JUDGES:
        assert f"`{name}`" in report
    for column in ("Step P", "Step R", "Step F1", "Answer F1", "Expl. F1 (lexical@0.5)", "VISCore", "Invalid %",
                   "Somers' D step", "Choice rank.", "ShiftCheck acc", "BiasRate"):
        assert f"| {column} |" in report
    assert "| Propagation bias |" in report  # VISCO's failure-pattern diagnostics
    assert "## By category" in report and "### perception (4 chains)" in report and "### reasoning (4 chains)" in report
    assert "## By step type" in report and "### description (16 steps)" in report  # helpers' chains: 2 types


def test_report_is_rendered_from_metrics_json_alone(run):
    # computing and rendering are apart: the saved numbers redraw the same report without re-scoring
    assert render(run["metrics"]) == run["report"]


def test_metrics_json_equals_the_metric_functions_applied_to_the_predictions(run):
    chains, metrics = run["chains"], run["metrics"]
    for name in JUDGES:
        preds = {p["chain_id"]: p for p in run["preds"] if p["judge"] == name}
        assert len(preds) == len(chains)
        got = metrics["judges"][name]["overall"]
        gold_steps = [s["correct"] for c in chains for s in c["steps"]]
        pred_steps = [v for c in chains for v in preds[c["chain_id"]]["verdicts"]]
        step, expected = got["critique"]["step"], M.step_f1(gold_steps, pred_steps)
        assert {k: step[k] for k in expected} == expected
        assert step["macro_f1"] == M.step_macro_f1(gold_steps, pred_steps)["macro_f1"]
        answer = M.answer_f1([c["answer_correct"] for c in chains],
                             [preds[c["chain_id"]]["answer_correct"] for c in chains])
        assert {k: got["critique"]["answer"][k] for k in answer} == answer
        records = [{"group_id": c["group_id"], "chain_id": c["chain_id"], "chain_correct": c["chain_correct"],
                    "score": preds[c["chain_id"]]["chain_score"]} for c in chains]
        choice = M.choice_ranking_accuracy(records)
        assert {k: got["choice"][k] for k in choice} == choice
        human = [float(c["chain_correct"]) for c in chains]  # MiCEval: the chain's good/bad label
        assert got["critique"]["correlation"]["chain"]["d"] == M.somers_d(
            human, [preds[c["chain_id"]]["chain_score"] for c in chains])["d"]
        assert got["critique"]["correlation"]["chain_rpts"]["n"] == 1  # the one chain with a premise tree
        reasoning = [c for c in chains if c["category"] == "reasoning"]
        by_cat = metrics["judges"][name]["breakdowns"]["category"]["reasoning"]["critique"]["step"]
        expected = M.step_f1([s["correct"] for c in reasoning for s in c["steps"]],
                             [v for c in reasoning for v in preds[c["chain_id"]]["verdicts"]])
        assert {k: by_cat[k] for k in expected} == expected


def test_shiftcheck_numbers_come_from_the_cached_picks(run):
    always = run["metrics"]["judges"]["always-correct"]
    cache_dir = os.path.join(run["out"], "cache")
    [folder] = [d for d in os.listdir(cache_dir) if d.startswith("always-correct-")]
    with open(os.path.join(cache_dir, folder, "picks.jsonl")) as f:
        picks = [json.loads(line) for line in f]
    assert len(picks) == 8  # 4 groups x 2 circular shifts
    expected = json.loads(json.dumps(M.shiftcheck(picks)))
    assert always["overall"]["shiftcheck"] == expected | {"circular_accuracy_ci": [0.0, 0.0]}


def test_plots_are_png_files(run):
    plots = run["metrics"]["plots"]
    assert {"step_prf", "confusion", "shiftcheck_positions", "somers_d", "calibration"} <= set(plots)
    for name in plots:
        with open(os.path.join(run["out"], "plots", f"{name}.png"), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        assert f"plots/{name}.png" in run["report"]


def test_plots_draw_an_undefined_value_as_a_dash_not_a_bar_of_zero(monkeypatch, tmp_path):
    import math

    from stepcritic.eval import plots
    from stepcritic.eval.tasks import critique

    figures = []
    monkeypatch.setattr(plots, "save", lambda fig, path: figures.append(fig))
    step = {"precision": None, "recall": None, "f1": None}  # a reward model: no step verdicts
    metrics = {"judges": {"rm": {"overall": {"critique": {"step": step, "correlation": {}}}},
                          "ok": {"overall": {"critique": {"step": {"precision": 0.5, "recall": 0.5, "f1": 0.5},
                                                          "correlation": {}}}}}}
    assert critique.TASK.plots["step_prf"](metrics, str(tmp_path / "prf.png"))
    ax = figures[0].axes[0]
    heights = [patch.get_height() for patch in ax.patches]
    assert sum(math.isnan(h) for h in heights) == 3 and sorted(h for h in heights if not math.isnan(h)) == [50] * 3
    assert [t.get_text() for t in ax.texts] == ["–"] * 3


def test_leaderboard_bolds_the_best_value_in_the_metrics_direction():
    sections = {
        "a": {"critique": {"step": {"f1": 0.5}, "invalid_rate": 0.10}},
        "b": {"critique": {"step": {"f1": 0.7}, "invalid_rate": 0.30}},
    }
    table = leaderboard(sections, ["critique"], "lexical").splitlines()
    header = [h.strip() for h in table[0].strip("|").split("|")]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")] for line in table[2:]}
    f1, invalid = header.index("Step F1"), header.index("Invalid %")
    assert rows["`b`"][f1] == "**70.0**" and rows["`a`"][f1] == "50.0"
    assert rows["`a`"][invalid] == "**10.0**" and rows["`b`"][invalid] == "30.0"  # lower is better
    assert rows["`a`"][header.index("VISCore")] == "–"
