"""The generative PRM: 2-step training, one-pass scoring equal to step-by-step judging, and the PRM judge."""

import os

import pytest
import torch
from helpers import RECIPES, chain, chains, step

from stepcritic.data_prep import prompts
from stepcritic.data_prep.build import build_dataset
from stepcritic.data_prep.images import to_rgb
from stepcritic.train.config import parse_recipe
from stepcritic.train.scoring import PRMScorer


@pytest.fixture(scope="module")
def trained_prm(tmp_path_factory):
    """A tiny PRM after 2 full fine-tuning steps on prm-sft rows."""
    from stepcritic.train.run import train

    root = tmp_path_factory.mktemp("prm")
    build_dataset(chains(8), "prm-sft", str(root / "data"), test_fraction=0.25, seed=0)
    recipe = parse_recipe(os.path.join(RECIPES, "prm.yaml"), dict(
        dataset_path=str(root / "data"), output_dir=str(root / "run"), max_steps=2, per_device_train_batch_size=2,
        logging_steps=1, report_to="none"))
    metrics = train(recipe)
    return str(root / "run"), recipe, metrics


def uneven_chains():
    """Chains of different lengths (so a batch is padded), with incorrect steps."""
    short = chain("short", steps=[step("The image shows one circle."), step("It is blue.", correct=False)])
    return [chains(2)[1], short, chain("long", steps=[step(f"Step number {i}.", correct=i % 2 == 0) for i in range(5)])]


def test_two_prm_steps_change_the_model_and_it_scores(trained_prm):
    from stepcritic.train.loading import load_critic

    path, recipe, metrics = trained_prm
    assert metrics["train_loss"] > 0
    before = dict(load_critic(recipe.model_path())[0].named_parameters())
    after = dict(load_critic(path)[0].named_parameters())
    assert any(not after[name].equal(before[name]) for name in after)

    scores = PRMScorer.from_pretrained(path).score(uneven_chains())
    assert [len(s) for s in scores] == [3, 2, 5]
    assert all(0.0 < p < 1.0 for row in scores for p in row)


def step_by_step(scorer, one_chain):
    """P(+) per step by asking after each step (placeholder `+` fed back), one forward pass per step."""
    from trl.data_utils import prepare_multimodal_messages

    conversation = prompts.prm_prompt_messages(one_chain)
    out = []
    for k in range(len(one_chain["steps"])):
        messages = prepare_multimodal_messages(conversation[:2 * k + 1], images=[to_rgb(one_chain["image"])])
        inputs = scorer.processor.apply_chat_template([messages], add_generation_prompt=True, tokenize=True,
                                                      return_dict=True, return_tensors="pt")
        with torch.no_grad():
            logits = scorer.model(**inputs).logits[0, -1]
        out.append(float(logits[[scorer.positive_id, scorer.negative_id]].softmax(-1)[0]))
    return out


def test_one_pass_equals_step_by_step_judging(trained_prm):
    scorer = PRMScorer.from_pretrained(trained_prm[0], dtype="float32", batch_size=3)
    batch = uneven_chains()
    one_pass = scorer.score(batch)
    for one_chain, scores in zip(batch, one_pass):
        assert scores == pytest.approx(step_by_step(scorer, one_chain), abs=1e-4)


def test_prm_judge_verdicts_scores_and_fingerprint(trained_prm, tmp_path):
    import shutil

    from stepcritic.eval.judges.registry import make_judge

    path = trained_prm[0]
    judge = make_judge(f"prm:{path},threshold=0.5,aggregate=mean")
    batch = uneven_chains()
    p_correct = judge.scorer.score(batch)
    critiques = judge.judge_batch(batch)
    for critique, probs in zip(critiques, p_correct):
        assert critique.verdicts == [p >= 0.5 for p in probs]
        assert critique.p_incorrect == pytest.approx([1 - p for p in probs])
        assert critique.chain_score == pytest.approx(sum(probs) / len(probs))
    strict = make_judge(f"prm:{path},threshold=1.0").judge_batch(batch)
    assert all(v is False for c in strict for v in c.verdicts)
    assert make_judge(f"prm:{path}").judge_batch(batch)[2].chain_score == pytest.approx(min(p_correct[2]))

    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    before = make_judge(f"prm:{copy}").fingerprint()
    assert make_judge(f"prm:{copy}").fingerprint() == before
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")  # "retrained" in place: same path, other weights
    assert make_judge(f"prm:{copy}").fingerprint() != before
    with pytest.raises(ValueError):
        make_judge(f"prm:{path},aggregate=max")


