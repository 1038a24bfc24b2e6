"""Prompt rendering (`stepcritic.data_prep.prompts`) and golden snapshots of every packaged template.

Golden snapshots live in tests/golden/*.txt. After an intended change to a template, regenerate them with
    STEPCRITIC_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_prompts.py
and review the diff before committing.
"""

import os

import jinja2
import pytest
from helpers import GOLDEN_DIR, as_text, chain, check_golden, step

from stepcritic.data_prep import critique, prompts, schema


@pytest.fixture(scope="module")
def fixture_chain():
    """A description step, a partly wrong description+inference step, and a wrong inference."""
    return schema.validate_chain(chain(
        "golden", question="What colour is the shape?", answer="blue", answer_correct=False,
        steps=[
            step("The image shows one circle on a white background."),
            step("The circle is blue, so it is a cool colour.", correct=False, type="both",
                 description_correctness="partial", description_errors=["attribute"],
                 explanations=["The circle is red, not blue."]),
            step("Therefore the answer is blue.", correct=False, type="reasoning", logic_error="inter",
                 explanations=["It repeats the wrong colour from step 2."]),
        ]), "golden")


def test_golden_critique(fixture_chain):
    target = prompts.assistant_turn(prompts.critique_target(fixture_chain))
    messages = prompts.critique_messages(fixture_chain) + [target]
    check_golden("critique", as_text(messages))


def test_golden_critique_with_notes(fixture_chain):
    """A note-writing critic's prompt asks for "shows" before each verdict, and its target has it, step by step."""
    target = prompts.assistant_turn(prompts.critique_target(fixture_chain, notes=True))
    check_golden("critique_notes", as_text(prompts.critique_messages(fixture_chain, notes=True) + [target]))


def test_golden_brief_critique_with_check_notes(fixture_chain):
    """The brief critique prompt and its target with check notes: each step copied under "says" before "shows"."""
    target = prompts.assistant_turn(prompts.critique_target(fixture_chain, notes="check"))
    messages = prompts.critique_messages(fixture_chain, "critique_brief", notes="check") + [target]
    check_golden("critique_brief_check_notes", as_text(messages))


@pytest.mark.parametrize("task", list(prompts.VERIFIER_TASKS))
def test_golden_verifier(fixture_chain, task):
    messages = prompts.verifier_messages(task, fixture_chain, 1)
    target = prompts.verifier_target(task, fixture_chain, 1)
    check_golden(f"verifier_{task}", as_text(messages) + f"<<target>>\n{target}\n")


def test_golden_brief_prm_with_notes(fixture_chain):
    """The brief PRM prompt (`prm_brief`): the question without rules, then a step per turn, each answered with its
    note and verdict; the last step comes after the question again."""
    check_golden("prm_brief_notes", as_text(prompts.prm_messages(fixture_chain, "prm_brief", notes=True)))


def test_golden_prm_and_outcome(fixture_chain):
    check_golden("prm", as_text(prompts.prm_messages(fixture_chain)))
    prompt, completion = prompts.outcome_messages(fixture_chain)
    check_golden("outcome", as_text(prompt + completion))


def test_golden_judging_prompts(fixture_chain):
    texts = ("A red circle.", "It is red.", "Red.")
    other = dict(fixture_chain, chain_id="other", final_answer="red",
                 steps=[dict(s, text=t) for s, t in zip(fixture_chain["steps"], texts)])
    check_golden("score", as_text(prompts.score_messages(fixture_chain)))
    check_golden("step_score", as_text(prompts.step_score_messages(fixture_chain, 1)))
    check_golden("step_check", as_text(prompts.step_check_messages(fixture_chain, 1)))
    check_golden("listwise", as_text(prompts.listwise_messages([fixture_chain, other])))
    check_golden("lookback_questions", as_text(prompts.lookback_question_messages(fixture_chain, 1, 3)))
    check_golden("lookback_answer", as_text(prompts.lookback_answer_messages("What colour is the circle?")))
    checks = [{"question": "What colour is the circle?", "answer": "It is red."}]
    check_golden("lookback_final", prompts.lookback_final_text(checks) + "\n")
    check_golden("rpts_tree", as_text(prompts.rpts_tree_messages(fixture_chain)))
    premises = ["From the image: the circle's colour", "Step 1: The image shows one circle on a white background."]
    check_golden("rpts_step", as_text(prompts.rpts_step_messages(fixture_chain, 1, premises, True)))


def test_every_packaged_template_has_a_golden_snapshot():
    snapshots = [name[:-4] for name in os.listdir(GOLDEN_DIR) if name.endswith(".txt")]
    assert prompts.packaged_templates() and all(
        any(s == name or s.startswith(f"{name}_") for s in snapshots) for name in prompts.packaged_templates())


def test_critique_prompt_shows_every_step_and_a_parseable_format(fixture_chain):
    (user,) = prompts.critique_messages(fixture_chain)
    assert user["role"] == "user" and user["content"][0] == {"type": "image"}
    text = user["content"][1]["text"]
    for i, s in enumerate(fixture_chain["steps"], 1):
        assert f"Step {i}: {s['text']}" in text
    assert "Final answer: blue" in text
    # The example shown to the model must be something the project's parser reads.
    assert critique.parse_critique(prompts.CRITIQUE_FORMAT_EXAMPLE, 2).valid


def test_critique_target_round_trips_through_the_parser(fixture_chain):
    parsed = critique.parse_critique(prompts.critique_target(fixture_chain), 3)
    assert parsed.valid
    assert parsed.verdicts == [True, False, False]
    assert parsed.explanations[1] == "The circle is red, not blue."
    assert parsed.answer_correct is False


