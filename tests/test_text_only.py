"""Text-only chains (no image), end to end on the data side: the schema takes them and round-trips them, ingest
keeps them (`jsonl` and `stepwise`), and every build kind makes rows with no image and prompts with no image
placeholder that ask about the text alone."""

import json
import os

import pytest
from datasets import load_from_disk
from helpers import ingest_and_build_every_kind, png, step

from stepcritic.data_prep import contract, prompts
from stepcritic.data_prep.ingest import ingest
from stepcritic.data_prep.schema import (
    SchemaError,
    chain_images,
    is_text_only,
    load_chains,
    save_chains,
    validate_chain,
)

QUESTIONS = ["What is 2 + 3?", "What is 4 * 2?", "What is 9 - 5?", "What is 6 / 3?"]
ANSWERS = ["5", "8", "4", "2"]


def text_chains() -> list[dict]:
    """Four questions, each a right and a wrong chain, as a user writes them: no image anywhere."""
    out = []
    for q, (question, answer) in enumerate(zip(QUESTIONS, ANSWERS)):
        for ok in (True, False):
            said = answer if ok else str(int(answer) + 1)
            steps = [step("Read the numbers in the question.", type="reasoning"),
                     step(f"Work it out: the result is {said}.", correct=ok, type="reasoning",
                          **({} if ok else {"correction": f"Work it out: the result is {answer}."}))]
            out.append({"chain_id": f"q{q}-{'ok' if ok else 'bad'}", "question": question, "steps": steps,
                        "final_answer": said, "reference_answer": answer, "answer_correct": ok})
    return out


def placeholders(messages) -> int:
    return sum(part.get("type") == "image" for m in messages for part in m["content"])


def all_text(messages) -> str:
    return "\n".join(part["text"] for m in messages for part in m["content"] if part["type"] == "text")


def test_schema_takes_chains_without_an_image_and_round_trips_them(tmp_path):
    absent = validate_chain({"chain_id": "a", "question": "What is 2 + 3?", "steps": ["2 + 3 = 5."]}, "a")
    null = validate_chain({"chain_id": "b", "question": "What is 2 + 3?", "image": None, "steps": ["5."]}, "b")
    trl = validate_chain({"chain_id": "c", "question": "What is 2 + 3?", "images": [], "steps": ["5."]}, "c")
    for c in (absent, null, trl):
        assert c["image"] is None and c["extra_images"] == [] and chain_images(c) == [] and is_text_only(c)
    # one question, no image: one group; the same question about an image is another group
    pictured = validate_chain({"chain_id": "d", "question": "What is 2 + 3?", "image": {"bytes": png()},
                               "steps": ["5."]}, "d")
    assert absent["group_id"] == null["group_id"] == trl["group_id"] != pictured["group_id"]
    saved = save_chains([absent, pictured], str(tmp_path / "chains"))
    assert saved[0]["image"] is None and saved[0]["extra_images"] == [] and saved[1]["image"].size == (64, 64)
    loaded = load_chains(str(tmp_path / "chains"), decode_images=False)
    assert chain_images(loaded[0]) == [] and len(chain_images(loaded[1])) == 1
    again = validate_chain(dict(loaded[0]), "again")
    assert again["group_id"] == absent["group_id"] and is_text_only(again)


def test_images_without_a_first_one_name_the_field():
    with pytest.raises(SchemaError, match="x, field 'image': extra images without a first one"):
        validate_chain({"chain_id": "x", "question": "q", "extra_images": [{"bytes": png()}], "steps": ["s"]}, "x")
    with pytest.raises(SchemaError, match="x, field 'images': expected a list of images, got str"):
        validate_chain({"chain_id": "x", "question": "q", "images": "a.png", "steps": ["s"]}, "x")
    with pytest.raises(SchemaError, match=r"x, field 'image\[1\]': image is missing"):
        validate_chain({"chain_id": "x", "question": "q", "image": [{"bytes": png()}, None], "steps": ["s"]}, "x")


