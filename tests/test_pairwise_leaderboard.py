"""One pairwise leaderboard for the four kinds of judge: a reward model (`reward:`), a process reward model (`prm:`),
a generative critic (`hf:`) and an API judge (`openai:`, the fake server), each a tiny model trained one step, on
the VL-RewardBench fixture, by one `stepcritic eval --tasks pairwise` command."""

import json
import os

import pytest
from helpers import RECIPES, built_dataset

from stepcritic.cli import main as stepcritic

pytestmark = pytest.mark.usefixtures("private_tiny_cache")  # conftest.py: this module's own tiny-model cache


def train_one_step(recipe_name: str, dataset: str, out) -> str:
    from stepcritic.train.config import parse_recipe
    from stepcritic.train.run import train

    argv = ["--dataset_path", dataset, "--output_dir", str(out), "--report_to", "none", "--max_steps", "1",
            "--bf16", "false", "--dataloader_num_workers", "0", "--eval_strategy", "no",
            "--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "1"]
    train(parse_recipe(os.path.join(RECIPES, recipe_name), argv))
    return str(out)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    kinds = {"reward.yaml": "outcome-rm", "prm.yaml": "prm-sft", "critique-sft.yaml": "critique-sft"}
    return {name: train_one_step(name, built_dataset(tmp_path_factory, kind), root / name)
            for name, kind in kinds.items()}


def test_four_judge_kinds_in_one_pairwise_leaderboard(models, tmp_path):
    from stepcritic.testing.fake_openai_server import FakeOpenAIServer

    chains = str(tmp_path / "vlrb")
    assert stepcritic(["data", "ingest", "--format", "vl-rewardbench", "--input",
                       "tests/fixtures/vl-rewardbench/test.jsonl", "--out", chains, "--on-error", "skip"]) == 0
    out = tmp_path / "out"
    with FakeOpenAIServer() as server:
        specs = [f"reward:{models['reward.yaml']},batch_size=1", f"prm:{models['prm.yaml']},batch_size=1",
                 f"hf:{models['critique-sft.yaml']},max_new_tokens=8,batch_size=1",
                 f"openai:m,base_url={server.base_url},concurrency=2"]
        argv = ["eval", "--chains", chains, "--tasks", "pairwise", "--out", str(out), "--no-progress"]
        for spec in specs:
            argv += ["--judge", spec]
        assert stepcritic(argv) == 0
        listwise = [t for t in server.prompt_texts() if "Reply with the letter" in t]
    metrics = json.loads((out / "metrics.json").read_text())
    names = list(metrics["judges"])  # the specs, in order, as each judge names itself (hf: sorts its options)
    assert len(names) == 4 and names[0] == specs[0] and names[3] == specs[3]
    sections = [metrics["judges"][name]["overall"]["pairwise"] for name in names]
    # the scorers compare their scores; the two generative judges were asked each of the 2 pairs in both orders
    assert [s["score"] for s in sections] == ["chain", "chain", "both orders asked", "both orders asked"]
    assert len(listwise) == 4
    for sec in sections:
        assert sec["n_pairs"] == 2 and sec["accuracy"] is not None
    # the fake server answers "B": the second response shown, whatever the order, so its every verdict flips
    assert sections[3]["flip_rate"] == 1.0 and sections[3]["accuracy"] == 0.5
    report = (out / "report.md").read_text()
    board = report.split("## Leaderboard", 1)[1].split("\n\n")[1].splitlines()
    assert "Pair acc." in board[0]
    assert [line.split("|")[1].strip() for line in board[2:]] == [f"`{name}`" for name in names]


def test_a_step_judge_and_a_scalar_one_take_processbench_text_chains_in_one_first_error_table(models, tmp_path):
    """ProcessBench's chains have no image: the tiny VLM critics judge them as text, side by side with a baseline."""
    chains = str(tmp_path / "processbench")
    assert stepcritic(["data", "ingest", "--format", "processbench", "--input",
                       "tests/fixtures/processbench/gsm8k.json", "--out", chains, "--on-error", "skip"]) == 0
    out = tmp_path / "out"
    specs = [f"prm:{models['prm.yaml']},batch_size=1", f"reward:{models['reward.yaml']},batch_size=1",
             "always-correct"]
    argv = ["eval", "--chains", chains, "--tasks", "first-error", "--out", str(out), "--no-progress"]
    for spec in specs:
        argv += ["--judge", spec]
    assert stepcritic(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics["judges"]) == specs
    prm, reward, baseline = (metrics["judges"][spec]["overall"]["first-error"] for spec in specs)
    assert (prm["n_error"], prm["n_correct"]) == (baseline["n_error"], baseline["n_correct"]) == (2, 1), prm
    assert prm["f1"] is not None and reward["f1"] is None, reward  # a chain score names no first wrong step
    # always-correct never flags a step: right on the chain without an error, wrong on both chains with one
    assert (baseline["error_accuracy"], baseline["correct_accuracy"], baseline["f1"]) == (0.0, 1.0, 0.0), baseline
