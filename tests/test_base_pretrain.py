"""The tiny base's pre-training run: resuming from a checkpoint gives the weights an uninterrupted run gives, the
curriculum grows scenes as planned, and no scene of the demo's held-out chains is ever drawn."""

import json
import random

import pytest

pytestmark = pytest.mark.usefixtures("private_tiny_cache")


@pytest.fixture(scope="module")
def fresh(private_tiny_cache):
    from stepcritic.train.tiny.cache import tiny_critic_path

    return tiny_critic_path(vision_pretrain_steps=2)


def _run(path, steps, checkpoint_dir=None, max_seconds=None):
    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.base_pretrain import pretrain_base

    model, processor = load_critic(path)
    result = pretrain_base(model, processor, steps, batch_size=2, log_every=1, checkpoint_dir=checkpoint_dir,
                           max_seconds=max_seconds, save_every=100)
    return model, result


def test_a_stopped_run_resumes_to_the_same_weights(fresh, tmp_path):
    straight, _ = _run(fresh, 4)
    _, stopped = _run(fresh, 4, checkpoint_dir=str(tmp_path), max_seconds=0.0)  # stops after its first step
    assert stopped["steps"] == 1 and (tmp_path / "checkpoint.pt").is_file()
    resumed, result = _run(fresh, 4, checkpoint_dir=str(tmp_path))
    assert result["steps"] == 4 and [h["step"] for h in result["history"]] == [1, 2, 3, 4]
    theirs = resumed.state_dict()
    for name, value in straight.state_dict().items():
        assert (value - theirs[name]).abs().max() < 1e-6, name


def test_the_curriculum_grows_scenes_then_holds():
    from stepcritic.train.tiny.base_pretrain import max_items_at

    sizes = [max_items_at(s, 1000) for s in range(1000)]
    assert sizes[0] == 2 and sizes[-1] == 6 and sizes == sorted(sizes)
    assert max_items_at(299, 1000) <= 6 and max_items_at(300, 1000) == 6


def _record_scenes(monkeypatch) -> list:
    """The keys of the scenes `scene_qa.conversation` draws from now on, in order."""
    from stepcritic.train.tiny import scene_qa
    from stepcritic.train.tiny.base_pretrain import scene_key

    drawn, real = [], scene_qa.conversation

    def recording(*args, **kwargs):
        out = real(*args, **kwargs)
        drawn.append(scene_key(out[2]))
        return out
    monkeypatch.setattr(scene_qa, "conversation", recording)
    return drawn


def test_excluded_scenes_are_never_drawn(fresh, monkeypatch):
    from transformers import AutoProcessor

    from stepcritic.train.tiny import scene_qa
    from stepcritic.train.tiny.base_pretrain import SceneConversations, max_items_at, scene_key

    def scenes(step, n):  # the scenes batch `step` would draw without exclusions
        rng = random.Random(f"stepcritic-base/0/{step}")
        return [scene_key(scene_qa.conversation(rng, 6, 96, max_items=max_items_at(step, 1000), with_items=True)[2])
                for _ in range(n)]
    first = scenes(0, 3)
    drawn = _record_scenes(monkeypatch)
    source = SceneConversations(AutoProcessor.from_pretrained(fresh), 0, 96, exclude=frozenset(first))
    source.batch(0, 3, steps=1000)
    assert drawn[:3] == first and len(drawn) == 6  # the excluded scenes came up and were passed over


def test_the_demo_held_out_scenes_are_excluded():
    from stepcritic.data_prep.synth import synthesize
    from stepcritic.train.tiny.base_pretrain import excluded_scenes, scene_key

    excluded = excluded_scenes(n=30)
    for chain in synthesize(30, seed=1000):
        assert scene_key(json.loads(chain["meta"])["scene"]) in excluded


