"""A policy's answer cut into steps: the default conventions, custom splits, and round trips through the ways
MiCEval, VISCO and VisualProcessBench write their chains (hand-made chains in each style, and the repository's own
VisualProcessBench and VisualPRM fixtures)."""

import json
import os
import subprocess
import sys

import pytest
from helpers import MICEVAL_STYLE, VISCO_STYLE, VISUALPROCESSBENCH_STYLE

from stepcritic.rewards.splitting import SENTENCES, split_steps

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


@pytest.mark.parametrize("text, steps", [
    ("Step 1: The image shows a circle.\nStep 2: It is red.", ["The image shows a circle.", "It is red."]),
    ("step 1. Look.\nSTEP 2) Count.\nStep 3 - Answer.", ["Look.", "Count.", "Answer."]),
    ("**Step 1**: Look.\n**Step 2** Count.", ["Look.", "Count."]),
    ("**Step 1:** Look at it\nclosely.\n**Step 2:** Answer.", ["Look at it\nclosely.", "Answer."]),
    ("## Step 1: Find the circle\nIt is at the top.\n\n## Step 2: Name its colour\nRed.",
     ["Find the circle\nIt is at the top.", "Name its colour\nRed."]),
    ("### Step 1\nLook.\n### Step 2\nAnswer.", ["Look.", "Answer."]),
    # a bold title keeps its bold once the marker inside it is dropped
    ("**Step 1: Find it**\nTop left.\n**Step 2: Name it**\nRed.", ["**Find it**\nTop left.", "**Name it**\nRed."]),
    # what comes before the first marker is the policy's writing too
    ("Let me think.\n\nStep 1: Look.\nStep 2: Answer.", ["Let me think.", "Look.", "Answer."]),
    # markers win over the blank lines inside a step
    ("Step 1: Look.\n\nStill looking.\nStep 2: Answer.", ["Look.\n\nStill looking.", "Answer."]),
    ("Step 10: Ten.\nStep 11: Eleven.", ["Ten.", "Eleven."]),
])
def test_explicit_markers_at_line_starts_open_steps_and_are_dropped(text, steps):
    assert split_steps(text) == steps


@pytest.mark.parametrize("text, steps", [
    # no marker: "Step 1 is" has no delimiter, "step 2:" is not at a line start, "Step 1.5" is a number
    ("Step 1 is to look.\nThen answer.", ["Step 1 is to look.", "Then answer."]),
    ("As in step 2: look.\nThen answer.", ["As in step 2: look.", "Then answer."]),
    ("Step 1.5 is halfway.", ["Step 1.5 is halfway."]),
    ("Footsteps 1: none here.", ["Footsteps 1: none here."]),
])
def test_words_that_only_look_like_markers_do_not_split(text, steps):
    assert split_steps(text) == steps


def test_paragraphs_then_lines_then_the_whole_text():
    assert split_steps("First paragraph\nstill first.\n\n  \nSecond.\n\n") == ["First paragraph\nstill first.",
                                                                               "Second."]
    assert split_steps("One.\nTwo.\n\nThree.") == ["One.\nTwo.", "Three."]  # paragraphs win over lines
    assert split_steps("One.\n  Two.  \n\n") == ["One.", "Two."]
    assert split_steps("  One line, one step.  ") == ["One line, one step."]
    assert split_steps("One.\r\nTwo.\r\n\r\nThree.") == ["One.\nTwo.", "Three."]  # Windows line ends


@pytest.mark.parametrize("text", ["", "   ", "\n\n \t\n"])
def test_blank_text_has_no_steps(text):
    assert split_steps(text) == []


def test_a_regex_split_drops_empties_and_the_text_of_its_groups():
    assert split_steps("a; b;; c ;", r";") == ["a", "b", "c"]
    assert split_steps("a1b22c", r"(\d+)") == ["a", "b", "c"]
    assert split_steps("a1b22c", r"(\d)(\d)?") == ["a", "b", "c"]
    assert split_steps(";;;", r";") == [";;;"]  # nothing left: the whole text is one step


