"""`--matcher judge:SPEC`, VISCO's LLM-judged explanation matching: the judge is shown the question,
the chain and every reference critique of the step, asked once per explained true positive, its replies cached."""

import json
import os
import re

import pytest
from helpers import as_text, chain, check_golden, step

from stepcritic import cli as stepcritic_cli
from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval import judge_matcher, metrics
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.judges.generative import GenerativeJudge, Reply
from stepcritic.eval.runner import EvalError, evaluate
from stepcritic.testing.fake_openai_server import FakeOpenAIServer


class CountMatcher(GenerativeJudge):
    """Says yes when the critic's explanation shares a word of four letters or more with a reference."""

    kind = "test-count-matcher"
    needs_images = False
    asked: list = []

    def generate(self, prompts):
        replies = []
        for prompt in prompts:
            (message,) = prompt.messages
            text = message["content"][0]["text"]
            type(self).asked.append(text)
            references = re.findall(r"(?m)^- (.*)$", text)
            explanation = text.split("and explained:\n", 1)[1].split("\n", 1)[0]
            words = lambda t: {w for w in re.findall(r"\w{4,}", t.lower())}  # noqa: E731
            same = any(words(explanation) & words(r) for r in references)
            replies.append(Reply(text=f"Comparing.\nVerdict: {'yes' if same else 'no'}"))
        return replies


class ExplainingCritic(Judge):
    """Flags every wrong step (and one right one) with a fixed explanation per chain."""

    kind = "test-explaining-critic"
    needs_images = False
    EXPLANATIONS = {"a": "The shape is a square, not a circle.", "b": "The colour should be green."}

    def judge_batch(self, chains):
        out = []
        for c in chains:
            flags = [s["correct"] and (c["chain_id"], i) != ("a", 0) for i, s in enumerate(c["steps"])]
            out.append(Critique(c["chain_id"], flags, answer_correct=c["answer_correct"],
                                explanations=[None if f else self.EXPLANATIONS[c["chain_id"]] for f in flags]))
        return out


def two_chains():
    refs = ["The picture shows a square, not a circle.", "It is a square."]
    a = chain("a", answer="red", steps=[step("The image shows one square."),
                                        step("The image shows a circle.", correct=False, explanations=refs)])
    b = chain("b", answer="blue", answer_correct=False, steps=[
        step("The image shows one circle."),
        step("The circle is blue.", correct=False, explanations=["The circle is red."])])
    return [validate_chain(c, c["chain_id"]) for c in (a, b)]


@pytest.fixture
def chains_dir(tmp_path):
    save_chains(two_chains(), str(tmp_path / "chains"))
    CountMatcher.asked = []
    return str(tmp_path / "chains")


def run(chains_dir, out, matcher=f"judge:py:{__name__}.CountMatcher"):
    return evaluate(chains_dir, [ExplainingCritic("critic")], out, tasks=["critique"], matcher=matcher,
                    progress=False, log=lambda line: None)


def test_the_judge_sees_the_question_the_chain_and_every_reference_and_decides_the_match(chains_dir, tmp_path):
    result = run(chains_dir, str(tmp_path / "out"))
    # asked for the two flagged wrong steps only (a's step 1 is flagged but right: nothing to match)
    assert len(CountMatcher.asked) == 2
    prompt_a = next(p for p in CountMatcher.asked if "not a circle" in p)
    for text in ("Question: What colour is the shape?", "Step 1: The image shows one square.",
                 "Step 2: The image shows a circle.", "Final answer: red", "Step 2 is wrong",
                 "- The picture shows a square, not a circle.", "- It is a square."):
        assert text in prompt_a
    explanation = result["judges"]["critic"]["overall"]["critique"]["explanation"]
    # a's explanation matches its references, b's ("green") does not: tp 1 of 2 wrong steps, 3 steps flagged
    assert explanation["matcher"] == f"judge:py:{__name__}.CountMatcher"
    assert explanation["tp"] == 1.0 and explanation["recall"] == 0.5
    assert explanation["precision"] == pytest.approx(1 / 3)
    assert result["matcher_requests"] == {"asked": 2, "cached": 0, "failed": 0, "unparsed": 0}
    report = open(tmp_path / "out" / "report.md").read()
    assert f"Expl. F1 (judge:py:{__name__}.CountMatcher)" in report and "VISCO's LLM judge): 2 requests" in report


