"""`method: prm` on per-step targets: soft (Monte-Carlo) targets change the loss exactly as the soft cross-entropy
says, hard targets reproduce SFTTrainer's own loss, and a neutral step left open is out of the loss."""

import math
import os

import pytest
import torch
from helpers import RECIPES

from stepcritic.data_prep.build import build_dataset
from stepcritic.data_prep.ingest import ingest
from stepcritic.data_prep.schema import load_chains
from stepcritic.train import prm_targets
from stepcritic.train.config import parse_recipe

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def prm_data(root, fmt, path, **build_options) -> str:
    ingest(fmt, path, str(root / "chains"), on_error="skip", log=lambda _: None)
    build_dataset(load_chains(str(root / "chains")), "prm-sft", str(root / "data"), test_fraction=0.3,
                  **build_options)
    return str(root / "data")


def recipe_for(data, root, **overrides):
    options = dict(dataset_path=data, output_dir=str(root / "run"), max_steps=1, per_device_train_batch_size=4,
                   logging_steps=1, report_to="none")
    return parse_recipe(os.path.join(RECIPES, "prm.yaml"), {**options, **overrides})


def trainer_for(recipe):
    from stepcritic.train import common, prm

    model, processor = common.load_model(recipe)
    train_data, eval_data = common.load_splits(recipe)
    return prm.build_trainer(recipe, model, processor, train_data, eval_data), model, train_data


@pytest.fixture(scope="module")
def soft(tmp_path_factory):
    root = tmp_path_factory.mktemp("soft")
    data = prm_data(root, "visualprm", os.path.join(FIXTURES, "visualprm", "annotations.jsonl"), step_targets="soft")
    return root, recipe_for(data, root)


def test_soft_targets_are_what_the_loss_trains_on(soft):
    _, recipe = soft
    trainer, model, train_data = trainer_for(recipe)
    rows = [dict(train_data[i]) for i in range(len(train_data))]
    assert any(0 < t < 1 for r in rows for t in r["step_targets"])
    batch = trainer._prepare_inputs(trainer.data_collator(rows))
    targets = batch[prm_targets.TARGETS]
    plus, minus = trainer.judgement_ids
    judged = (batch["labels"] == plus) | (batch["labels"] == minus)
    assert sorted(targets[judged].tolist()) == sorted(t for r in rows for t in r["step_targets"])
    assert targets[~judged].isnan().all()

    model.eval()
    with torch.no_grad():
        soft_loss = float(trainer.compute_loss(model, dict(batch)))
        hard_targets = torch.where(judged, (batch["labels"] == plus).float(), targets)
        hard_loss = float(trainer.compute_loss(model, {**batch, prm_targets.TARGETS: hard_targets}))
        without = {k: v for k, v in batch.items() if k != prm_targets.TARGETS}
        sft_loss = float(trainer.compute_loss(model, without))  # SFTTrainer's own loss on the +/- tokens
        logits = model(**{k: v for k, v in without.items() if k != "labels"}).logits

    # 1/0 targets reproduce SFTTrainer's loss: same tokens, same normalisation
    assert hard_loss == pytest.approx(sft_loss, rel=1e-5)
    # the soft loss differs from it by exactly the soft-vs-hard cross-entropy of the judgements, over all label tokens
    log_probs = logits[:, :-1].float().log_softmax(-1)
    labels, p = batch["labels"][:, 1:], targets[:, 1:]
    n_tokens = int((labels != -100).sum())
    delta = 0.0
    for row, position in (~p.isnan()).nonzero().tolist():
        q = log_probs[row, position]
        gold = q[labels[row, position]]
        delta += float(-(p[row, position] * q[plus] + (1 - p[row, position]) * q[minus]) + gold)
    assert soft_loss == pytest.approx(sft_loss + delta / n_tokens, rel=1e-5)
    assert abs(soft_loss - sft_loss) > 1e-3


