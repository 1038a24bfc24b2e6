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


@pytest.mark.parametrize("base", ["tiny", "smollm2"])
def test_a_note_is_scored_on_the_tokens_the_critic_was_trained_on(base):
    """The decoder reads P(correct) off the step's text as the note. SmolLM2's tokenizer merges a note's final `.`
    with the `",` after it, so scoring the note before a bare quote ended it in a token the writer never saw there
    (every step then looked wrong); scored with what follows it, the tokens are the training text's own."""
    from importlib.resources import files

    from transformers import AutoTokenizer

    from stepcritic.eval.judges.structured import NOTE_END
    from stepcritic.train.tiny.cache import tiny_critic_path

    folder = tiny_critic_path() if base == "tiny" else str(files("stepcritic.train.tiny").joinpath("base_smollm2"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    notes = ["There are 3 green shapes.", "The red circle is at the top right.", "So the answer is 3"]
    text = critique.format_critique({"steps": [
        {"step": k, "shows": note, "correct": k != 2} | ({} if k != 2 else {"explanation": "It is not."})
        for k, note in enumerate(notes, 1)], "answer_correct": False})
    trained = tokenizer(text, add_special_tokens=False)["input_ids"]
    merged_quote = False
    for k, note in enumerate(notes, 1):
        written = text[:text.index(f'{{"step": {k}, "shows": "') + len(f'{{"step": {k}, "shows": "')]
        scored = tokenizer(written + note + NOTE_END, add_special_tokens=False)["input_ids"]
        assert scored == trained[:len(scored)], (base, note)
        bare = tokenizer(written + note + '"', add_special_tokens=False)["input_ids"]
        merged_quote |= bare != trained[:len(bare)]
    assert merged_quote == (base == "smollm2")  # the case this protects exists, and only where the tokenizer merges


def test_check_notes_in_critiques_and_their_verdicts_read_after_the_note(tmp_path, monkeypatch):
    """`--critique-notes check`: under "shows", the questions that check the step with the image's answers; the
    judge (`notes=check`) writes its own note, then reads P(" true") against P(" false") right after it."""
    from datasets import load_from_disk

    from stepcritic.data_prep import schema
    from stepcritic.data_prep.synth import synthesize
    from stepcritic.eval.judges.registry import make_judge
    from stepcritic.train.tiny.cache import tiny_critic_path

    chains = synthesize(12, seed=6)
    stats = build_dataset(chains, "critique-sft", str(tmp_path / "sft"), test_fraction=0.25, critique_notes="check")
    assert stats["critique_notes"] == "check"
    row = load_from_disk(str(tmp_path / "sft"))["train"][0]
    chain = next(c for c in chains if c["chain_id"] == row["chain_id"])
    written = json.loads(row["messages"][-1]["content"][0]["text"])
    checks = schema.chain_meta(chain)["step_checks"]
    assert [s["shows"] for s in written["steps"]] == [
        check or s["explanations"][0] for check, s in zip(checks, chain["steps"])]
    assert [s["says"] for s in written["steps"]] == [s["text"] for s in chain["steps"]]  # each check follows its step
    assert "questions that check it" in row["messages"][0]["content"][-1]["text"]

    judge = make_judge(f"hf:{tiny_critic_path()},structured=true,notes=check,max_new_tokens=4")
    rewrite = make_judge(f"hf:{tiny_critic_path()},structured=true,notes=true,max_new_tokens=4")
    assert judge.options["notes"] == "check" and judge.fingerprint() != rewrite.fingerprint()  # caches kept apart
    judged = judge.judge_batch(chains[:2])
    for c, chain in zip(judged, chains[:2]):
        parsed = critique.parse_critique(c.raw, len(chain["steps"]))
        assert parsed.valid and c.verdicts == [1 - p >= 0.5 for p in c.p_incorrect]
        assert [s["says"] for s in json.loads(c.raw)["steps"]] == [s["text"] for s in chain["steps"]]
        assert all(0.0 <= p <= 1.0 for p in c.p_incorrect)
    from stepcritic.train import scoring

    # P(" true") is trusted as far as the note before it, which moves it towards 1/2 but never across
    monkeypatch.setattr(scoring, "trusted_verdict", lambda p, sure: p)
    untrusted = judge.judge_batch(chains[:2])
    assert [c.verdicts for c in untrusted] == [c.verdicts for c in judged]
    assert [c.p_incorrect for c in untrusted] != [c.p_incorrect for c in judged]
    with pytest.raises(ValueError, match="notes='maybe'"):
        make_judge(f"hf:{tiny_critic_path()},structured=true,notes=maybe")


def test_the_brief_critique_template_asks_the_same_in_far_fewer_words(tmp_path):
    """`critique_brief` (for small critics trained on it) keeps the chain and one line asking for the critique, and
    drops the rules, the format example and the note style that the training rows teach; a judge asked with it is
    cached apart."""
    from stepcritic.data_prep import prompts
    from stepcritic.data_prep.synth import synthesize
    from stepcritic.eval.judges.registry import make_judge

    chains = synthesize(4, seed=3)
    chain = chains[0]
    full, brief = (prompts.critique_messages(chain, template, notes="claims-said")[0]["content"][-1]["text"]
                   for template in (None, "critique_brief"))
    assert len(brief) * 3 < len(full)
    assert chain["question"] in brief and all(s["text"] in brief for s in chain["steps"]) and '"says"' not in brief
    stats = build_dataset(chains, "critique-sft", str(tmp_path / "sft"), test_fraction=0.25,
                          critique_notes="claims-said", template="critique_brief")
    assert stats["critique_notes"] == "claims-said" and stats["template"]["name"] == "critique_brief"
    from datasets import load_from_disk

    asked = load_from_disk(str(tmp_path / "sft"))["train"][0]["messages"][0]["content"][-1]["text"]
    # the rows ask briefly
    assert asked.strip().endswith("against the image in JSON.") and "How to judge a step" not in asked
    judges = [make_judge(f"hf:somewhere,structured=true,notes=check{extra}")
              for extra in ("", ",template=critique_brief")]
    assert judges[0].fingerprint() != judges[1].fingerprint()
