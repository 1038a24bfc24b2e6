"""Training on verifier-sft data in the conversation layouts (`data build --verifier-layout task|chain`).

The contract takes either column set; SFT's loss covers every assistant turn of a conversation; GRPO asks each
turn's question on its own, exactly as the "rows" layout asks it; one optimiser step of each method and the dry
run work on a "chain" dataset. Offline, CPU, on the small random tiny critic (no pre-training steps).
"""

import io
import json
import os

import pytest
from helpers import RECIPES, chains

from stepcritic.data_prep import build, build_rows, contract
from stepcritic.train import grpo
from stepcritic.train.config import parse_recipe

# what is under test is the data path, not what the critic learns
TINY = dict(report_to="none", dataloader_num_workers=0)


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """{layout: folder}: verifier-sft built from the same 8 hand-made chains (3 steps each) in every layout."""
    root = tmp_path_factory.mktemp("verifier")
    for layout in contract.VERIFIER_LAYOUTS:
        build.build_dataset(chains(8), "verifier-sft", str(root / layout), test_fraction=0.25, seed=0,
                            verifier_layout=layout)
    return {layout: str(root / layout) for layout in contract.VERIFIER_LAYOUTS}


def load(folder, split="train"):
    from datasets import load_from_disk

    return load_from_disk(folder)[split]


def recipe_for(name, folder, out, **overrides):
    return parse_recipe(os.path.join(RECIPES, name), dict(dataset_path=folder, output_dir=str(out), **TINY,
                                                          **overrides))


# ----------------------------------------------------------------------------- (a) the contract


def test_the_contract_takes_either_column_set_and_names_what_neither_has():
    rows, chain = build_rows.features("verifier-sft"), build_rows.features("verifier-sft", "chain")
    assert contract.missing_columns("verifier-sft", rows) == []
    assert contract.missing_columns("verifier-sft", chain) == []
    for alternative in contract.KINDS["verifier-sft"].alternatives:  # what the conversation layouts write
        assert set(alternative) <= set(chain) == set(contract.VERIFIER_CONVERSATION_COLUMNS)
    assert contract.missing_columns("verifier-sft", ["messages", "images", "chain_id"]) == [
        "task + label or tasks + labels"]
    assert contract.missing_columns("verifier-sft", ["images", "tasks"]) == ["messages", "labels"]  # nearest set
    assert contract.missing_columns("verifier-sft", ["chain_id"]) == [
        "messages", "images", "task + label or tasks + labels"]
    assert contract.missing_columns("prm-sft", ["prompt"]) == ["messages", "images"]  # one set: as before
    assert contract.is_conversation("verifier-sft", chain) and not contract.is_conversation("verifier-sft", rows)


