"""`stepcritic eval --tasks rpts`, RPTS as a whole evaluation.

Trees from the data's premises (synthetic chains, offline) and from a scripted tree builder (chains without
premises, malformed answers counted and never fatal, answers cached); per-step scores from the judge, from RPTS's
own scorer or from agreement with reference clues; the RPTS filter with accuracy before and after it, the visual /
textual split and the sensitivity grid, in metrics.json and the report.
"""

import json
import os
import re

import helpers
import pytest

from stepcritic.data_prep import schema
from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.data_prep.synth import synthesize
from stepcritic.eval import metrics as M
from stepcritic.eval import rpts, rpts_tree
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.judges.generative import GenerativeJudge, Reply
from stepcritic.eval.rpts_tree import TreeError, parse_tree
from stepcritic.eval.runner import build_judge, evaluate
from stepcritic.eval.tasks import metrics_for


def quiet(line):
    return None


class GoldScorer(Judge):
    """Scores each step by its gold label, wrong on every fifth chain: step scores an RPTS can be built from."""

    kind = "test-gold-scorer"
    needs_images = False

    def judge_batch(self, chains):
        out = []
        for c in chains:
            flip = sum(map(ord, c["chain_id"])) % 5 == 0
            verdicts = [(s["correct"] is not False) != flip for s in c["steps"]]
            out.append(Critique(c["chain_id"], verdicts, p_incorrect=[0.1 if v else 0.8 for v in verdicts]))
        return out


# ----------------------------------------------------------------------------- parsing a builder's answer

GOOD = """Here is the tree.
```json
{"clues": [{"id": "V1", "kind": "visual", "text": "one circle"}, {"id": "v2", "kind": "visual", "text": "red"},
           {"id": "T1", "kind": "textual", "text": "asks for the colour"}],
 "steps": [{"step": 1, "premises": ["V1"]}, {"step": "2", "premises": ["V2", "step 1"]},
           {"step": 3, "premises": [2, "t1"]}]}
```"""


def test_a_builder_answer_becomes_a_tree_of_premises_and_clue_kinds():
    tree = parse_tree(GOOD, 3)
    assert tree["premises"] == [[], [0], [1]]
    assert tree["reads"] == [["visual"], ["visual"], ["textual"]]
    assert tree["clue_refs"] == [["V1"], ["v2"], ["T1"]]
    assert M.step_heights(tree["premises"]) == [1, 2, 3]


def _answer(steps, clues=('{"id": "V1", "kind": "visual", "text": "x"}',)):
    return '{"clues": [%s], "steps": [%s]}' % (", ".join(clues), ", ".join(
        '{"step": %s, "premises": %s}' % (n, json.dumps(p)) for n, p in steps))


@pytest.mark.parametrize("text, kind", [
    ("I cannot do that.", "unreadable"),
    (_answer([(1, ["V1"]), (2, "V1")]), "unreadable"),
    (_answer([(1, ["V1"])], clues=['{"id": "V1", "kind": "smell"}']), "unreadable"),
    (_answer([(1, ["V1"])]), "steps"),                                   # step 2 missing
    (_answer([(1, ["V1"]), (1, ["V1"]), (2, [1])]), "steps"),            # step 1 twice
    (_answer([(1, ["V1"]), (3, [1])]), "steps"),                         # no step 3 in a 2-step chain
    (_answer([(1, ["V9"]), (2, [1])]), "dangling"),                      # a clue never listed
    (_answer([(1, ["V1"]), (2, [7])]), "dangling"),                      # a step that does not exist
    (_answer([(1, ["V1"]), (2, [2])]), "cycle"),                         # a step resting on itself
    (_answer([(1, [2]), (2, [1])]), "cycle"),
    (_answer([(1, [2]), (2, ["V1"])]), "order"),                         # acyclic, but out of order
])
def test_malformed_trees_are_errors_of_a_kind(text, kind):
    with pytest.raises(TreeError) as info:
        parse_tree(text, 2)
    assert info.value.kind == kind and info.value.kind in rpts_tree.ERROR_KINDS


# ----------------------------------------------------------------------------- the metric functions

def test_the_filter_drops_right_answers_with_a_low_rpts_and_keeps_the_denominator():
    result = M.rpts_filter([True, True, False, True, None], [0.9, 0.3, 0.2, None, 0.8], 0.5)
    assert result == {"before": 2 / 3, "after": 1 / 3, "filtered_rate": 0.5, "n": 3, "n_right": 2, "n_filtered": 1}
    assert M.rpts_filter([None], [0.4])["before"] is None