def test_a_training_step_on_soft_targets(soft, monkeypatch):
    from stepcritic.train.run import train

    _, recipe = soft
    calls = []
    loss = prm_targets.soft_judgement_loss
    monkeypatch.setattr(prm_targets, "soft_judgement_loss", lambda *a, **k: calls.append(1) or loss(*a, **k))
    metrics = train(recipe)  # one step on a batch of every training row, some with fractional targets
    assert calls and math.isfinite(metrics["train_loss"]) and metrics["train_loss"] > 0


def test_neutral_steps_are_out_of_the_loss(tmp_path):
    data = prm_data(tmp_path, "visualprocessbench", os.path.join(FIXTURES, "visualprocessbench", "test.jsonl"))
    trainer, _, train_data = trainer_for(recipe_for(data, tmp_path, per_device_train_batch_size=8))
    rows = [dict(train_data[i]) for i in range(len(train_data))]
    assert any(t is None for r in rows for t in r["step_targets"])
    plus, minus = trainer.judgement_ids
    # what training gets: the column survives the trainer's column pruning and the neutral judgements are gone
    trained = next(iter(trainer.get_train_dataloader()))["labels"]
    assert int(((trained == plus) | (trained == minus)).sum()) == sum(t is not None for r in rows
                                                                      for t in r["step_targets"])
    batch = trainer.data_collator(rows)
    assert prm_targets.TARGETS not in batch  # hard targets only: SFTTrainer's own loss
    for row, r in enumerate(rows):
        labelled = batch["labels"][row][(batch["labels"][row] == plus) | (batch["labels"][row] == minus)].tolist()
        # one judgement per step with a target, in order; the neutral ones are gone
        assert labelled == [plus if t else minus for t in r["step_targets"] if t is not None]
    # the same rows without targets: same input (the neutral step is still in the conversation, as `+`), and the
    # only labels that differ are the neutral steps' placeholders
    plain = trainer.data_collator([{k: v for k, v in r.items() if k != "step_targets"} for r in rows])
    dropped = plain["labels"] != batch["labels"]
    assert torch.equal(plain["input_ids"], batch["input_ids"])
    assert int(dropped.sum()) == sum(t is None for r in rows for t in r["step_targets"])
    assert (plain["labels"][dropped] == plus).all() and (batch["labels"][dropped] == -100).all()


def test_the_soft_loss_projects_only_the_labelled_positions_onto_the_vocabulary(soft):
    # A 152k-token vocabulary over image-length sequences makes the full logits gigabytes: the soft path must ask
    # the LM head for the trained positions only, as TRL's fused head does for the hard path.
    _, recipe = soft
    trainer, model, train_data = trainer_for(recipe)
    batch = trainer._prepare_inputs(trainer.data_collator([dict(train_data[i]) for i in range(len(train_data))]))
    assert prm_targets.TARGETS in batch
    projected = []
    hook = model.get_output_embeddings().register_forward_hook(lambda m, args, out: projected.append(out.shape))
    try:
        with torch.no_grad():
            trainer.compute_loss(model, dict(batch))
    finally:
        hook.remove()
    rows, length = batch["labels"].shape
    trained_positions = int((batch["labels"][:, 1:] != -100).any(0).sum())
    assert projected == [torch.Size([rows, trained_positions, model.config.get_text_config().vocab_size])]
    assert trained_positions < length / 2


def test_hard_targets_take_trls_fused_head_and_never_build_the_full_logits(soft):
    _, recipe = soft
    trainer, model, train_data = trainer_for(recipe)
    batch = trainer._prepare_inputs(trainer.data_collator([dict(train_data[i]) for i in range(len(train_data))]))
    batch.pop(prm_targets.TARGETS)
    projected = []
    hook = model.get_output_embeddings().register_forward_hook(lambda m, args, out: projected.append(out.shape))
    try:
        with torch.no_grad():
            loss = trainer.compute_loss(model, dict(batch))
    finally:
        hook.remove()
    assert math.isfinite(float(loss)) and projected == []  # the fused head reads the weight in tiles instead
