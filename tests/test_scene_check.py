"""experiments/scene_check.py: true step labels read off the rendered scene agree with the generator's own labels on
every step it writes, and steps it cannot read get no label."""

import json

from stepcritic.data_prep.synth import synthesize
from stepcritic.experiments.scene_check import Scene, check_chain, check_step

SCENE = [{"shape": "circle", "colour": "red", "size": "big", "row": 0, "col": 0, "cell": "top left"},
         {"shape": "square", "colour": "blue", "size": "small", "row": 1, "col": 2, "cell": "middle right"},
         {"shape": "square", "colour": "green", "size": "big", "row": 2, "col": 1, "cell": "bottom middle"},
         {"shape": "cross", "colour": "yellow", "size": "small", "row": 2, "col": 2, "cell": "bottom right"}]


def test_agrees_with_the_generator_on_its_chains():
    chains = synthesize(240, seed=11) + synthesize(60, seed=12, error_rate=0.6)
    steps = 0
    for chain in chains:
        templates, verdicts = check_chain(chain)
        assert None not in templates, chain["steps"]
        assert verdicts == [s["correct"] for s in chain["steps"]], (chain["question"], chain["steps"])
        steps += len(verdicts)
    assert steps > 600


def test_claims_against_the_scene():
    scene = Scene(SCENE, "Is the red circle to the left of the blue square?", "yes")
    assert check_step("The red circle is to the left of the blue square.", scene) == ("relation", True)
    assert check_step("The blue square is to the left of the red circle.", scene) == ("relation", False)
    assert check_step("The circle is at the top left.", scene) == ("position", True)
    assert check_step("The circle is red.", scene) == ("colour", True)
    # true, but about shapes the question does not ask about: irrelevant, so incorrect
    assert check_step("The cross is yellow.", scene) == ("colour", False)
    # "the square" does not single one out: no label rather than a guess
    assert check_step("The square is at the centre.", scene) == ("position", None)
    assert check_step("The image contains a circle, a square and a cross.", scene) == ("kinds", True)
    assert check_step("The image contains a circle and a square.", scene) == ("kinds", False)
    assert check_step("So the answer is yes.", scene) == ("answer", True)
    assert check_step("The red circle is to the.", scene) == (None, None)


def test_counts_totals_and_repeats():
    meta = json.dumps({"scene": SCENE})
    chain = {"question": "How many squares and circles are there altogether?", "reference_answer": "3", "meta": meta,
             "steps": [{"text": t} for t in ("There are 2 squares and 1 circle.", "There are 2 squares and 1 circle.",
                                             "Together that makes 4.", "So the answer is 3.", "So there squares.")]}
    templates, verdicts = check_chain(chain)
    assert templates == ["count_pair", "count_pair", "total", "answer", None]
    assert verdicts == [True, False, False, True, None]  # a verbatim repeat is uninformative
