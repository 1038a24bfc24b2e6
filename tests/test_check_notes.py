"""Check notes (`data build --prm-notes check`): per step, the questions that check it against the image, answered.

The synthetic generator writes them (`meta.step_checks`); the PRM writes one before each verdict and is scored by
that verdict. What these protect: that a check's answers decide the step's label exactly (a check that disagreed
with the label would teach the PRM noise), that the rows and the scorer use them, and that chains without checks
are skipped with their reason instead of getting made-up notes.
"""

import json
import os
import re

import pytest
from datasets import load_from_disk
from helpers import RECIPES, chain, chains

from stepcritic.data_prep import prompts, schema
from stepcritic.data_prep.build import BuildError, build_dataset, check_options
from stepcritic.data_prep.synth import synthesize

QA = re.compile(r"([^?]+\?) ([^.?]+)\.")


def agrees(template: str, text: str, check: str) -> bool:
    """Whether a step says what its check's answers say: an oracle written apart from the generator."""
    answers = [answer for _, answer in QA.findall(check)]
    if template == "answer":
        return text == f"So the answer is {answers[0]}."
    at = 0
    for value in (a for a in answers if a not in ("yes", "no")):  # values appear in the step, in order
        found = text.find(value, at)
        if found < 0:
            return False
        at = found + len(value)
    return all(a == "yes" for a in answers if a in ("yes", "no"))


def test_a_synthetic_steps_check_answers_decide_its_label():
    checked = 0
    for c in synthesize(600, seed=7):
        meta = schema.chain_meta(c)
        assert len(meta["step_checks"]) == len(c["steps"])
        for s, check, template, fault in zip(c["steps"], meta["step_checks"], meta["step_templates"],
                                             meta["step_faults"]):
            if fault in ("irrelevant", "uninformative"):  # inserted: no question about the image checks them
                assert check is None
                continue
            assert check and not QA.sub("", check).strip(), check  # nothing but answered questions
            assert agrees(template, s["text"], check) == s["correct"], (s["text"], check, s["correct"])
            checked += 1
    assert checked > 1500


def test_checks_are_worded_as_the_bases_scene_questions():
    # the note asks what the base was pre-trained to answer (train/tiny/scene_qa.py), in the same words
    meta = [schema.chain_meta(c) for c in synthesize(300, seed=2)]
    questions = {q.strip() for m in meta for check in m["step_checks"] if check for q, _ in QA.findall(check)}
    starts = ("What colour is the ", "Where is the ", "How many ", "Is there a ", "Is the ", "Are there more ")
    assert questions and all(q.startswith(starts) for q in questions), [q for q in questions
                                                                        if not q.startswith(starts)]


def taught_answers(meta: dict) -> dict:
    """The said-first answers a base's pre-training gives to the questions `scene_qa` asks about a chain's scene,
    drawn many times: the oracle the said notes are held to."""
    import random

    from stepcritic.data_prep.render import Item
    from stepcritic.train.tiny import scene_qa

    items = [Item(**{k: v for k, v in it.items() if k != "cell"}) for it in meta["scene"]]
    rng, taught = random.Random(0), {}
    for _ in range(60):
        for ask in scene_qa.QUESTIONS:
            qa = ask(rng, items, say_first=True)
            if qa:
                taught[qa[0]] = qa[1]
    return taught


def test_said_checks_answer_as_the_said_first_base_was_pre_trained_to():
    # `--prm-notes check-said` notes ask a --say-first base what it answers, so each reading and answer must be the
    # one its pre-training gives for the same question about the same scene (the oracle: scene_qa itself)
    matched = 0
    for c in synthesize(120, seed=3):
        meta = schema.chain_meta(c)
        taught = taught_answers(meta)
        for plain, said in zip(meta["step_checks"], meta["step_checks_said"]):
            assert (plain is None) == (said is None)
            if said is None:
                continue
            pairs = QA.findall(said)
            assert [q for q, _ in pairs] == [q for q, _ in QA.findall(plain)]
            assert [a.rsplit(" ", 1)[-1] for _, a in QA.findall(plain)] == \
                [a.rsplit(" ", 1)[-1] for _, a in pairs]  # the same answers, after their readings
            for question, answer in pairs:
                question = question.strip()
                if question in taught:
                    assert answer == taught[question], (question, answer, taught[question])
                    matched += 1
    assert matched > 300


