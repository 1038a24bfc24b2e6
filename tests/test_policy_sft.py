"""The policy-sft kind (question and image -> a clean chain, one step per line) and the answer rules every stage
shares (`data_prep/answers.py`)."""

import pytest
from datasets import load_from_disk
from helpers import as_text, chain, chains, check_golden, step

from stepcritic.data_prep import answers, build, prompts, schema


def test_golden_policy_prompts():
    clean = schema.validate_chain(chain("golden-policy"), "golden-policy")
    for name in ("policy", "policy_brief"):
        messages = prompts.policy_messages(clean, name) + [prompts.assistant_turn(prompts.policy_target(clean))]
        check_golden(name, as_text(messages))


def test_policy_rows_are_the_clean_chains_with_their_answer_last(tmp_path):
    records = chains(8) + [chain("no-answer-step", group_id="g0", steps=[step("The circle is red.")])]
    stats = build.build_dataset(records, "policy-sft", str(tmp_path / "p"), test_fraction=0.25, seed=0)
    assert stats["chains_skipped"] == {"not_clean": 4} and sum(stats["rows"].values()) == 5
    rows = {r["chain_id"]: r for split in load_from_disk(str(tmp_path / "p")).values() for r in split}
    assert set(rows) == {"g0-ok", "g1-ok", "g2-ok", "g3-ok", "no-answer-step"}
    user, assistant = rows["g0-ok"]["messages"]
    assert [p["type"] for p in user["content"]] == ["image", "text"]
    assert assistant["content"][0]["text"] == "The image shows one circle.\nThe circle is red.\nSo the answer is red."
    # a chain whose steps do not state the answer gets it on a line of its own
    assert rows["no-answer-step"]["messages"][1]["content"][0]["text"] == "The circle is red.\nFinal answer: red"
    assert "policy-sft" in (tmp_path / "p" / "README.md").read_text()


def test_a_build_without_a_clean_chain_says_so(tmp_path):
    with pytest.raises(build.BuildError, match="not labelled correct"):
        build.build_dataset([chain("bad", answer="blue", answer_correct=False)], "policy-sft", str(tmp_path / "p"),
                            test_fraction=0, allow_empty=False)


@pytest.mark.parametrize("text, answer", [
    ("The cross is blue.\nSo the answer is blue.", "blue"),
    ("Step 1: add.\nFinal answer: 12.", "12"),
    ("We get \\boxed{42} in the end.", "42"),
    ('{"answer": "B"}', "B"),
    ("The answer is: (C) red.", "(C) red"),
    ("I am not sure.", None),
])
def test_answer_of_text(text, answer):
    assert answers.answer_of_text(text) == answer


def test_answer_rules():
    assert answers.answers_match("red", "red", "exact") and answers.answers_match(" red.", "red", "exact")
    assert not answers.answers_match("Red", "red", "exact") and not answers.answers_match("red circle", "red", "exact")
    assert answers.answers_match("12.0", "12") and answers.answers_match("1,000", "1000")
    assert answers.answers_match("(B)", "B") and answers.answers_match("B) red", "b")
    assert not answers.answers_match(None, "red") and not answers.answers_match("red", None, "exact")
    assert answers.matching_rule({"source": "synthetic"}) == "exact"
    assert answers.matching_rule({"source": "miceval"}) == "normalised"
    with pytest.raises(ValueError, match="unknown answer rule"):
        answers.answers_match("a", "a", "fuzzy")


def test_policy_text_round_trip():
    text = answers.policy_text(["The circle is red."], "red")
    assert answers.without_final_line(text) == ("The circle is red.", "red")
    assert answers.without_final_line("A.\nSo the answer is red.") == ("A.\nSo the answer is red.", None)
