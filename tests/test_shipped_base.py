"""The pretrained tiny base shipped in the package: it matches the config and tokenizer the code builds (else a
one-line rebuild instruction), a missing or stale base falls back to a short build that says so, and installing a
finished run writes the weights, the fingerprint and a card with the probe table."""

import json

import pytest

pytestmark = pytest.mark.usefixtures("private_tiny_cache")


def test_the_shipped_base_matches_the_code():
    from stepcritic.train.tiny.shipped import TINY

    if TINY.shipped_meta() is None:
        pytest.skip(f"no shipped base in {TINY.folder}")
    reason = TINY.stale_reason()
    assert reason is None, f"{reason}. Rebuild it: {TINY.rebuild}"


def test_the_fingerprint_sees_the_tokenizer_and_the_config():
    from stepcritic.train.tiny.shipped import fingerprint

    assert fingerprint() == fingerprint()
    assert fingerprint(vocab_size=512) != fingerprint()
    assert fingerprint(image_size=64) != fingerprint()


def test_a_missing_base_falls_back_to_a_short_build_and_says_so(tmp_path, monkeypatch):
    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny import shipped

    monkeypatch.setattr(shipped.TINY, "folder", tmp_path / "base")
    monkeypatch.setattr(shipped.TINY, "fallback", {"vision_pretrain_steps": 2, "base_pretrain_steps": 2})
    said = []
    path = shipped.TINY.path(log=said.append)
    assert len(said) == 1 and "building a short base" in said[0] and "score worse" in said[0]
    load_critic(path)


def test_install_writes_weights_fingerprint_and_card(tmp_path, monkeypatch):
    from stepcritic.train.tiny import build_tiny_critic, shipped

    run = tmp_path / "run"
    build_tiny_critic(run / "model")
    settings = {"steps": 10, "batch_size": 8, "vision_steps": 0, "learning_rate": 1e-3, "seed": 0, "threads": 1}
    record = {"settings": settings, "steps": 10, "planned_steps": 10, "seconds": 36.0,
              "history": [{"step": 10, "loss": 0.5, "probe": {"colour": 0.5, "sum": 0.95}}],
              "probe": {"colour": 0.5, "sum": 0.95}}
    (run / "pretraining.json").write_text(json.dumps(record))
    monkeypatch.setattr(shipped.TINY, "folder", tmp_path / "base")
    folder = shipped.TINY.install(str(run), commit="abc123")
    assert shipped.TINY.stale_reason() is None
    card = (folder / "README.md").read_text()
    assert "| 0.500 | not met" in card and "| 0.950 | met" in card and "abc123" in card
    assert json.loads((folder / shipped.META).read_text())["fingerprint"] == shipped.fingerprint()

    del record["probe"]  # a run that stopped before its end is not installed
    (run / "pretraining.json").write_text(json.dumps(record))
    with pytest.raises(SystemExit, match="resume it"):
        shipped.TINY.install(str(run))


def test_the_card_gives_long_conversations_and_the_deep_probe(tmp_path, monkeypatch):
    """A base pre-trained on longer conversations says so in its command and data mix, and its card shows each kind
    asked deep in a conversation beside the plain probe. What it protects: the card's command reruns the run."""
    from stepcritic.train.tiny import build_tiny_critic, shipped

    run = tmp_path / "run"
    build_tiny_critic(run / "model")
    settings = {"steps": 10, "batch_size": 8, "vision_steps": 0, "learning_rate": 3e-4, "seed": 1, "threads": 1,
                "questions": "6-20", "ramp": 0.0, "say_first": True}
    probe = {"colour": 1.0, "relation": 0.95}
    record = {"settings": settings, "steps": 10, "planned_steps": 10, "seconds": 36.0, "history": [],
              "probe": probe, "probe_deep": {"after": 15, "accuracy": {"colour": 0.9, "relation": 0.25}}}
    (run / "pretraining.json").write_text(json.dumps(record))
    monkeypatch.setattr(shipped.TINY, "folder", tmp_path / "base")
    card = (shipped.TINY.install(str(run)) / "README.md").read_text()
    assert "--questions 6-20 --ramp 0.0 --say-first" in card
    assert "6 to 20 questions a conversation instead, scenes of every size from its first step" in card
    assert "| accuracy | after 15 other questions | target |" in card
    assert "| 0.950 | 0.250 | met (>= 0.9) |" in card and "`--after 15`" in card
    from stepcritic.train.tiny import card as cards

    # a run that only changed the ramp says so too; one with the defaults adds nothing to the data mix
    assert cards._conversations({"ramp": 0.5}) == "scenes growing to 6 shapes over its first 50% of steps"
    assert cards._conversations({"questions": "6", "ramp": 0.3}) == cards._conversations({}) == ""
