"""`method: prm`: a generative process reward model, TRL's `SFTTrainer` on `prm-sft` conversations.

Each user turn adds one step of the chain and the assistant answers `+` or `-`; the loss covers only those answers
(`assistant_only_loss`). Plain multi-turn SFT would also show the model the gold answers of earlier steps; the
`HiddenJudgementCollator` below hides them, so training sees exactly what `scoring.PRMScorer` builds at inference.
Rows with `step_targets` may leave a step out of the loss or train it towards a soft score (`prm_targets.py`).
"""

from __future__ import annotations

from stepcritic.data_prep import prompts
from stepcritic.train import common, modality, packing, prm_targets, sft
from stepcritic.train.scoring import judgement_mask, single_token_id


class HiddenJudgementCollator:
    """Wraps the SFT collator so a PRM never reads gold judgements, only predicts them.

    Plain multi-turn SFT teacher-forces the gold `+`/`-` of earlier steps into the context of later ones,
    and since an error usually propagates to the steps built on it, "copy the previous judgement" lowers
    the loss without looking at the image; at scoring time those slots hold a placeholder, so that
    shortcut is worth nothing. Here every judgement token in the input becomes the scorer's placeholder
    while the labels keep the gold token: training sees exactly the context `PRMScorer` builds.

    A note-writing PRM (`data build --prm-notes`) is the one exception: the notes of earlier steps stay in the
    input as written in the data (teacher forcing, as for any generated text), where the scorer puts the notes
    the model wrote itself. They say what the earlier steps should read, so a later step that rests on one can
    be checked against it; no gold note or judgement of the step being judged is ever in its input.
    """

    def __init__(self, collator, positive_id: int, negative_id: int):
        self.collator, self.positive_id, self.negative_id = collator, positive_id, negative_id

    def __call__(self, examples):
        batch = self.collator(examples)
        labels = batch["labels"]
        judged = judgement_mask(labels, self.positive_id, self.negative_id)
        batch["input_ids"] = batch["input_ids"].masked_fill(judged, self.positive_id)
        if any(example.get("step_targets") is not None for example in examples):
            prm_targets.apply_step_targets(batch, judged, [example.get("step_targets") for example in examples])
        return batch


def writes_notes(rows) -> bool:
    """Whether prm-sft rows were built with `--prm-notes` (their assistant turns hold more than the judgement)."""
    from stepcritic.train.rehearsal import COLUMN

    own = [row for row in (rows.select(range(min(len(rows), 64))) if hasattr(rows, "select") else rows[:64])
           if not row.get(COLUMN)]  # a rehearsed row holds answers, not judgements
    for row in own[:8]:
        for message in row["messages"]:
            if message["role"] == "assistant":
                content = message["content"]
                text = content if isinstance(content, str) else "".join(p.get("text") or "" for p in content)
                if text not in (prompts.PRM_POSITIVE, prompts.PRM_NEGATIVE):
                    return True
    return False


def built_template(dataset_path: str, summary: dict | None = None):
    """The PRM prompt template the rows were built with, from the build's stats (`summary`, read when not given);
    None for the default one (and for rows without stats). Raises DataContractError when that template has changed
    or gone since the build."""
    from stepcritic.data_prep.contract import DataContractError

    summary = common.dataset_summary(dataset_path) if summary is None else summary
    built = summary.get("template") or {}
    name = built.get("name")
    if not name or name == prompts.DEFAULT_TEMPLATES["prm"]:
        return None
    try:
        template = prompts.load_template(name)
    except FileNotFoundError:
        template = None
    if template is None or template.hash != built.get("hash"):
        raise DataContractError(f"{dataset_path}/build_stats.json: template: its rows were built with {name!r} "
                                f"(hash {built.get('hash')}), which is {'gone' if template is None else 'changed'} "
                                "since; rebuild the data or restore the template")
    return template


def check_config(recipe) -> None:
    sft.check_config(recipe)
    if recipe.script_args.dataset_kind != "prm-sft":
        raise ValueError(f"method prm trains on prm-sft rows, not {recipe.script_args.dataset_kind!r}")


def build_trainer(recipe, model, processor, train_data, eval_data):
    check_config(recipe)
    # the scorer reads this from the saved config: a note-writing PRM is scored by generating its notes, and a
    # "check" note (`data build --prm-notes check`, named in the build's stats) by the verdict that follows it
    notes = writes_notes(train_data)
    from stepcritic.data_prep.critique import CHECK_STYLES

    summary = common.dataset_summary(recipe.script_args.dataset_path)
    if notes and summary.get("prm_notes") in CHECK_STYLES:
        notes = "check"
    model.config.stepcritic_prm_notes = notes
    template = built_template(recipe.script_args.dataset_path, summary)
    if template is not None:  # the scorer asks with it (a judge asked otherwise reads a prompt it never saw)
        model.config.stepcritic_prm_template = prompts.template_record(template)
    model = common.prepare_model(recipe, model)
    if notes and common.is_peft(model) and not recipe.script_args.merge_adapter:
        raise ValueError("a note-writing PRM (prm-sft built with --prm-notes) trained through LoRA is scored from its "
                         "merged model, whose config records the note format (an adapter folder does not): set "
                         "merge_adapter: true and judge with prm:OUTPUT_DIR/merged")
    tokenizer = getattr(processor, "tokenizer", processor)

    def make_trainer():
        trainer = prm_targets.trainer_class()(model=model, args=recipe.training_args, train_dataset=train_data,
                                              eval_dataset=eval_data,
                                              processing_class=modality.trainer_processing_class(processor))
        trainer.judgement_ids = (single_token_id(tokenizer, prompts.PRM_POSITIVE),
                                 single_token_id(tokenizer, prompts.PRM_NEGATIVE))
        trainer.data_collator = HiddenJudgementCollator(trainer.data_collator, *trainer.judgement_ids)
        return trainer

    trainer = packing.install(recipe, make_trainer)  # packs after the judgements are hidden, when asked
    sft.check_targets_fit(trainer, train_data)
    return trainer