def test_verifier_tasks_apply_only_where_they_should(fixture_chain):
    description, both, reasoning = 0, 1, 2
    target = lambda task, i: prompts.verifier_target(task, fixture_chain, i)  # noqa: E731
    assert [target("step_type", i) for i in range(3)] == ["description", "both", "reasoning"]
    assert target("description_correctness", description) == "correct"
    assert target("description_correctness", both) == "partial"
    assert target("description_correctness", reasoning) is None
    assert target("description_error", description) is None  # correct description: no error type
    assert target("description_error", both) == "attribute"
    assert target("logic_correctness", description) is None
    assert target("logic_correctness", both) == "incorrect"  # helpers.step sets logic_correct=correct
    assert target("logic_error", reasoning) == "inter"
    assert target("informativeness", reasoning) == "informative"
    assert target("chain_correctness", None) == "incorrect"
    for task, labels in prompts.VERIFIER_TASKS.items():
        for i in range(3):
            assert target(task, i) in (*labels, None)


def test_verifier_prompt_lists_its_labels_and_the_step(fixture_chain):
    text = prompts.verifier_messages("logic_correctness", fixture_chain, 2)[0]["content"][1]["text"]
    assert "correct, incorrect" in text and "Therefore the answer is blue." in text
    assert "Step 1: The image shows one circle" in text  # earlier steps are shown as premises


def test_verifier_rejects_unknown_task_and_bad_index(fixture_chain):
    with pytest.raises(ValueError, match="unknown verifier task 'colour'"):
        prompts.verifier_messages("colour", fixture_chain, 0)
    with pytest.raises(IndexError, match="golden: step_index 3 out of range"):
        prompts.verifier_target("step_type", fixture_chain, 3)


def test_prm_turns_match_step_labels(fixture_chain):
    messages = prompts.prm_messages(fixture_chain)
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3
    assert [m["content"][0]["text"] for m in messages[1::2]] == ["+", "-", "-"]
    assert messages[0]["content"][0] == {"type": "image"}
    assert all(part["type"] == "text" for m in messages[1:] for part in m["content"])  # one image only
    assert "Step 2: The circle is blue" in messages[2]["content"][0]["text"]


def test_prm_prompt_has_the_same_layout_without_labels(fixture_chain):
    scored, trained = prompts.prm_prompt_messages(fixture_chain), prompts.prm_messages(fixture_chain)
    assert [m["content"][0]["text"] for m in scored[1::2]] == [prompts.PRM_POSITIVE] * 3
    assert scored[0::2] == trained[0::2]


def test_prm_needs_step_labels(fixture_chain):
    unlabelled = dict(fixture_chain, steps=[dict(s, correct=None) for s in fixture_chain["steps"]])
    with pytest.raises(schema.SchemaError, match=r"golden, field 'steps\[0\].correct'"):
        prompts.prm_messages(unlabelled)
    assert len(prompts.prm_prompt_messages(unlabelled)) == 6


def test_outcome_prompt_and_completion(fixture_chain):
    prompt, completion = prompts.outcome_messages(fixture_chain)
    assert prompt[0]["content"][0] == {"type": "image"}
    assert "What colour is the shape?" in prompt[0]["content"][1]["text"]
    assert completion[0]["role"] == "assistant"
    assert completion[0]["content"][0]["text"].endswith("Final answer: blue")


def test_empty_steps_name_the_chain_and_field(fixture_chain):
    with pytest.raises(schema.SchemaError, match="golden, field 'steps'"):
        prompts.critique_messages(dict(fixture_chain, steps=[]))


def test_load_template_by_name_and_path(tmp_path, fixture_chain):
    assert set(prompts.packaged_templates()) >= {"critique", "verifier", "prm", "outcome"}
    assert prompts.load_template("critique") is prompts.load_template("critique.j2")
    custom = tmp_path / "mine.j2"
    custom.write_text("Check {{ steps | length }} steps for: {{ question }}")
    rendered = prompts.critique_messages(fixture_chain, str(custom))[0]["content"][1]["text"]
    assert rendered == "Check 3 steps for: What colour is the shape?"
    assert prompts.template_hash(str(custom)) != prompts.template_hash("critique")
    with pytest.raises(FileNotFoundError, match="no_such_template"):
        prompts.load_template("no_such_template")


def test_template_hash_follows_content(tmp_path):
    path = tmp_path / "t.j2"
    path.write_text("A {{ question }}")
    first = prompts.template_hash(str(path))
    path.write_text("B {{ question }}")
    assert prompts.template_hash(str(path)) != first
    assert len(first) == 16


def test_bad_user_templates_fail_loudly(tmp_path, fixture_chain):
    typo = tmp_path / "typo.j2"
    typo.write_text("{{ questoin }}")
    with pytest.raises(jinja2.UndefinedError, match="questoin"):
        prompts.critique_messages(fixture_chain, str(typo))
    broken = tmp_path / "broken.j2"
    broken.write_text("{% if %}")
    with pytest.raises(ValueError, match="syntax error on line 1"):
        prompts.load_template(str(broken))


def test_a_note_writing_prm_is_told_to_write_its_note_and_scored_with_the_same_words(fixture_chain):
    # A model trained to write a note must not be told to reply "with that single symbol only", and the scorer
    # must show it the instructions it was trained with.
    trained = prompts.prm_messages(dict(fixture_chain, steps=[dict(s, correct=True) for s in fixture_chain["steps"]]),
                                   notes=True)
    scored = prompts.prm_prompt_messages(fixture_chain, notes=True)
    first = trained[0]["content"][-1]["text"]
    assert "on a line of its own" in first and "single symbol only" not in first
    assert scored[0::2] == trained[0::2]
    assert "single symbol only" in prompts.prm_prompt_messages(fixture_chain)[0]["content"][-1]["text"]
