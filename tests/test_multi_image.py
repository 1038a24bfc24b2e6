"""Chains with two images, end to end: `data ingest --format jsonl` keeps both in order, every build kind
puts both in each row with one placeholder per image, one training step of the tiny critic per method feeds both
to the vision tower, and every judge kind that looks at images is shown both."""

import json
import os

import pytest
import torch
from helpers import RECIPES, ingest_and_build_every_kind, png, step

from stepcritic.cli import main as stepcritic
from stepcritic.data_prep import contract, prompts
from stepcritic.data_prep.schema import SchemaError, chain_images, load_chains, validate_chain
from stepcritic.eval.correction import correction_messages

COLOURS = {"red": (255, 0, 0), "blue": (0, 0, 255), "green": (0, 160, 0), "yellow": (230, 200, 0)}
PAIRS = [("red", "blue"), ("green", "yellow"), ("blue", "green"), ("yellow", "red")]
QUESTION = "What colours are the circle in the first image and the square in the second?"


def write_chains(folder) -> str:
    """Four groups (one pair of pictures, one question) of a right and a wrong chain, as a user writes them."""
    lines = []
    for g, (first, second) in enumerate(PAIRS):
        names = [f"g{g}-circle.png", f"g{g}-square.png"]
        for name, colour, shape in zip(names, (first, second), ("circle", "square")):
            (folder / name).write_bytes(png(COLOURS[colour], shape=shape))
        wrong = PAIRS[(g + 1) % len(PAIRS)][1]
        for ok in (True, False):
            said = second if ok else wrong
            steps = [step(f"The first image shows a {first} circle."),
                     step(f"The second image shows a {said} square.", correct=ok,
                          **({} if ok else {"correction": f"The second image shows a {second} square."})),
                     step(f"So the answer is {first} and {said}.", correct=ok, type="reasoning")]
            lines.append({"chain_id": f"g{g}-{'ok' if ok else 'bad'}", "question": QUESTION, "images": names,
                          "steps": steps, "final_answer": f"{first} and {said}",
                          "reference_answer": f"{first} and {second}", "answer_correct": ok})
    path = folder / "chains.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


pytestmark = pytest.mark.usefixtures("private_tiny_cache")  # conftest.py: this module's own tiny-model cache


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The ingested chains folder and {kind: built folder}, by the README's commands."""
    root = tmp_path_factory.mktemp("multi")
    return ingest_and_build_every_kind(root, write_chains(root))


def placeholders(messages) -> int:
    return sum(part.get("type") == "image" for m in messages for part in m["content"])


def test_ingest_keeps_both_images_in_order(data):
    chains_dir, _ = data
    chains = load_chains(chains_dir)
    assert len(chains) == 8
    for row in chains:
        first, second = chain_images(row)
        colours = PAIRS[int(row["chain_id"][1])]
        assert first.getpixel((32, 32)) == COLOURS[colours[0]] and second.getpixel((32, 32)) == COLOURS[colours[1]]
    stats = json.load(open(os.path.join(chains_dir, "stats.json")))
    assert stats["label_notes"]["multi_image_chains"] == 8 and stats["label_notes"]["extra_images"] == 8
    # a group is one pair of pictures and one question
    assert len({row["group_id"] for row in chains}) == 4


def test_one_image_chains_read_as_before_and_mistakes_name_the_field(tmp_path):
    one = validate_chain({"chain_id": "c", "question": "q", "image": {"bytes": png()}, "steps": ["s"]}, "c")
    assert one["extra_images"] == [] and len(chain_images(one)) == 1
    # a chains dataset saved before extra_images existed has no such column: its chains show their one image
    assert chain_images({"image": "x"}) == ["x"]
    listed = validate_chain({"chain_id": "c", "question": "q", "image": [{"bytes": png()}, {"bytes": png()}],
                             "steps": ["s"]}, "c")
    assert len(chain_images(listed)) == 2 and listed["group_id"] != one["group_id"]
    with pytest.raises(SchemaError, match=r"c, field 'images\[1\]': image file not found"):
        validate_chain({"chain_id": "c", "question": "q", "images": [{"bytes": png()}, "nope.png"], "steps": ["s"]},
                       "c", str(tmp_path))
    with pytest.raises(SchemaError, match="field 'images': give the images once"):
        validate_chain({"chain_id": "c", "question": "q", "image": {"bytes": png()}, "images": [{"bytes": png()}],
                        "steps": ["s"]}, "c")
    with pytest.raises(SchemaError, match="field 'images': expected a list of images"):
        validate_chain({"chain_id": "c", "question": "q", "images": "one.png", "steps": ["s"]}, "c")
    # an empty list is no image at all: a text-only chain (tests/test_text_only.py)
    assert chain_images(validate_chain({"chain_id": "c", "question": "q", "images": [], "steps": ["s"]}, "c")) == []


