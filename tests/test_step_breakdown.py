"""The per-template breakdown splits step scores by the synthetic template and relevance, and tells the wrong steps
a judge missed with their premise apart from those it missed on its own."""

import json

import pytest

from stepcritic.experiments.step_breakdown import auroc, breakdown, judged, tables


def _step(correct, premises=(), relevance=None):
    return {"text": "s", "correct": correct, "premises": list(premises), "description_relevance": relevance}


CHAINS = [
    {"chain_id": "a", "meta": json.dumps({"step_templates": ["count_pair", "total", "answer"]}),
     "steps": [_step(False, relevance="both"), _step(False, [0]), _step(False, [1])]},
    {"chain_id": "b", "meta": json.dumps({"step_templates": ["count_pair", "total", "answer"]}),
     "steps": [_step(True, relevance="both"), _step(True, [0]), _step(True, [1])]},
    {"chain_id": "c", "meta": json.dumps({"step_templates": ["position", "answer"]}),
     "steps": [_step(False, relevance="image"), _step(True)]},
    {"chain_id": "unjudged", "meta": "{}", "steps": [_step(False)]},
]
SCORES = {"a": [0.9, 0.8, 0.2], "b": [0.1, 0.3, 0.4], "c": [0.6, 0.1]}


def test_groups_by_template_and_relevance_and_skips_chains_without_scores():
    groups, _ = breakdown(CHAINS, SCORES)
    assert sorted(groups) == ["answer", "count_pair", "position (image)", "total"]
    assert groups["count_pair"] == ([True, False], [0.9, 0.1])
    assert groups["answer"] == ([True, False, False], [0.2, 0.4, 0.1])
    assert auroc(*groups["count_pair"]) == 1.0 and auroc(*groups["position (image)"]) is None  # one class


def test_wrong_steps_on_a_wrong_premise_are_counted_by_whether_the_premise_was_flagged():
    _, premised = breakdown(CHAINS, SCORES)
    # chain a: the total (premise flagged, flagged) and the answer (premise flagged, not flagged)
    assert premised == {(True, True): 1, (True, False): 1}
    text = "\n".join(tables(*breakdown(CHAINS, SCORES)))
    assert "| step flagged | 1 | 0 |" in text and "| step not flagged | 1 | 0 |" in text


def test_predictions_of_several_judges_need_one_named(tmp_path):
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(json.dumps({"judge": j, "chain_id": "a", "p_incorrect": [0.5]}) + "\n" for j in "xy"))
    with pytest.raises(SystemExit, match="2 judges; name one with --judge"):
        judged(str(path), None)
    assert judged(str(path), "y") == {"a": [0.5]}
    with pytest.raises(SystemExit, match="no judge 'z'"):
        judged(str(path), "z")
