"""`train(recipe)`: one training run, whatever the method.

Order of a run: seed, load model + processor, LoRA / freezing, data, build the method's trainer, train
(resuming from the latest checkpoint in `output_dir` when there is one), save model + processor, model card,
optional adapter merge. Each method module exposes `build_trainer(recipe, model, processor, train, eval)`.
"""

from __future__ import annotations

import importlib
import logging
import os

from stepcritic.train import common

METHOD_MODULES = {"sft": "sft", "prm": "sft", "dpo": "dpo", "reward": "reward", "grpo": "grpo"}


def _setup_logging(training_args) -> None:
    import transformers

    # Our own progress lines at INFO on the main process; transformers follows `log_level` (default: warnings).
    level = logging.INFO if training_args.should_log else logging.WARNING
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=level)
    common.logger.setLevel(level)
    transformers.utils.logging.set_verbosity(training_args.get_process_log_level())


def train(recipe) -> dict:
    """Run the recipe; returns the final metrics (train metrics, eval metrics when there is an eval split)."""
    from transformers import set_seed

    args = recipe.training_args
    method = recipe.script_args.method
    _setup_logging(args)
    for note in recipe.adjustments:
        common.logger.info("recipe adjustment: %s", note)
    set_seed(args.seed)

    module = importlib.import_module(f"stepcritic.train.{METHOD_MODULES[method]}")
    model, processor = common.load_model(recipe)
    train_data, eval_data = common.load_splits(recipe)
    trainer = module.build_trainer(recipe, model, processor, train_data, eval_data)

    state = trainer.accelerator.state
    common.logger.info("distributed: %s, %d process(es), device %s", state.distributed_type.value,
                       state.num_processes, state.device)
    checkpoint = common.resume_checkpoint(args)
    if checkpoint:
        common.logger.info("resuming from checkpoint %s (global step %s)", checkpoint,
                           common.checkpoint_step(checkpoint))
    result = trainer.train(resume_from_checkpoint=checkpoint)
    metrics = dict(result.metrics)
    if eval_data is not None:
        metrics.update(trainer.evaluate())

    trainer.save_model(args.output_dir)
    if trainer.is_world_process_zero():
        processor.save_pretrained(args.output_dir)
        trainer.save_state()
        trained = trainer.accelerator.unwrap_model(trainer.model)
        trainable, total = common.count_parameters(trained)
        if recipe.script_args.model_card:
            common.write_model_card(recipe, args.output_dir, metrics, trainable, total)
        if recipe.script_args.merge_adapter:
            merged = common.save_merged(trained, processor, args.output_dir)
            metrics["merged_dir"] = merged
        common.logger.info("saved %s critic to %s after %d steps", method, os.path.abspath(args.output_dir),
                           trainer.state.global_step)
    return metrics