def test_claim_notes_ask_what_the_step_says_and_are_all_yes_exactly_when_it_is_right():
    # `--prm-notes claims-said`: a step's claims asked yes/no, so its verdict is whether every answer is yes; an
    # answer to a yes/no question asks the question, then whether the step's yes or no is the image's, so that its
    # verdict too is a yes, not a comparison of two words; the forms the base was pre-trained on must get the
    # answers its pre-training gives
    checked, matched, yes_no = 0, 0, 0
    for c in synthesize(200, seed=4):
        meta = schema.chain_meta(c)
        taught = taught_answers(meta)
        for step, claims, check in zip(c["steps"], meta["step_claims_said"], meta["step_checks"]):
            assert (claims is None) == (check is None)
            if claims is None:
                continue
            pairs = [(q.strip(), a) for q, a in QA.findall(claims)]
            assert pairs and not QA.sub("", claims).strip(), claims
            answers = [a.rsplit(" ", 1)[-1] for _, a in pairs]
            said = step["text"].removeprefix("So the answer is ").removesuffix(".")
            if step["text"].startswith("So the answer is ") and said in ("yes", "no"):
                yes_no += 1
                assert pairs[-1][0] == f"Is the answer {said}?" and len(pairs) == 2, claims
                assert (answers[-1] == "yes") == step["correct"], (step["text"], claims)
            else:
                assert all(a == "yes" for a in answers) == step["correct"], (step["text"], claims)
            checked += 1
            for question, answer in pairs:
                if question in taught:
                    assert answer == taught[question], (question, answer, taught[question])
                    matched += 1
    assert checked > 450 and matched > 300 and yes_no > 50


def test_check_notes_in_prm_rows(tmp_path):
    synthetic = synthesize(30, seed=3)
    c = next(c for c in synthetic if any(f == "irrelevant" for f in schema.chain_meta(c)["step_faults"]))
    turns = [m["content"][0]["text"] for m in prompts.prm_messages(c, notes="check") if m["role"] == "assistant"]
    meta = schema.chain_meta(c)
    for turn, s, check in zip(turns, c["steps"], meta["step_checks"]):
        note, verdict = turn.rsplit("\n", 1)
        assert verdict == ("+" if s["correct"] else "-")
        assert note == (check or s["explanations"][0])  # an irrelevant step's note says why it is off topic
    first_user = prompts.prm_messages(c, notes="check")[0]["content"][-1]["text"]
    assert "ask the questions that check the step" in first_user

    # check-said: the same questions, each answer after its reading, asked for in the same words (a model trained on
    # them is scored as a check-note model)
    said = prompts.prm_messages(c, notes="check-said")
    assert said[0]["content"][-1]["text"] == first_user
    said_turns = [m["content"][0]["text"] for m in said if m["role"] == "assistant"]
    for turn, check in zip(said_turns, meta["step_checks_said"]):
        assert check is None or turn.rsplit("\n", 1)[0] == check
    assert said_turns != turns

    hand = schema.validate_chain(chain("hand", group_id="g9"))  # no step_checks: not synthetic
    with pytest.raises(schema.SchemaError, match="meta.step_checks"):
        prompts.prm_messages(hand, notes="check")
    stats = build_dataset(synthetic + [hand], "prm-sft", str(tmp_path / "prm"), test_fraction=0.2, prm_notes="check")
    assert stats["prm_notes"] == "check" and stats["chains_skipped"] == {"no_note": 1}
    assert stats["chains_used"] + 1 == stats["chains_in"] == 31
    assert len(load_from_disk(str(tmp_path / "prm"))["train"]) > 0


def test_prm_notes_style_is_checked_before_reading():
    with pytest.raises(BuildError, match="--prm-notes takes one of rewrite, check"):
        check_options("prm-sft", prm_notes="questions")
    with pytest.raises(BuildError, match="--prm-notes only applies"):
        check_options("critique-sft", prm_notes="check")


