"""`method: sft`: supervised fine-tuning of a critic on critique or verifier rows.

TRL's `SFTTrainer` on conversational rows (`messages` + `images`; a text model's rows as text, see `modality`) with
`assistant_only_loss`, so the loss covers only what the critic writes (the JSON critique, or a verifier's answer);
the prompt, the chain and the image tokens are context, never targets. `method: prm` reuses these checks in `prm.py`.
"""

from __future__ import annotations

from stepcritic.train import common, modality


def check_targets_fit(trainer, train_data, sample: int = 16) -> None:
    """Warn when `max_length` cuts whole answers off: such rows silently train nothing.

    Checked on the first rows only (collating costs image processing); long prompts are the usual cause.
    """
    from stepcritic.train.packing import PaddingFreeCollator

    # the trainer's own rows: a text model's are tokenised up front by TRL, a VLM's are the built rows
    rows = trainer.train_dataset if trainer.train_dataset is not None else train_data
    rows = [dict(rows[i]) for i in range(min(sample, len(rows)))]
    collator = trainer.data_collator
    if isinstance(collator, PaddingFreeCollator):  # counted per row, before the rows are laid end to end
        collator = collator.collator
    labels = collator(rows)["labels"]
    empty = int(((labels != -100).sum(dim=1) == 0).sum())
    if empty:
        common.logger.warning("%d of the first %d rows keep no answer token within max_length=%s: raise it",
                              empty, len(rows), trainer.args.max_length)


def check_config(recipe) -> None:
    args = recipe.training_args
    if not args.assistant_only_loss:
        # Training on the prompt would teach the critic to write chains, not to judge them.
        common.logger.warning("assistant_only_loss is off: the loss also covers the prompt and the chain")


def build_trainer(recipe, model, processor, train_data, eval_data):
    from trl import SFTTrainer

    from stepcritic.train import packing

    check_config(recipe)
    model = common.prepare_model(recipe, model)
    trainer = packing.install(recipe, lambda: SFTTrainer(model=model, args=recipe.training_args,
                                                         train_dataset=train_data, eval_dataset=eval_data,
                                                         processing_class=modality.trainer_processing_class(
                                                             processor)))
    check_targets_fit(trainer, train_data)
    return trainer