def _gold(steps, answer_correct=True, chain_id="c"):
    return {"chain_id": chain_id, "answer_correct": answer_correct,
            "steps": [{"premises": p, "type": t, "human_score": h} for p, t, h in steps]}


def test_section_weighs_by_height_and_splits_visual_from_textual_steps():
    # two descriptions (height 1) and a conclusion on both (height 2); the judge doubts the second description
    gold = [_gold([([], "description", 1.0), ([], "description", 0.0), ([0, 1], "reasoning", 1.0)])]
    preds = [{"verdicts": [True, True, True], "p_incorrect": [0.0, 0.6, 0.0]}]
    sec = rpts.section(gold, preds, rpts.Settings(lam=0.5))
    # h_f = 2 (the final step): weights 0.5, 0.5, 1 over scores 1, 0.4, 1
    assert sec["mean"] == pytest.approx((0.5 + 0.2 + 1) / 2)
    assert sec["visual"]["mean"] == pytest.approx(0.7) and sec["textual"]["mean"] == pytest.approx(1.0)
    assert sec["gold"]["mean"] == pytest.approx((0.5 + 0 + 1) / 2)
    assert sec["accuracy"]["before"] == 1.0 and sec["accuracy"]["after"] == 1.0
    assert sec["filter_agreement"] == 1.0  # both RPTS reach 0.5: both keep the right answer
    assert rpts.section(gold, preds, rpts.Settings(lam=1.0))["mean"] == pytest.approx(2.4 / 3)
    assert rpts.section(gold, preds, rpts.Settings(lam=0.25, h_f=1))["mean"] == pytest.approx(
        (1 + 0.4 + 0.25) / 2.25)
    grid = sec["sensitivity"]
    assert len(grid) == len(rpts.SENSITIVITY_LAMBDAS) * len(rpts.SENSITIVITY_HEIGHTS)
    assert {"lambda": 0.5, "h_f": "final"}.items() <= next(r for r in grid if r["h_f"] == "final"
                                                           and r["lambda"] == 0.5).items()


def test_a_chain_without_a_tree_has_no_rpts_and_no_tree_is_made_up():
    gold = [_gold([(None, "description", 1.0), (None, "reasoning", 1.0)])]
    sec = rpts.section(gold, [{"verdicts": [True, False], "p_incorrect": None}])
    assert sec["mean"] is None and sec["accuracy"]["after"] is None and sec["trees"]["none"] == 1


# ----------------------------------------------------------------------------- synthetic chains, offline

def test_synthetic_chains_make_their_clues_explicit():
    for chain in synthesize(30, seed=3, image_size=32):
        meta = schema.chain_meta(chain)
        visual = [c["text"] for c in meta["clues"] if c["kind"] == "visual"]
        assert {"kind": "textual", "text": chain["question"]} in meta["clues"]
        for step in chain["steps"]:
            if step["type"] in ("description", "both") and step["description_relevance"] == "both" \
                    and step["informative"] is not False:
                assert (step["text"] if step["correct"] else step["correction"]) in visual
        # every clue is a fact the image supports: no wrong description is one
        wrong = {s["text"] for s in chain["steps"] if s["description_correctness"] in ("partial", "unsupported")}
        assert not wrong & set(visual)


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("rpts")
    save_chains(synthesize(36, seed=5, image_size=32), str(root / "chains"))
    out = str(root / "out")
    judges = [GoldScorer("gold-scorer"), build_judge("always-correct"), build_judge("random,rate=0.3,seed=0")]
    metrics = evaluate(str(root / "chains"), judges, out, tasks=["critique", "rpts"], progress=False, log=quiet)
    with open(os.path.join(out, "report.md")) as f:
        return {"metrics": metrics, "report": f.read(), "root": root, "out": out}