def test_the_cli_takes_a_style_and_keeps_the_bare_flag(tmp_path, capsys):
    from stepcritic.cli import main

    schema.save_chains(synthesize(12, seed=1), str(tmp_path / "chains"))
    for flags, want in ((["--prm-notes"], True), (["--prm-notes", "check"], "check"),
                        (["--prm-notes", "check-said"], "check-said")):
        out = str(tmp_path / f"prm-{want}")
        args = ["data", "build", "--chains", str(tmp_path / "chains"), "--kind", "prm-sft", *flags, "--out", out]
        assert main(args) == 0
        with open(os.path.join(out, "build_stats.json")) as f:
            assert json.load(f)["prm_notes"] == want


def test_a_check_note_prm_is_scored_by_its_verdict(tmp_path, monkeypatch):
    # the config records the style, and the scorer reads P(+) where the model's own note ends
    import torch

    from stepcritic.train.config import parse_recipe
    from stepcritic.train.run import train
    from stepcritic.train.scoring import PRMScorer

    synthetic = synthesize(24, seed=5)
    build_dataset(synthetic, "prm-sft", str(tmp_path / "data"), test_fraction=0.25, prm_notes="check")
    recipe = parse_recipe(os.path.join(RECIPES, "prm.yaml"), dict(
        dataset_path=str(tmp_path / "data"), output_dir=str(tmp_path / "run"), max_steps=2,
        per_device_train_batch_size=2, report_to="none", save_strategy="no"))
    torch.set_num_threads(1)
    train(recipe)
    with open(tmp_path / "run" / "config.json") as f:
        assert json.load(f)["stepcritic_prm_notes"] == "check"
    scorer = PRMScorer.from_pretrained(str(tmp_path / "run"), batch_size=2)  # two batches: notes of both kept
    scorer.MAX_CHECK_TOKENS = 6  # an untrained note is long: the verdict is forced early, as after a long note
    scores = scorer.score(synthetic[:3])
    assert [len(s) for s in scores] == [len(c["steps"]) for c in synthetic[:3]]
    assert all(0.0 <= p <= 1.0 for row in scores for p in row)
    assert [len(n) for n in scorer.last_notes] == [len(c["steps"]) for c in synthetic[:3]]
    assert len({round(p, 6) for row in scores for p in row}) > 1  # read from the model, not a constant
    from stepcritic.train import scoring

    monkeypatch.setattr(scoring, "trusted_verdict", lambda p, sure: p)  # the verdict's own P(+)
    raw = scorer.score(synthetic[:3])
    assert [[p >= 0.5 for p in row] for row in raw] == [[p >= 0.5 for p in row] for row in scores]
    assert raw != scores  # an untrained model's notes are doubtful: their verdicts were moved towards 1/2


def test_a_check_verdict_is_trusted_as_far_as_its_note():
    # protects the reading that ranks a PRM's steps: a sure note keeps its verdict, a doubtful one moves it to 1/2,
    # and no verdict ever crosses 1/2, so thresholded verdicts (step F1) are those of P(+) itself
    from stepcritic.train.scoring import trusted_verdict

    assert trusted_verdict(0.98, 1.0) == pytest.approx(0.98) and trusted_verdict(0.98, 0.0) == 0.5
    grid = [k / 20 for k in range(21)]
    for sure in grid[1:]:  # never 0: the greedy token is at least as likely as any other
        trusted = [trusted_verdict(p, sure) for p in grid]
        assert trusted == sorted(trusted)  # the ranking among equally sure notes is kept
        assert all((t > 0.5) == (p > 0.5) and (t < 0.5) == (p < 0.5) for t, p in zip(trusted, grid))
    assert trusted_verdict(0.99, 0.4) < trusted_verdict(0.9, 0.95)  # a doubtful note ranks below a sure one


def test_hand_made_chains_still_build_rewrite_notes(tmp_path):
    stats = build_dataset(chains(4), "prm-sft", str(tmp_path / "prm"), test_fraction=0.25, prm_notes=True)
    assert stats["prm_notes"] is True and not stats.get("chains_skipped")