def test_prompts_of_a_text_only_chain_have_no_placeholder_and_no_image_words():
    chain = validate_chain(text_chains()[1], "c")
    pictured = validate_chain(dict(text_chains()[1], image={"bytes": png()}), "p")
    asked = {
        "critique": prompts.critique_messages(chain), "critique notes": prompts.critique_messages(chain, notes=True),
        "prm": prompts.prm_messages(chain), "prm notes": prompts.prm_messages(chain, notes=True),
        "outcome": prompts.outcome_messages(chain)[0], "score": prompts.score_messages(chain),
        "step score": prompts.step_score_messages(chain, 1), "step check": prompts.step_check_messages(chain, 1),
        "listwise": prompts.listwise_messages([chain, chain]),
        **{task: prompts.verifier_messages(task, chain, 1) for task in prompts.VERIFIER_TASKS},
    }
    for name, messages in asked.items():
        assert placeholders(messages) == 0, name
        # description_relevance's answer words are a fixed vocabulary, one of them "image"
        text = all_text(messages).lower().replace("- image:", "").replace("both, image, logic", "")
        assert "image" not in text and "picture" not in text, name
    # the same chain with an image asks as before
    assert placeholders(prompts.critique_messages(pictured)) == 1
    assert "the image" in all_text(prompts.critique_messages(pictured))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Text-only chains through `data ingest --format jsonl` and `data build` of every kind, by the CLI."""
    root = tmp_path_factory.mktemp("text")
    jsonl = root / "chains.jsonl"
    jsonl.write_text("".join(json.dumps(c) + "\n" for c in text_chains()))
    return ingest_and_build_every_kind(root, jsonl)


def test_ingest_counts_text_only_chains(built, capsys):
    chains_dir, _ = built
    stats = json.load(open(os.path.join(chains_dir, "stats.json")))
    assert (stats["n_records"], stats["n_chains"], stats["text_only_chains"]) == (8, 8, 8)
    assert all(c["image"] is None for c in load_chains(chains_dir))
    assert len({c["group_id"] for c in load_chains(chains_dir)}) == 4  # one group per question
    assert "8 chains are text only" in open(os.path.join(chains_dir, "README.md")).read()


@pytest.mark.parametrize("kind", contract.KIND_NAMES)
def test_every_build_kind_makes_text_only_rows(kind, built):
    _, out = built
    splits = load_from_disk(out[kind])
    rows = [row for split in splits.values() for row in split]
    assert rows and all(split in splits for split in ("train", "test"))
    for row in rows:
        assert row["images"] == []
        messages = row["messages"] if "messages" in row else row["prompt"]
        assert placeholders(messages) == 0
    stats = json.load(open(os.path.join(out[kind], "build_stats.json")))
    assert stats["text_only_chains"] == 8
    assert "Text only" in open(os.path.join(out[kind], "README.md")).read()


def test_stepwise_rows_without_an_image_are_text_only(tmp_path):
    rows = [{"id": "a", "prompt": "What is 1 + 1?", "completions": ["1 + 1 = 2."], "labels": ["+"]},
            {"id": "b", "prompt": "What is 1 + 1?", "completions": ["1 + 1 = 3."], "labels": ["-"], "images": []},
            {"id": "c", "prompt": "What is 1 + 1?", "completions": ["2."], "labels": ["+"], "image": "nope.png"}]
    path = tmp_path / "prm.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    stats = ingest("stepwise", str(path), str(tmp_path / "out"), on_error="skip", log=lambda _: None)
    assert (stats["n_records"], stats["n_chains"], stats["n_rejected"], stats["text_only_chains"]) == (3, 2, 1, 2)
    assert [(r["where"], r["field"]) for r in stats["rejected"]] == [("prm.jsonl:3", "image")]


@pytest.mark.usefixtures("private_tiny_cache")
@pytest.mark.parametrize("recipe_name, kind", [("prm.yaml", "prm-sft"), ("critique-sft.yaml", "critique-sft"),
                                               ("reward.yaml", "outcome-rm")])
def test_the_tiny_critic_trains_a_step_on_text_only_rows(recipe_name, kind, built, tmp_path):
    """A vision-language critic takes text-only rows: the step runs and its vision tower is never called."""
    import torch
    from helpers import RECIPES

    from stepcritic.train.config import parse_recipe
    from stepcritic.train.run import train

    _, out = built
    argv = ["--dataset_path", out[kind], "--output_dir", str(tmp_path / "run"), "--report_to", "none",
            "--max_steps", "1", "--bf16", "false", "--dataloader_num_workers", "0", "--eval_strategy", "no",
            "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1"]
    ran = set()
    hook = torch.nn.modules.module.register_module_forward_hook(lambda module, args, result: ran.add(type(module)))
    try:
        metrics = train(parse_recipe(os.path.join(RECIPES, recipe_name), argv))
    finally:
        hook.remove()
    assert metrics["train_loss"] == metrics["train_loss"]  # not NaN
    assert not [cls for cls in ran if "Vision" in cls.__name__]