def test_rpts_runs_offline_on_synthetic_chains_with_premises_from_the_data(synthetic_run):
    metrics = synthetic_run["metrics"]
    assert metrics["rpts"]["trees"] == {"data": 36, "builder": 0, "malformed": 0, "none": 0}
    sec = metrics["judges"]["gold-scorer"]["overall"]["rpts"]
    for key in ("before", "after", "filtered_rate"):
        assert sec["accuracy"][key] is not None
    assert sec["accuracy"]["after"] <= sec["accuracy"]["before"]
    assert sec["visual"]["mean"] is not None and sec["textual"]["mean"] is not None
    assert sec["correlation"]["d"] > 0.5 and sec["filter_agreement"] > 0.7
    always = metrics["judges"]["always-correct"]["overall"]["rpts"]
    assert always["mean"] == 1.0 and always["accuracy"]["after"] == always["accuracy"]["before"]
    with open(os.path.join(synthetic_run["out"], "metrics.json")) as f:
        saved = json.load(f)
    assert saved["judges"]["gold-scorer"]["overall"]["rpts"]["accuracy"] == pytest.approx(sec["accuracy"])


def test_the_report_has_the_rpts_table_split_and_sensitivity(synthetic_run):
    report = synthetic_run["report"]
    assert "## RPTS" in report and "lambda 0.5, h_f final, filter RPTS < 0.5." in report
    assert "Trees: 36 from the data's premises" in report
    for m in metrics_for(["rpts"]):
        assert f" {m.display} |" in report, m.name
    assert "`gold-scorer`: mean RPTS / accuracy after the filter" in report
    assert "| lambda | h_f 1 | h_f 2 | h_f 3 | h_f final |" in report


def test_reference_clues_can_score_the_conclusions_read_off_the_image(synthetic_run, tmp_path):
    out = str(tmp_path / "clues")
    metrics = evaluate(str(synthetic_run["root"] / "chains"), [build_judge("always-correct")], out, tasks=["rpts"],
                       rpts=rpts.Settings(clues="lexical"), progress=False, log=quiet)
    assert metrics["rpts"]["clue_scored_steps"] > 0 and metrics["rpts"]["chains_with_reference_clues"] == 36
    # a judge that calls everything right no longer gets 1.0: wrong descriptions match their clue only in part
    assert metrics["judges"]["always-correct"]["overall"]["rpts"]["mean"] < 1.0


# ----------------------------------------------------------------------------- chains without premises

class ScriptedTreeBuilder(GenerativeJudge):
    """Answers the tree prompt by the marker in the question: a good tree, or one malformed answer of each kind."""

    kind = "test-tree-builder"

    def __init__(self, spec="scripted-trees", **options):
        super().__init__(spec, **options)
        self.asked = []

    def generate(self, prompts):
        replies = []
        for prompt in prompts:
            text = prompt.messages[0]["content"][0]["text"]
            assert "Step 1:" in text and not prompt.images  # the chain's text, no image
            self.asked.append(re.search(r"Question: (.*)", text).group(1))
            if "[garbage]" in text:
                replies.append(Reply("no idea"))
            elif "[cycle]" in text:
                replies.append(Reply(_answer([(1, [3]), (2, [1]), (3, [2])])))
            elif "[dangling]" in text:
                replies.append(Reply(_answer([(1, ["V1"]), (2, ["V7"]), (3, [2])])))
            elif "[down]" in text:
                replies.append(Reply(error="HTTP 503: busy"))
            else:
                replies.append(Reply(GOOD))
        return replies


@pytest.fixture
def unannotated(tmp_path):
    """Chains without premises (the hand-made fixtures): four good, and one for each way a builder can fail."""
    chains = helpers.chains(4)
    for marker in ("garbage", "cycle", "dangling", "down"):
        chains.append(helpers.chain(f"bad-{marker}", question=f"What colour is the shape? [{marker}]",
                                    group_id=f"bad-{marker}"))
    path = str(tmp_path / "chains")
    save_chains([validate_chain(c) for c in chains], path)
    return path