def test_prm_training_never_shows_gold_judgements_in_the_input(trained_prm, tmp_path):
    """Teacher-forcing earlier `+`/`-` would let the PRM copy them (errors propagate) instead of judging."""
    from stepcritic.train import common, prm

    _, recipe, _ = trained_prm
    model, processor = common.load_model(recipe)
    train_data, eval_data = common.load_splits(recipe)
    trainer = prm.build_trainer(recipe, model, processor, train_data, eval_data)
    batch = trainer.data_collator([dict(train_data[i]) for i in range(4)])
    tokenizer = processor.tokenizer
    plus, minus = (tokenizer.convert_tokens_to_ids(t) for t in (prompts.PRM_POSITIVE, prompts.PRM_NEGATIVE))
    judged = (batch["labels"] == plus) | (batch["labels"] == minus)
    assert (batch["labels"] == minus).any()  # the gold `-` is still the target...
    assert (batch["input_ids"][judged] == plus).all()  # ...but every judgement slot's input is the placeholder
    # exactly the context PRMScorer builds for the same chains
    assert int(judged.sum()) == sum(len(row["messages"]) // 2 for row in (train_data[i] for i in range(4)))


def test_a_prm_is_scored_with_the_template_its_rows_were_built_with(tmp_path):
    # protects: a PRM trained on rows built with `--template` was judged with the default prompt, which it never saw
    import json

    from stepcritic.train.run import train

    template = tmp_path / "mine.j2"
    template.write_text("{% if step_number == 1 %}Q: {{ question }} Judge.\n{% endif %}S{{ step_number }}: {{ step }}")
    build_dataset(chains(4), "prm-sft", str(tmp_path / "data"), test_fraction=0.25, template=str(template))
    recipe = parse_recipe(os.path.join(RECIPES, "prm.yaml"), dict(
        dataset_path=str(tmp_path / "data"), output_dir=str(tmp_path / "run"), max_steps=1,
        per_device_train_batch_size=2, report_to="none", save_strategy="no"))
    train(recipe)
    with open(tmp_path / "run" / "config.json") as f:
        assert json.load(f)["stepcritic_prm_template"]["source"] == template.read_text()
    template.unlink()  # the model keeps the template's source: judging needs no file
    scorer = PRMScorer.from_pretrained(str(tmp_path / "run"), batch_size=2)
    text = scorer.processor.tokenizer.decode(scorer.encode(chains(2)[:1])["input_ids"][0])
    assert "Judge." in text and "S1:" in text and "I will show you" not in text


def test_the_default_template_is_not_recorded_and_a_changed_one_is_refused(tmp_path):
    import json

    from stepcritic.data_prep.contract import DataContractError
    from stepcritic.train.prm import built_template

    build_dataset(chains(4), "prm-sft", str(tmp_path / "plain"), test_fraction=0.25)
    assert built_template(str(tmp_path / "plain")) is None
    build_dataset(chains(4), "prm-sft", str(tmp_path / "brief"), test_fraction=0.25, template="prm_brief")
    assert built_template(str(tmp_path / "brief")).name == "prm_brief"
    stats = tmp_path / "brief" / "build_stats.json"
    changed = dict(json.loads(stats.read_text()), template={"name": "prm_brief", "hash": "0" * 16})
    stats.write_text(json.dumps(changed))
    with pytest.raises(DataContractError, match=r"build_stats.json: template: .*'prm_brief'.* changed"):
        built_template(str(tmp_path / "brief"))