def test_each_image_token_is_named_by_its_cell_and_its_shape(fresh):
    from transformers import AutoTokenizer

    from stepcritic.data_prep.render import Item
    from stepcritic.train.tiny.alignment import cell_words

    tokenizer = AutoTokenizer.from_pretrained(fresh)
    words = cell_words(tokenizer, [[Item("circle", "red", "big", 0, 0)]])
    named = [[tokenizer.decode([i]) for i in row if i != -100] for row in words[0].tolist()]
    assert named[0] == [" top", " left", " big", " red", " circle"]
    assert named[4] == [" centre"] and named[8] == [" bottom", " right"]  # empty cells say where they are


def test_projector_steps_align_image_tokens_with_the_words_of_their_content(fresh):
    """LLaVA's first stage: a few dozen projector-only steps bring each image token most of the way to the sum of
    its words' embeddings (the alignment loss is relative: 1.0 is as far as a zero vector)."""
    _, result = _run_aligned(fresh, steps=60)
    losses = [h["loss"] for h in result["history"]]
    assert losses[-1] < 0.5 * losses[0] and losses[-1] < 1.0, losses


def _run_aligned(path, steps):
    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.base_pretrain import pretrain_base

    model, processor = load_critic(path)
    return model, pretrain_base(model, processor, steps, batch_size=8, log_every=10, align_weight=1.0,
                                align_steps=steps)