def test_a_tree_builder_restates_chains_without_premises_and_malformed_trees_are_counted(unannotated, tmp_path):
    out = str(tmp_path / "out")
    builder = ScriptedTreeBuilder()
    metrics = evaluate(unannotated, [GoldScorer("gold-scorer")], out, tasks=["rpts"], tree_builder=builder,
                       progress=False, log=quiet)
    block = metrics["rpts"]
    assert block["trees"] == {"data": 0, "builder": 4, "malformed": 4, "none": 0}
    assert block["malformed"] == {"unreadable": 2, "steps": 0, "dangling": 1, "cycle": 1, "order": 0}
    assert any("HTTP 503" in e for e in block["malformed_examples"])
    sec = metrics["judges"]["gold-scorer"]["overall"]["rpts"]
    assert sec["n_chains"] == 4 and sec["mean"] is not None and sec["visual"]["mean"] is not None
    with open(os.path.join(out, "report.md")) as f:
        report = f.read()
    assert "4 from the tree builder `scripted-trees`, 4 malformed" in report
    assert "Malformed trees by kind: unreadable 2, dangling 1, cycle 1" in report

    # cached like a judgment: only the failed request is asked again, and the builder is no judge of the folder
    again = ScriptedTreeBuilder()
    metrics = evaluate(unannotated, [GoldScorer("gold-scorer")], out, tasks=["rpts"], tree_builder=again,
                       progress=False, log=quiet)
    assert again.asked == ["What colour is the shape? [down]"] and metrics["rpts"]["builder_requests"]["cached"] == 7
    assert metrics["earlier_judges"] == {"included": [], "left_out": []}


def test_without_premises_or_builder_there_is_no_rpts(unannotated, tmp_path):
    metrics = evaluate(unannotated, [GoldScorer("gold-scorer")], str(tmp_path / "o"), tasks=["rpts"],
                       progress=False, log=quiet)
    assert metrics["rpts"]["trees"]["none"] == 8
    assert metrics["judges"]["gold-scorer"]["overall"]["rpts"]["mean"] is None


# ----------------------------------------------------------------------------- RPTS's own step scorer

class ScriptedScorer(GenerativeJudge):
    """Rates a step 9 unless its conclusion names blue (the fixtures' wrong colour); records the prompts."""

    kind = "test-rpts-scorer"
    needs_images = False

    def generate(self, prompts):
        self.sent = getattr(self, "sent", []) + [p.messages[0]["content"][1]["text"] for p in prompts]
        return [Reply("2" if "Conclusion: So the answer is blue" in p.messages[0]["content"][1]["text"] else "9")
                for p in prompts]


def test_the_rpts_scorer_rates_each_step_against_its_premises_in_the_tree(unannotated, tmp_path):
    from stepcritic.eval.judges.rpts_scorer import RPTSScorerJudge

    inner = ScriptedScorer("scripted-scorer")
    scorer = RPTSScorerJudge(inner)
    metrics = evaluate(unannotated, [scorer], str(tmp_path / "o"), tasks=["rpts"], tree_builder=ScriptedTreeBuilder(),
                       progress=False, log=quiet)
    third = next(t for t in inner.sent if "Conclusion: So the answer is" in t)
    assert "- From the question: asks for the colour" in third and "- Step 2: The circle is red." in third
    first = next(t for t in inner.sent if "Conclusion: The image shows one circle." in t)
    assert "- From the image: one circle" in first and "what it says about the image" in first
    assert len(inner.sent) == 4 * 3  # the four chains with a valid tree, every step; the malformed ones not asked
    sec = metrics["judges"][scorer.name]["overall"]["rpts"]
    assert sec["accuracy"]["before"] == 0.5 and sec["mean"] is not None


# ----------------------------------------------------------------------------- the command line

def test_cli_options_reach_the_run_and_bad_values_are_one_line_errors(tmp_path, capsys):
    from stepcritic import cli as stepcritic_cli

    chains = str(tmp_path / "chains")
    save_chains(synthesize(6, seed=2, image_size=32), chains)
    out = str(tmp_path / "out")
    assert stepcritic_cli.main(["eval", "--chains", chains, "--judge", "always-correct", "--out", out, "--tasks",
                                "rpts", "--rpts-lambda", "0.75", "--rpts-hf", "1", "--rpts-threshold", "0.6",
                                "--no-progress"]) == 0
    with open(os.path.join(out, "metrics.json")) as f:
        assert json.load(f)["rpts"]["settings"] == {"lam": 0.75, "h_f": 1, "threshold": 0.6, "clues": "off"}
    for bad, complaint in ((["--rpts-lambda", "0"], "--rpts-lambda"), (["--rpts-hf", "top"], "--rpts-hf"),
                           (["--tasks", "critique", "--tree-builder", "openai:m"], "--tasks rpts"),
                           (["--tasks", "rpts", "--tree-builder", "majority"], "not a generative judge"),
                           (["--tasks", "rpts", "--rpts-scorer", "majority"], "not a generative judge")):
        assert stepcritic_cli.main(["eval", "--chains", chains, "--judge", "always-correct", "--out", out, *bad,
                                    "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and complaint in err[0], err
