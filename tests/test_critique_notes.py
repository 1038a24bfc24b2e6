"""Critiques that say what the image shows before each verdict (`data build --critique-notes`, `hf:...,notes=true`):
the rows carry the note of every step, chains that cannot have one are skipped and counted, and the structured
decoder's verdicts are its note probabilities against the threshold, in parseable JSON."""

import json

import pytest
from easy_chains import easy_chains

from stepcritic.data_prep import critique
from stepcritic.data_prep.build import BuildError, build_dataset


def test_critique_rows_say_what_the_image_shows_before_each_verdict(tmp_path):
    chains = easy_chains(8, seed=0, claims=("red", "blue"))
    stats = build_dataset(chains, "critique-sft", str(tmp_path / "sft"), test_fraction=0.25, critique_notes=True)
    assert stats["critique_notes"] is True
    from datasets import load_from_disk

    row = load_from_disk(str(tmp_path / "sft"))["train"][0]
    written = json.loads(row["messages"][-1]["content"][0]["text"])
    chain = next(c for c in chains if c["chain_id"] == row["chain_id"])
    step = chain["steps"][0]
    assert list(written["steps"][0])[:3] == ["step", "shows", "correct"]  # the note comes before the verdict
    assert written["steps"][0]["shows"] == (step["text"] if step["correct"] else step["explanations"][0])
    assert "shows" in row["messages"][0]["content"][-1]["text"]  # and the prompt asks for it


def test_chains_without_a_note_are_skipped_and_counted(tmp_path):
    chains = easy_chains(8, seed=1, claims=("red", "blue"))
    for chain in chains:
        for step in chain["steps"]:
            step["explanations"] = []  # an incorrect step then has nothing to say the image shows
    stats = build_dataset(chains, "critique-sft", str(tmp_path / "sft"), test_fraction=0.25, critique_notes=True)
    assert stats["chains_skipped"]["no_note"] == 8 and sum(stats["rows"].values()) == 8


def test_notes_are_for_critique_kinds_only(tmp_path):
    with pytest.raises(BuildError, match="--critique-notes only applies"):
        build_dataset(easy_chains(2, seed=0), "prm-sft", str(tmp_path / "p"), critique_notes=True)


def test_structured_notes_verdicts_follow_the_note_probability():
    from stepcritic.eval.judges.registry import make_judge
    from stepcritic.train.tiny.cache import tiny_critic_path

    chains = easy_chains(3, seed=2, claims=("red", "blue"))
    judge = make_judge(f"hf:{tiny_critic_path()},structured=true,notes=true,max_new_tokens=4")
    for c, chain in zip(judge.judge_batch(chains), chains):
        parsed = critique.parse_critique(c.raw, len(chain["steps"]))
        assert parsed.valid and parsed.verdicts == c.verdicts
        assert c.verdicts == [1 - p >= 0.5 for p in c.p_incorrect]
        assert all(0.0 <= p <= 1.0 for p in c.p_incorrect)
        assert all("shows" in item for item in json.loads(c.raw)["steps"])