def test_the_first_induction_steps_are_word_lists_said_twice_then_scenes_with_their_image(fresh):
    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.base_pretrain import SceneConversations

    _, processor = load_critic(fresh)
    source = SceneConversations(processor, seed=0, image_size=96, induction_steps=3)
    for step in range(3):
        batch = source.batch(step, batch_size=2, steps=10)
        assert "pixel_values" not in batch and len(batch["input_ids"]) == 4
        for ids, mask in zip(batch["input_ids"], batch["attention_mask"]):
            said = ids[mask.bool()].tolist()
            assert said[: len(said) // 2] == said[len(said) // 2:]
    assert "pixel_values" in source.batch(3, batch_size=2, steps=10)


def test_a_run_with_every_stage_goes_induction_then_projector_then_scenes(fresh):
    """The alignment-only steps come after the word lists (they need images); the stages share one schedule."""
    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.base_pretrain import pretrain_base

    model, processor = load_critic(fresh)
    result = pretrain_base(model, processor, 5, batch_size=2, log_every=1, induction_steps=2, align_steps=2,
                           align_weight=0.5)
    assert result["steps"] == 5 and all(h["loss"] == h["loss"] for h in result["history"])  # no NaN


def test_bad_question_weights_are_one_line_and_exit_2(tmp_path, capsys):
    from stepcritic.train.tiny import base_pretrain

    args = base_pretrain.make_parser().parse_args(["--out", str(tmp_path / "run"), "--question-weights", "relatoin=3"])
    assert base_pretrain.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --question-weights: unknown question kind 'relatoin'") and "\n" not in err
    assert not (tmp_path / "run").exists()  # nothing built before the arguments are checked


def test_synth_scenes_out_of_range_is_one_line_and_exit_2(tmp_path, capsys):
    from stepcritic.train.tiny import base_pretrain

    args = base_pretrain.make_parser().parse_args(["--out", str(tmp_path / "run"), "--synth-scenes", "1.5"])
    assert base_pretrain.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --synth-scenes must be between 0 and 1, got 1.5"


def test_an_adapter_folder_continues_its_adapters(fresh, tmp_path):
    """--init-from stepcritic/train/tiny/base_smollm2 (or a run's model/): a continued SmolLM2 base starts from the
    shipped adapters, so what it installs is still a delta on the scaffold and keeps what the earlier runs learnt."""
    import torch

    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.base_pretrain import _load_adapter
    from stepcritic.train.tiny.model import add_lora

    trained = add_lora(load_critic(fresh)[0], rank=4)
    with torch.no_grad():
        for p in trained.parameters():
            if p.requires_grad:
                p.add_(0.01 * torch.randn_like(p))
    trained.save_pretrained(tmp_path / "adapter")
    continued = add_lora(load_critic(fresh)[0], rank=4)
    _load_adapter(continued, str(tmp_path / "adapter"))
    want, got = trained.state_dict(), continued.state_dict()
    changed = [k for k, p in trained.named_parameters() if p.requires_grad]
    assert changed and all(torch.equal(want[k], got[k]) for k in changed)
    with pytest.raises(SystemExit, match="continues an --lm smollm2 run only"):
        _load_adapter(load_critic(fresh)[0], str(tmp_path / "adapter"))


def test_four_tokens_per_cell_align_one_word_each_and_frozen_words_stay_put(private_tiny_cache):
    """--patch-size 16 --silent-empty --freeze-words: the batches carry one word per image token (36 per image), the
    projector-only steps pull those tokens towards their words, and once the questions start the word embeddings
    (the alignment's targets) no longer move while the rest of the language model does."""
    import torch

    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.base_pretrain import SceneConversations, pretrain_base
    from stepcritic.train.tiny.cache import tiny_critic_path

    model, processor = load_critic(tiny_critic_path(vision_pretrain_steps=2, patch_size=16))
    batch = SceneConversations(processor, seed=0, image_size=96, words=True).batch(0, batch_size=2, steps=10)
    assert batch["cell_words"].shape == (2, 36, 2)
    words_before = model.get_input_embeddings().weight.detach().clone()
    layer_before = model.model.language_model.layers[0].mlp.up_proj.weight.detach().clone()
    result = pretrain_base(model, processor, 34, batch_size=4, log_every=1, align_steps=30, align_weight=1.0,
                           silent_empty=True, freeze_words=True)
    losses = [h["loss"] for h in result["history"]]
    assert losses[29] < 0.6 * losses[0], losses[:30]  # the alignment steps align
    assert torch.equal(model.get_input_embeddings().weight, words_before)
    assert not torch.equal(model.model.language_model.layers[0].mlp.up_proj.weight, layer_before)


def test_said_first_batches_supervise_the_reading_as_well_as_the_answer(fresh):
    # --say-first changes the answers only: the same scenes and questions, longer supervised answers
    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.base_pretrain import SceneConversations

    _, processor = load_critic(fresh)
    plain = SceneConversations(processor, seed=0, image_size=96).batch(5, batch_size=2, steps=10)
    said = SceneConversations(processor, seed=0, image_size=96, say_first=True).batch(5, batch_size=2, steps=10)
    assert (said["labels"] != -100).sum() > (plain["labels"] != -100).sum()
    assert (said["labels"] == -100).sum() - (said["attention_mask"] == 0).sum() == \
        (plain["labels"] == -100).sum() - (plain["attention_mask"] == 0).sum()  # the prompts are the same length


def test_the_scenes_a_base_saw_are_drawn_again_phase_by_phase(fresh, monkeypatch):
    # fresh chains are judged only on scenes pre-training never showed: the replay must be what the batches drew
    from transformers import AutoProcessor

    from stepcritic.train.tiny import vision_pretrain
    from stepcritic.train.tiny.base_pretrain import SceneConversations, excluded_scenes, scene_key, scenes_seen

    first = {"steps": 4, "vision_steps": 1, "batch_size": 2, "seed": 3, "induction_steps": 1, "say_first": True,
             "question_weights": ""}
    later = dict(first, question_weights="relation=3")
    record = {"settings": later, "steps": 4, "phases": [{"from_step": 0, "settings": first},
                                                        {"from_step": 2, "settings": later}]}
    drawn = _record_scenes(monkeypatch)
    processor = AutoProcessor.from_pretrained(fresh)
    for step, weights in ((1, None), (2, {"relation": 3}), (3, {"relation": 3})):
        SceneConversations(processor, 3, 96, exclude=excluded_scenes(), weights=weights, say_first=True).batch(
            step, 2, steps=4)
    monkeypatch.undo()
    vision = {scene_key(items) for items in vision_pretrain.draw_scenes(random.Random(3), vision_pretrain.BATCH)}
    seen = scenes_seen(record)
    kept = set(drawn) - excluded_scenes()  # a held-out chain's scene drawn was passed over, as in training
    assert kept <= seen and vision <= seen and len(kept) == 6
    assert seen == vision | kept  # nothing else: not the induction step's word lists
    other = dict(record, phases=[{"from_step": 0, "settings": first}])  # one phase: steps 2-3 draw other questions
    assert scenes_seen(other) != seen


def test_a_run_resumed_with_other_settings_records_each_phase_from_its_first_step(tmp_path):
    # the card of a base resumed with heavier question weights must say which steps saw which weights
    from stepcritic.train.tiny.base_pretrain import RECORD, phases

    def record(settings, phase_list=None):
        (tmp_path / RECORD).write_text(json.dumps({"settings": settings, "phases": phase_list}))

    first = {"steps": 16000, "question_weights": "", "threads": 1, "max_minutes": 95}
    assert phases(str(tmp_path), first, 0) == [{"from_step": 0, "settings": first}]
    record(first)
    watched = dict(first, max_minutes=75, threads=2)  # how long and how fast: not a new phase
    assert phases(str(tmp_path), watched, 9250) == [{"from_step": 0, "settings": watched}]
    weighted = dict(first, question_weights="relation=3")
    both = phases(str(tmp_path), weighted, 9250)
    assert both == [{"from_step": 0, "settings": first}, {"from_step": 9250, "settings": weighted}]
    record(weighted, both)  # stopped again before its next checkpoint: the weighted phase trained nothing
    other = dict(first, question_weights="bigger=3")
    assert phases(str(tmp_path), other, 9250) == [{"from_step": 0, "settings": first},
                                                  {"from_step": 9250, "settings": other}]


def test_questions_per_scene_is_a_number_or_a_range_drawn_per_conversation(fresh, tmp_path, capsys):
    """A base asked only 6 questions a scene reads its picture worse by the 12th; `--questions 6-20` trains it as
    deep as a critic's conversation goes. What it protects: the range is honoured, and a bad one is one line."""
    from transformers import AutoProcessor

    from stepcritic.train.tiny import base_pretrain
    from stepcritic.train.tiny.base_pretrain import SceneConversations, parse_questions

    assert parse_questions("6") == 6 and parse_questions("8-20") == (8, 20)
    for bad in ("many", "20-8", "0"):
        with pytest.raises(ValueError):
            parse_questions(bad)
    source = SceneConversations(AutoProcessor.from_pretrained(fresh), 0, 96, n_questions=(2, 5))
    asked = {sum(m["role"] == "assistant" for m in c) for c in source.conversations(random.Random(0), 40)}
    # the captioned ones answer one more turn ("Describe the image.")
    assert min(asked) == 2 and asked <= {2, 3, 4, 5, 6} and len(asked) >= 4
    args = base_pretrain.make_parser().parse_args(["--out", str(tmp_path / "run"), "--questions", "20-8"])
    assert base_pretrain.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --questions: expected 1 <= low <= high") and "\n" not in err


def test_the_deep_probe_asks_each_question_after_n_answered_ones_about_its_scene(monkeypatch):
    """`probe(after=n)` (`base_probe --after n`): the probed question is the last of n + 1 about one image, the
    earlier ones answered; `after=0` draws exactly what the probe always drew, so older cards still reproduce."""
    import types

    from stepcritic.train.tiny import base_pretrain

    seen = []

    def answered(model, processor, conversations):
        seen.append(conversations)
        return [True] * len(conversations)

    monkeypatch.setattr(base_pretrain, "answered", answered)
    model = types.SimpleNamespace(eval=lambda: None)
    base_pretrain.probe(model, None, per_question=3, say_first=True)
    base_pretrain.probe(model, None, per_question=3, say_first=True, after=4)
    alone, deep = seen[:13], seen[13:]
    assert all(len(c) == 2 for batch in alone for c in batch)
    for batch in deep:
        for c in batch:
            assert [m["role"] for m in c] == ["user", "assistant"] * 5
            assert sum(part["type"] == "image" for m in c for part in m["content"]) == 1  # on the first turn
    seen.clear()
    base_pretrain.probe(model, None, per_question=3, say_first=True)
    assert seen == alone