def test_a_callable_split():
    assert split_steps("a|b| |c", lambda text: text.split("|")) == ["a", "b", "c"]
    assert split_steps("abc", lambda text: []) == ["abc"]


@pytest.mark.parametrize("split, message", [
    ("(unclosed", "not a valid regex"),
    (r"\s*", "matches the empty string"),
    (3, "regex string or a callable"),
    (lambda text: "not a list", "must return a list of strings"),
    (lambda text: [1, 2], "must return a list of strings"),
])
def test_a_bad_split_names_the_field(split, message):
    with pytest.raises(ValueError, match=message) as e:
        split_steps("one. two.", split)
    assert str(e.value).startswith("split")


def test_text_must_be_a_string():
    with pytest.raises(ValueError, match="text must be a string"):
        split_steps(None)


# ----------------------------------------------------------------------------- round trips, source by source

@pytest.mark.parametrize("steps", MICEVAL_STYLE + VISCO_STYLE)
def test_sentence_chains_round_trip_with_the_sentence_split(steps):
    paragraph = " ".join(steps)  # how MiCEval and VISCO write a chain of thought
    assert split_steps(paragraph, SENTENCES) == steps
    assert split_steps(paragraph) == [paragraph]  # by default one paragraph on one line is one step


@pytest.mark.parametrize("steps", VISUALPROCESSBENCH_STYLE + MICEVAL_STYLE)
def test_paragraph_chains_round_trip(steps):
    assert split_steps("\n\n".join(steps)) == steps


@pytest.mark.parametrize("steps", MICEVAL_STYLE + VISCO_STYLE)
def test_one_step_per_line_round_trips(steps):
    assert split_steps("\n".join(steps)) == steps  # how `prompts.chain_completion_text` writes a chain


@pytest.mark.parametrize("render", [
    lambda k, step: f"Step {k}: {step}",
    lambda k, step: f"**Step {k}:** {step}",
    lambda k, step: f"## Step {k}\n{step}",
])
@pytest.mark.parametrize("joiner", ["\n", "\n\n"])
@pytest.mark.parametrize("steps", VISUALPROCESSBENCH_STYLE + VISCO_STYLE)
def test_marked_chains_round_trip(steps, render, joiner):
    text = joiner.join(render(k, step) for k, step in enumerate(steps, 1))
    assert split_steps(text) == steps


def fixture_chains() -> list[list[str]]:
    """The steps of every well-formed chain of the repository's VisualProcessBench and VisualPRM fixtures."""
    out = []
    with open(os.path.join(FIXTURES, "visualprocessbench", "test.jsonl")) as f:
        for line in f:
            try:
                steps = json.loads(line)["response"]["steps"]
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(steps, list) and steps and all(isinstance(s, str) and s.strip() for s in steps):
                out.append(steps)
    with open(os.path.join(FIXTURES, "visualprm", "annotations.jsonl")) as f:
        for line in f:
            try:
                steps = [item["step"] for item in json.loads(line)["steps_with_score"]]
            except (ValueError, KeyError, TypeError):
                continue
            if steps and all(isinstance(s, str) and s.strip() for s in steps):
                out.append(steps)
    return out


def test_the_fixture_chains_round_trip_as_paragraphs_lines_and_marked_steps():
    chains = fixture_chains()
    assert len(chains) >= 10
    for steps in chains:
        assert split_steps("\n\n".join(steps)) == steps
        assert split_steps("\n".join(steps)) == steps
        assert split_steps("\n".join(f"Step {k}. {s}" for k, s in enumerate(steps, 1))) == steps


def test_importing_the_splitter_loads_no_model_library():
    code = ("import sys, json; import stepcritic.rewards.splitting; "
            "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'trl', 'PIL') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []

