"""Supervised fine-tuning of a critic: `method: sft` (critique / verifier rows) and `method: prm` (process reward).

Both are TRL's `SFTTrainer` on conversational vision rows (`messages` + `images`) with `assistant_only_loss`,
so the loss covers only what the critic writes: the JSON critique (sft) or the `+`/`-` after each step (prm,
a generative process reward model scored by `stepcritic.train.prm.PRMScorer`). The prompt, the chain and the
image tokens are context, never targets; a PRM's earlier judgements are not even context (see
`prm.HiddenJudgementCollator`).
"""

from __future__ import annotations

from stepcritic.train import common


def check_config(recipe) -> None:
    args = recipe.training_args
    if not args.assistant_only_loss:
        # Training on the prompt would teach the critic to write chains, not to judge them.
        common.logger.warning("assistant_only_loss is off: the loss also covers the prompt and the chain")
    if recipe.script_args.method == "prm" and recipe.script_args.dataset_kind != "prm-sft":
        raise ValueError(f"method prm trains on prm-sft rows, not {recipe.script_args.dataset_kind!r}")


def check_targets_fit(trainer, train_data, sample: int = 16) -> None:
    """Warn when `max_length` cuts whole answers off: such rows silently train nothing.

    Checked on the first rows only (collating costs image processing); long prompts are the usual cause.
    """
    rows = [dict(train_data[i]) for i in range(min(sample, len(train_data)))]
    labels = trainer.data_collator(rows)["labels"]
    empty = int(((labels != -100).sum(dim=1) == 0).sum())
    if empty:
        common.logger.warning("%d of the first %d rows keep no answer token within max_length=%s: raise it",
                              empty, len(rows), trainer.args.max_length)


def build_trainer(recipe, model, processor, train_data, eval_data):
    from trl import SFTTrainer

    check_config(recipe)
    model = common.prepare_model(recipe, model)
    trainer = SFTTrainer(model=model, args=recipe.training_args, train_dataset=train_data,
                         eval_dataset=eval_data, processing_class=processor)
    if recipe.script_args.method == "prm":
        from stepcritic.data_prep import prompts
        from stepcritic.train.prm import HiddenJudgementCollator, single_token_id

        tokenizer = getattr(processor, "tokenizer", processor)
        trainer.data_collator = HiddenJudgementCollator(
            trainer.data_collator, single_token_id(tokenizer, prompts.PRM_POSITIVE),
            single_token_id(tokenizer, prompts.PRM_NEGATIVE))
    check_targets_fit(trainer, train_data)
    return trainer
