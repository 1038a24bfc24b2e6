"""The note-writing PRM (`data build --prm-notes`): notes in the rows, the judgement slots, the synthetic corrections.

That such a PRM learns what a verdict-only one does not is test_learnability's job; these check the wiring.
"""

import json

import pytest
import torch
from datasets import load_from_disk
from helpers import chain, step

from stepcritic.data_prep import critique, prompts, schema
from stepcritic.data_prep.build import BuildError, build_dataset, check_options
from stepcritic.data_prep.synth import synthesize
from stepcritic.train.prm import judgement_mask, writes_notes


def noted_chain(chain_id="c0", group_id=None):
    return chain(chain_id, group_id=group_id, steps=[
        step("The circle is red."),
        step("The circle is at the top left.", correct=False, correction="The circle is at the top right."),
        step("The sky is blue.", correct=False, explanations=["The step is not about the question."]),
        step("So the answer is red.", type="reasoning")])


def test_a_note_is_the_step_as_it_should_read():
    c = schema.validate_chain(noted_chain())
    assert [critique.step_note(s) for s in c["steps"]] == [
        "The circle is red.", "The circle is at the top right.", "The step is not about the question.",
        "So the answer is red."]
    turns = [m["content"][0]["text"] for m in prompts.prm_messages(c, notes=True) if m["role"] == "assistant"]
    assert turns == ["The circle is red.\n+", "The circle is at the top right.\n-",
                     "The step is not about the question.\n-", "So the answer is red.\n+"]
    plain = [m["content"][0]["text"] for m in prompts.prm_messages(c) if m["role"] == "assistant"]
    assert plain == ["+", "-", "-", "+"]


def test_an_incorrect_step_without_correction_or_explanation_has_no_note(tmp_path):
    bare = schema.validate_chain(chain("bare", group_id="g1",
                                       steps=[step("The circle is blue.", correct=False, explanations=[])]))
    with pytest.raises(schema.SchemaError, match=r"steps\[0\]\.correction"):
        prompts.prm_messages(bare, notes=True)
    records = [schema.validate_chain(noted_chain(f"c{i}", group_id=f"g{i}")) for i in range(4)] + [bare]
    stats = build_dataset(records, "prm-sft", str(tmp_path / "prm"), test_fraction=0.2, prm_notes=True)
    assert stats["prm_notes"] is True and stats["chains_skipped"] == {"no_note": 1}
    assert stats["chains_used"] + 1 == stats["chains_in"] == 5
    rows = load_from_disk(str(tmp_path / "prm"))
    assert writes_notes(rows["train"]) and not writes_notes([{"messages": prompts.prm_messages(records[0])}])


def test_prm_notes_only_apply_to_prm_sft():
    with pytest.raises(BuildError, match="--prm-notes only applies"):
        check_options("critique-sft", prm_notes=True)


def test_the_judgement_is_the_last_symbol_of_each_turn_even_when_a_note_uses_it():
    plus, minus, other = 14, 16, 5
    ignore = -100
    labels = torch.tensor([[ignore, other, minus, other, plus, 2, ignore, ignore, minus, 2, ignore],
                           [ignore, plus, 2, ignore, ignore, minus, minus, 2, ignore, ignore, ignore]])
    mask = judgement_mask(labels, plus, minus)
    assert mask[0].nonzero().flatten().tolist() == [4, 8]  # the "-" inside the first note is not a judgement
    assert mask[1].nonzero().flatten().tolist() == [1, 6]


def test_synthetic_errors_carry_their_correction():
    chains = synthesize(120, seed=4)
    fixed = irreparable = 0
    for c in chains:
        faults = json.loads(c["meta"])["step_faults"]
        for s, fault in zip(c["steps"], faults):
            if s["correct"]:
                assert s["correction"] is None
            elif fault in ("irrelevant", "uninformative"):
                irreparable += s["correction"] is None
            else:
                assert s["correction"] and s["correction"] != s["text"], (s, fault)
                fixed += 1
    assert fixed > 50 and irreparable > 5


def test_a_note_writing_prm_through_lora_must_be_merged(tmp_path):
    # an adapter folder has no config of its own, so the scorer could not tell that the PRM writes notes
    import os

    from helpers import RECIPES, chains

    from stepcritic.train.config import parse_recipe
    from stepcritic.train.run import train

    build_dataset(chains(4), "prm-sft", str(tmp_path / "data"), test_fraction=0.25, prm_notes=True)
    recipe = parse_recipe(os.path.join(RECIPES, "prm.yaml"), dict(
        dataset_path=str(tmp_path / "data"), output_dir=str(tmp_path / "run"), max_steps=1, use_peft=True,
        report_to="none"))
    with pytest.raises(ValueError, match="merge_adapter: true"):
        train(recipe)