@pytest.mark.parametrize("kind", contract.KIND_NAMES)
def test_every_build_kind_shows_both_images(kind, data):
    from datasets import load_from_disk

    _, built = data
    splits = load_from_disk(built[kind])
    rows = [row for split in splits.values() for row in split]
    assert rows
    for row in rows:
        assert len(row["images"]) == 2
        first = row["messages"] if "messages" in row else row["prompt"]
        assert placeholders(first) == 2 and placeholders(first[:1]) == 2  # both, in the first user turn


class VisionCounter:
    """How many images each forward pass of a vision tower took (a global hook, so any model is seen)."""

    def __init__(self):
        self.counts = []

    def __enter__(self):
        def hook(module, args, out):
            if "Vision" in type(module).__name__ and type(module).__name__.endswith("Model"):
                self.counts.append(out.last_hidden_state.shape[0])

        self._handle = torch.nn.modules.module.register_module_forward_hook(hook)
        return self

    def __exit__(self, *exc):
        self._handle.remove()


def train_one_step(recipe_name: str, dataset: str, out) -> tuple[str, list[int]]:
    from stepcritic.train.config import parse_recipe
    from stepcritic.train.run import train

    argv = ["--dataset_path", dataset, "--output_dir", str(out), "--report_to", "none", "--max_steps", "1",
            "--bf16", "false", "--dataloader_num_workers", "0", "--eval_strategy", "no"]
    if recipe_name == "grpo.yaml":  # one generation round: 2 short completions of one prompt
        argv += ["--num_generations", "2", "--max_completion_length", "8", "--per_device_train_batch_size", "2",
                 "--gradient_accumulation_steps", "1"]
    else:
        argv += ["--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "1"]
    with VisionCounter() as seen:
        train(parse_recipe(os.path.join(RECIPES, recipe_name), argv))
    return str(out), seen.counts


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    """{recipe: (output folder, images per vision forward)} after one step of each tiny recipe."""
    _, built = data
    root = tmp_path_factory.mktemp("runs")
    kinds = {"prm.yaml": "prm-sft", "critique-sft.yaml": "critique-sft", "dpo.yaml": "critique-pref",
             "reward.yaml": "outcome-rm", "grpo.yaml": "critique-sft"}
    return {name: train_one_step(name, built[kind], root / name) for name, kind in kinds.items()}


# images per training forward: one chain of two (prm, sft); chosen and rejected of one pair (dpo, reward); the two
# sampled completions of one prompt (grpo)
IMAGES_PER_FORWARD = {"prm.yaml": 2, "critique-sft.yaml": 2, "dpo.yaml": 4, "reward.yaml": 4, "grpo.yaml": 4}


@pytest.mark.parametrize("recipe_name", sorted(IMAGES_PER_FORWARD))
def test_one_training_step_feeds_both_images(recipe_name, trained):
    _, counts = trained[recipe_name]
    assert counts and set(counts) == {IMAGES_PER_FORWARD[recipe_name]}, counts


@pytest.mark.parametrize("recipe", ["qwen2.5-vl-3b/prm-lora.yaml", "qwen2.5-vl-3b/sft-lora.yaml"])
def test_a_real_model_recipe_trains_on_two_image_chains(recipe, data, tmp_path):
    """Qwen2.5-VL (a tiny random checkpoint of its architecture): several images per conversation is native to it."""
    from stepcritic.train import archs
    from stepcritic.train.config import parse_recipe
    from stepcritic.train.run import train
    from stepcritic.train.tiny.offline_models import build_random_checkpoint

    _, built = data
    path = os.path.join(os.path.dirname(RECIPES), recipe)
    kind = parse_recipe(path).script_args.dataset_kind
    model = build_random_checkpoint(archs.model_type_of(parse_recipe(path).model_args.model_name_or_path),
                                    tmp_path / "model", size="tiny")
    argv = ["--dataset_path", built[kind], "--output_dir", str(tmp_path / "run"), "--report_to", "none",
            "--max_steps", "1", "--model_name_or_path", str(model), "--bf16", "false", "--dtype", "float32",
            "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", "--eval_strategy", "no"]
    ran = set()
    hook = torch.nn.modules.module.register_module_forward_hook(lambda module, args, out: ran.add(type(module)))
    try:
        metrics = train(parse_recipe(path, argv))
    finally:
        hook.remove()
    assert metrics["train_loss"] == metrics["train_loss"]  # not NaN
    assert [cls for cls in ran if "Vision" in cls.__name__]


def judge_specs(trained, base_url):
    return {
        "hf": f"hf:{trained['critique-sft.yaml'][0]},max_new_tokens=8,batch_size=1",
        "hf-structured": f"hf:{trained['critique-sft.yaml'][0]},structured=true,max_new_tokens=4,batch_size=1",
        "prm": f"prm:{trained['prm.yaml'][0]},batch_size=1",
        "reward": f"reward:{trained['reward.yaml'][0]},batch_size=1",
        "openai": f"openai:m,base_url={base_url},concurrency=2",
        "openai-lookback": f"openai:m,base_url={base_url},concurrency=2,strategy=lookback",
    }


@pytest.mark.parametrize("name", ["hf", "hf-structured", "prm", "reward", "openai", "openai-lookback"])
def test_every_judge_kind_is_shown_both_images(name, data, trained):
    from stepcritic.eval.judges.registry import make_judge
    from stepcritic.testing.fake_openai_server import FakeOpenAIServer

    chains_dir, _ = data
    chains = [row for row in load_chains(chains_dir)][:2]
    with FakeOpenAIServer() as server, VisionCounter() as seen:
        judge = make_judge(judge_specs(trained, server.base_url)[name])
        critiques = judge.judge_batch(chains)
    assert len(critiques) == 2
    if name.startswith("openai"):
        sent = [[part for m in r["body"]["messages"] for part in m["content"] if part.get("type") == "image_url"]
                for r in server.requests]
        assert sent and all(len(parts) == 2 for parts in sent)
        assert all(c.valid for c in critiques)
    else:  # one chain per batch: every pass through the tower took its two images together
        assert seen.counts and set(seen.counts) == {2}, seen.counts


def test_eval_cli_runs_on_two_image_chains(data, trained, tmp_path):
    chains_dir, _ = data
    out = tmp_path / "eval"
    code = stepcritic(["eval", "--chains", chains_dir, "--judge", f"prm:{trained['prm.yaml'][0]}",
                       "--judge", "text-only:" + f"prm:{trained['prm.yaml'][0]}", "--out", str(out)])
    assert code == 0
    predictions = [json.loads(line) for line in open(out / "predictions.jsonl")]
    assert len(predictions) == 16  # 8 chains x 2 judges


def test_prompts_place_one_placeholder_per_image():
    two = {"chain_id": "c", "question": "q", "image": "a", "extra_images": ["b"], "steps": [{"text": "s"}]}
    assert placeholders(prompts.critique_messages(two)) == 2
    assert placeholders(prompts.prm_messages(dict(two, steps=[{"text": "s", "correct": True}] * 3))) == 2
    assert placeholders(prompts.critique_messages(dict(two, extra_images=[]))) == 1
    review = {"steps": ["correct"], "answer": "correct"}
    assert placeholders(correction_messages(two, review)) == 2
