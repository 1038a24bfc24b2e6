"""Verdict, label and answer-letter parsing, as the papers word their labels.

Each test failed on the code before the fix; the comment at each group says how.
"""

import pytest
from helpers import CannedVerifier, reasoning_chain

from stepcritic.data_prep.critique import parse_critique, parse_label, parse_letter, to_bool
from stepcritic.data_prep.prompts import VERIFIER_TASKS

# ----------------------------------------------------------------------------- verdict and label parsing
# Before: "Partially Correct" read as correct, "Not informative" as informative, "Not correct" as correct.

DESCRIPTION = VERIFIER_TASKS["description_correctness"]  # ("correct", "partial", "unsupported")


@pytest.mark.parametrize("text, labels, expected", [
    ("Partially Correct", DESCRIPTION, "partial"),      # MiCEval's own wording (App. C.2)
    ("Output: Partially Correct", DESCRIPTION, "partial"),
    ("Fully Correct", DESCRIPTION, "correct"),
    ("partly correct: the colour is wrong", DESCRIPTION, "partial"),
    ("Unsupported", DESCRIPTION, "unsupported"),
    ("Not informative", ("informative", "uninformative"), "uninformative"),
    ("The step is non-informative.", ("informative", "uninformative"), "uninformative"),
    ("Not correct", ("correct", "incorrect"), "incorrect"),
    ("This step isn't correct.", ("correct", "incorrect"), "incorrect"),
    ("Not relevant", ("relevant", "irrelevant"), "irrelevant"),
    ("It is not really relevant to the question", ("relevant", "irrelevant"), "irrelevant"),
    ("not incorrect", ("correct", "incorrect"), "correct"),
    ("This step is correct; it does not contradict the image.", ("correct", "incorrect"), "correct"),
    ("Image Relevant", VERIFIER_TASKS["description_relevance"], "image"),
    ("Non-spatial Relationship False", VERIFIER_TASKS["description_error"], "non_spatial"),
    ("Spatial Relationship False", VERIFIER_TASKS["description_error"], "spatial"),
    ("Inter-step Incorrect", VERIFIER_TASKS["logic_error"], "inter"),
    ("Yes", VERIFIER_TASKS["chain_correctness"], "correct"),   # MiCEval's MCoT task answers Yes/No
    ("not fully correct", DESCRIPTION, None),  # negated, and the task has no "incorrect": no answer
])
def test_parse_label_reads_partial_and_negated_wordings(text, labels, expected):
    assert parse_label(text, labels) == expected


@pytest.mark.parametrize("text, labels, expected", [
    ("Partially Correct", DESCRIPTION, "partial"),
    ("**Fully Correct**", DESCRIPTION, "correct"),
    ("Answer: uninformative.", ("informative", "uninformative"), "uninformative"),
    ("No", VERIFIER_TASKS["chain_correctness"], "incorrect"),
    ("Not informative", ("informative", "uninformative"), None),        # outside the label set
    ("The step is partially correct.", DESCRIPTION, None),             # a sentence, not a label
    ("correct or incorrect", ("correct", "incorrect"), None),
    ("", ("correct", "incorrect"), None),
])
def test_strict_label_parsing_counts_anything_outside_the_label_set_as_invalid(text, labels, expected):
    assert parse_label(text, labels, strict=True) == expected


@pytest.mark.parametrize("value, expected", [
    ("Partially Correct", False), ("partially correct", False), ("not correct", False), ("Not Correct.", False),
    ("is not correct", False), ("not incorrect", True), ("Fully Correct", True), ("correct", True),
    ("incorrect", False), ("maybe", None), ("not sure", None),
])
def test_to_bool_reads_negations_and_the_partial_label(value, expected):
    assert to_bool(value) is expected


def test_a_partially_correct_step_in_a_critique_is_flagged():
    parsed = parse_critique('{"steps": [{"step": 1, "correct": "Fully Correct"}, '
                            '{"step": 2, "correct": "Partially Correct"}, {"step": 3, "correct": "not correct"}]}', 3)
    assert parsed.verdicts == [True, False, False] and parsed.valid


@pytest.mark.parametrize("text", [
    '{"steps": [{"step": 1, "correct": false, "explanation": "The}"}, {"step": 2, "correct": true}]}',
    'Here: {"steps": [{"step": 1, "correct": false, "explanation": "{x} is not 3"}, {"step": 2, "correct": true}]}',
])
def test_a_brace_inside_an_explanation_does_not_hide_the_critique(text):
    # Before: objects were found by counting braces, strings included, so this critique was "no JSON found"
    parsed = parse_critique(text, 2)
    assert parsed.valid and parsed.verdicts == [False, True]


def test_verifier_judge_strict_mode_and_fingerprint():
    chain = reasoning_chain(3)
    lenient = CannedVerifier("canned", ["Not correct", "Correct", "The step is correct."], task="logic_correctness")
    (critique,) = lenient.judge_batch([chain])
    assert critique.verdicts == [False, True, True] and critique.valid
    strict = CannedVerifier("canned", ["Not correct", "Correct", "The step is correct."], task="logic_correctness",
                            strict=True)
    (critique,) = strict.judge_batch([chain])
    assert critique.verdicts == [None, True, None] and not critique.valid
    assert critique.extra["n_outputs"] == 3 and critique.extra["n_invalid"] == 2
    # strict is part of what the judge answers; lenient judges keep their old cache keys
    assert strict.fingerprint() != lenient.fingerprint()
    assert "strict" not in lenient.options


# ----------------------------------------------------------------------------- CMMU answer letters
# Before: the first letter mentioned won ("Answer B has a mistake ... So the best is C" read as B).

@pytest.mark.parametrize("text, expected", [
    ("Answer B has a mistake in step 2, and A misreads the image. So the best is C.", 2),
    ("Answer B has a mistake in step 2.\nAnswer A misreads the colour.\nSo the best is C", 2),
    ("A is wrong and B is wrong.\nFinal answer: (D)", 3),
    ("Answer A looks fine at first, but its step 3 is wrong. Answer: B", 1),
    ("B and D both count the shapes wrong; I choose C.", 2),
    ("Option A is careless. The correct answer is D.", 3),
])
def test_parse_letter_takes_the_final_answer(text, expected):
    assert parse_letter(text, 4) == expected