def test_training_refuses_verifier_data_with_neither_layouts_columns(tmp_path, monkeypatch):
    from datasets import Dataset, DatasetDict

    from stepcritic.train import common
    from stepcritic.train.run import train

    monkeypatch.setattr(common, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    messages = [[{"role": "user", "content": [{"type": "text", "text": "q"}]}]]
    DatasetDict(train=Dataset.from_dict({"messages": messages, "images": [[]], "task": ["step_type"]})).save_to_disk(
        str(tmp_path / "own"))
    recipe = recipe_for("critique-sft.yaml", str(tmp_path / "own"), tmp_path / "run", dataset_kind="verifier-sft")
    with pytest.raises(contract.DataContractError,
                       match=r"lack \['label'\], which kind 'verifier-sft' needs"):
        train(recipe)
    DatasetDict(train=Dataset.from_dict({"messages": messages, "images": [[]]})).save_to_disk(str(tmp_path / "bare"))
    recipe = recipe_for("critique-sft.yaml", str(tmp_path / "bare"), tmp_path / "run", dataset_kind="verifier-sft")
    with pytest.raises(contract.DataContractError, match=r"lack \['task \+ label or tasks \+ labels'\]"):
        train(recipe)


# ----------------------------------------------------------------------------- (b) GRPO's prompts


def test_grpo_asks_each_turn_of_a_conversation_alone_with_its_image(layouts):
    conversations = load(layouts["task"])
    index = next(i for i, tasks in enumerate(conversations["tasks"]) if len(tasks) == 3)
    source = conversations[index]
    prompts = grpo.as_prompts(conversations.select([index]), "verifier-sft")
    assert len(prompts) == 3 and "messages" not in prompts.column_names
    assert not {"tasks", "labels", "step_indices"} & set(prompts.column_names)
    singles = {(row["task"], row["step_index"]): row for row in grpo.as_prompts(load(layouts["rows"]), "verifier-sft")
               if row["chain_id"] == source["chain_id"]}
    for k, row in enumerate(prompts):
        (message,) = row["prompt"]  # the turn's question alone: no earlier turn, no gold answer
        assert message["role"] == "user"
        assert [part["type"] for part in message["content"]] == ["image", "text"]
        assert (row["task"], row["label"], row["step_index"]) == (
            source["tasks"][k], source["labels"][k], source["step_indices"][k])
        assert message["content"][1]["text"] == source["messages"][2 * k]["content"][-1]["text"]
        single = singles[(row["task"], row["step_index"])]
        assert row["prompt"] == single["prompt"] and row["label"] == single["label"]
        assert row["chain_id"] == source["chain_id"] and len(row["images"]) == 1


def _key(row):
    return (row["chain_id"], row["task"], row["step_index"], row["label"], json.dumps(row["prompt"]))


@pytest.mark.parametrize("layout", ["task", "chain"])
def test_grpo_prompts_of_a_conversation_layout_are_the_rows_layouts(layouts, layout):
    """Every split, every question: the same GRPO rows (prompt, task, label, image) whatever the layout."""
    for split in contract.SPLITS:
        rows = grpo.as_prompts(load(layouts["rows"], split), "verifier-sft")
        conversations = load(layouts[layout], split)
        turns = grpo.as_prompts(conversations, "verifier-sft")
        assert len(turns) == sum(len(tasks) for tasks in conversations["tasks"]) == len(rows)
        assert sorted(map(_key, turns)) == sorted(map(_key, rows))
        assert set(turns.column_names) == set(rows.column_names)
        assert turns.features["images"] == rows.features["images"]
        assert turns[0]["images"][0].size == rows[0]["images"][0].size  # still decodable images
        # batches that end mid-split (Arrow slices with offsets) give the same rows as one batch
        small = conversations.with_format("arrow").map(grpo.verifier_turn_rows, batched=True, batch_size=2,
                                                       remove_columns=["messages", "tasks", "labels", "step_indices"])
        assert [_key(row) for row in small.with_format(None)] == [_key(row) for row in turns]


# ----------------------------------------------------------------------------- (c) one step of each method


def test_one_sft_step_on_chain_conversations(layouts, tmp_path):
    from stepcritic.train.run import train

    recipe = recipe_for("critique-sft.yaml", layouts["chain"], tmp_path / "run", max_steps=1,
                        per_device_train_batch_size=2, logging_steps=1, max_length=4096)
    metrics = train(recipe)
    assert recipe.script_args.dataset_kind == "verifier-sft"  # adopted from build_stats.json
    assert metrics["train_loss"] > 0 and metrics["train_loss"] == metrics["train_loss"]
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == 1


def test_one_grpo_step_on_chain_conversations_rewards_each_turns_label(layouts, tmp_path, monkeypatch):
    from stepcritic.train.run import train

    calls = []
    real_reward = grpo.verifier_reward

    def recording_reward(completions, label, task, **kwargs):
        calls.append((list(task), list(label), kwargs.get("step_index")))
        return real_reward(completions, label, task)

    monkeypatch.setattr(grpo, "verifier_reward", recording_reward)
    recipe = recipe_for("grpo.yaml", layouts["chain"], tmp_path / "run", max_steps=1, per_device_train_batch_size=2,
                        num_generations=2, max_completion_length=8, logging_steps=1)
    train(recipe)
    assert recipe.script_args.dataset_kind == "verifier-sft"
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    questions = {(t, i, lab) for row in load(layouts["chain"])
                 for t, i, lab in zip(row["tasks"], row["step_indices"], row["labels"])}
    assert calls  # each completion is rewarded against the task and label of its own turn
    assert all(set(zip(tasks, indices, labels)) <= questions for tasks, labels, indices in calls)


# ----------------------------------------------------------------------------- (d) SFT trains every answer


@pytest.fixture(scope="module")
def sft_collator(layouts, tmp_path_factory):
    from stepcritic.train import common, fast_masks, sft

    fast_masks.install()  # as `train` does; tests/test_fast_masks.py checks it masks as transformers does
    recipe = recipe_for("critique-sft.yaml", layouts["chain"], tmp_path_factory.mktemp("run"),
                        dataset_kind="verifier-sft", max_length=4096, per_device_train_batch_size=2)
    model, processor = common.load_model(recipe)
    trainer = sft.build_trainer(recipe, model, processor, load(layouts["chain"]), None)
    return trainer.data_collator, processor.tokenizer


@pytest.mark.parametrize("mask", ["fast", "transformers"])
@pytest.mark.parametrize("layout", ["task", "chain"])
def test_sft_loss_covers_every_assistant_turn(layouts, sft_collator, layout, mask, monkeypatch):
    import torch
    from transformers.processing_utils import ProcessorMixin

    if mask == "transformers":  # the loop fast_masks replaces
        monkeypatch.setattr(ProcessorMixin, "_adjust_assistant_masks_indices",
                            ProcessorMixin._slow_adjust_assistant_masks_indices)
    collator, tokenizer = sft_collator
    data = load(layouts[layout])
    two_turns = next(i for i, tasks in enumerate(data["tasks"]) if len(tasks) == 2) if layout == "task" else 0
    rows = [dict(data[i]) for i in (two_turns, 1)]
    batch = collator(rows)
    assert batch["input_ids"].shape[1] < 4096  # nothing cut off
    for i, row in enumerate(rows):
        trained = batch["labels"][i] != -100
        answers = [m["content"][0]["text"] + tokenizer.eos_token for m in row["messages"] if m["role"] == "assistant"]
        assert len(answers) == len(row["tasks"]) >= 2
        # the trained tokens are one run per assistant turn, each exactly that turn's answer and its end of turn
        edges = torch.diff(trained.long(), prepend=torch.tensor([0]), append=torch.tensor([0])).nonzero().flatten()
        runs = [batch["input_ids"][i][start:end] for start, end in zip(edges[::2], edges[1::2])]
        assert [tokenizer.decode(run) for run in runs] == answers
        expected = sum(len(tokenizer(answer, add_special_tokens=False)["input_ids"]) for answer in answers)
        assert int(trained.sum()) == expected


# ----------------------------------------------------------------------------- the dry run


@pytest.mark.parametrize("name", ["critique-sft.yaml", "grpo.yaml"])
def test_dry_run_reports_conversations_and_passes(layouts, name, tmp_path):
    from stepcritic.train.preflight import dry_run

    extra = dict(num_generations=2, per_device_train_batch_size=2, max_steps=-1, num_train_epochs=1) \
        if name == "grpo.yaml" else dict(max_length=4096)
    recipe = recipe_for(name, layouts["chain"], tmp_path / "run", **extra)
    out, err = io.StringIO(), io.StringIO()
    assert dry_run(recipe, out, err) == 0, err.getvalue()
    report = out.getvalue()
    train = load(layouts["chain"])
    turns = sum(len(tasks) for tasks in train["tasks"])
    assert f"train {len(train):,}, test " in report and f"verifier conversations: train {turns:,}, test " in report
    assert " tokens" in report and "dry run: ok" in report
    if name == "grpo.yaml":  # the plan counts one prompt per turn: 1 prompt x 2 generations per step
        assert "one GRPO prompt each" in report
        (steps,) = [line for line in report.splitlines() if line.strip().startswith("steps")]
        assert f"about {turns:,}" in steps