def test_replies_are_cached_by_content(chains_dir, tmp_path):
    out = str(tmp_path / "out")
    first = run(chains_dir, out)
    second = run(chains_dir, out)
    assert len(CountMatcher.asked) == 2
    assert second["matcher_requests"] == {"asked": 0, "cached": 2, "failed": 0, "unparsed": 0}
    assert (first["judges"]["critic"]["overall"]["critique"]["explanation"]
            == second["judges"]["critic"]["overall"]["critique"]["explanation"])
    [folder] = os.listdir(os.path.join(out, "cache", "matches"))
    keys = [json.loads(line)["key"] for line in open(os.path.join(out, "cache", "matches", folder, "matches.jsonl"))]
    assert len(set(keys)) == 2
    # another explanation of the same step is another question
    ExplainingCritic.EXPLANATIONS["b"] = "The circle is red, says the image."
    try:
        third = evaluate(chains_dir, [ExplainingCritic("critic-2", version=2)], out, tasks=["critique"],
                         matcher=f"judge:py:{__name__}.CountMatcher", progress=False, log=lambda line: None)
    finally:
        ExplainingCritic.EXPLANATIONS["b"] = "The colour should be green."
    assert third["matcher_requests"] == {"asked": 1, "cached": 3, "failed": 0, "unparsed": 0}  # both judges' items
    assert len(CountMatcher.asked) == 3
    assert third["judges"]["critic-2"]["overall"]["critique"]["explanation"]["tp"] == 2.0
    assert third["judges"]["critic"]["overall"]["critique"]["explanation"]["tp"] == 1.0  # read back, unchanged


def test_lexical_stays_the_default_and_a_batch_matcher_is_asked_only_for_explained_hits():
    items = [{"gold": False, "pred": False, "explanation": "x", "references": ["r"]},
             {"gold": False, "pred": True, "explanation": None, "references": ["r"]},
             {"gold": True, "pred": False, "explanation": "y", "references": []},
             {"gold": False, "pred": False, "explanation": None, "references": ["r"]}]

    class Batch:
        name = "batch"
        seen = []

        def match_items(self, asked):
            self.seen.extend(asked)
            return [1.0] * len(asked)

    matcher = Batch()
    assert metrics.explanation_match_scores(items, matcher) == [1.0, 0.0, None, 0.0]
    assert matcher.seen == [items[0]]
    from stepcritic.eval import cli

    assert cli.make_parser().parse_args(["--chains", "c", "--judge", "j", "--out", "o"]).matcher == "lexical"


def test_explanation_match_prompt_golden():
    item = {"question": "What colour is the shape?", "steps": ["The image shows one circle.", "The circle is blue."],
            "final_answer": "blue", "step_index": 1, "references": ["The circle is red, not blue.", "It is red."],
            "explanation": "The colour is wrong: the circle is red."}
    messages = judge_matcher.match_messages(item)
    check_golden("explanation_match", as_text(messages))
    assert all(part["type"] == "text" for part in messages[0]["content"])  # text only, as in VISCO


def test_cli_matcher_judge_through_the_fake_server(tmp_path, capsys):
    save_chains(two_chains(), str(tmp_path / "chains"))
    with FakeOpenAIServer() as server:
        spec = f"openai:fake,base_url={server.base_url},concurrency=2"
        code = stepcritic_cli.main(["eval", "--chains", str(tmp_path / "chains"), "--judge", spec, "--out",
                                    str(tmp_path / "out"), "--tasks", "critique", "--matcher", f"judge:{spec}",
                                    "--no-progress"])
        matcher_prompts = [t for t in server.prompt_texts() if 'reads exactly "Verdict: yes"' in t]
    assert code == 0
    # the fake critic flags step 2 of each chain ("The colour is wrong."), which matches; both steps 2 are wrong
    assert len(matcher_prompts) == 2
    with open(tmp_path / "out" / "metrics.json") as f:
        explanation = json.load(f)["judges"][spec]["overall"]["critique"]["explanation"]
    assert explanation["tp"] == 2.0 and explanation["f1"] == 1.0 and explanation["matcher"] == f"judge:{spec}"
    capsys.readouterr()
    argv = ["eval", "--chains", str(tmp_path / "chains"), "--judge", "majority", "--out", str(tmp_path / "bad"),
            "--no-progress", "--matcher"]
    with pytest.raises(SystemExit):  # argparse: "judge:" names no judge
        stepcritic_cli.main(argv + ["judge:"])
    assert "invalid choice" in capsys.readouterr().err
    for bad, message in (("judge:nope:x", "unknown judge kind"), ("judge:majority", "not a generative judge")):
        assert stepcritic_cli.main(argv + [bad]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, (bad, err)
    assert not os.path.exists(tmp_path / "bad" / "cache")  # refused before judging


def test_a_matcher_that_is_not_generative_is_refused(tmp_path):
    with pytest.raises(EvalError, match="not a generative judge"):
        judge_matcher.build("judge:always-correct", str(tmp_path))
    assert isinstance(judge_matcher.build("lexical", str(tmp_path)), metrics.ExplanationMatcher)
