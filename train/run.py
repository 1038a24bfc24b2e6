"""`train(recipe)`: one training run, whatever the method.

Order of a run: check the data against the recipe (kind, splits, columns: before any weights load, so a wrong
dataset fails in a second), seed, data, load model + processor, LoRA / freezing, build the method's trainer, train
(resuming from the latest checkpoint in `output_dir` when there is one), save model + processor, model card,
optional adapter merge. Each method module exposes `build_trainer(recipe, model, processor, train, eval)`.
"""

from __future__ import annotations

import importlib
import logging
import os

from stepcritic.train import common, fast_masks, preflight

METHOD_MODULES = {"sft": "sft", "prm": "prm", "dpo": "dpo", "reward": "reward", "grpo": "grpo"}


def _setup_logging(training_args) -> None:
    import transformers

    # Our own progress lines at INFO on the main process; transformers follows `log_level` (default: warnings).
    level = logging.INFO if training_args.should_log else logging.WARNING
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=level)
    common.logger.setLevel(level)
    transformers.utils.logging.set_verbosity(training_args.get_process_log_level())


def time_budget(minutes: float):
    """A Trainer callback that stops training after `minutes` of wall time (checked after every optimiser step)."""
    import time

    from transformers import TrainerCallback

    class TimeBudget(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if time.perf_counter() - self.start > minutes * 60:
                common.logger.info("max_train_minutes=%s reached after %d steps: stopping", minutes,
                                   state.global_step)
                control.should_training_stop = True

    return TimeBudget()


def train(recipe) -> dict:
    """Run the recipe; returns the final metrics (train metrics, eval metrics when there is an eval split)."""
    from transformers import set_seed

    args = recipe.training_args
    method = recipe.script_args.method
    # first: a wrong dataset or model path stops here, before any logging noise
    data_note = preflight.check_dataset_kind(recipe)
    preflight.check_model_path(recipe)
    _setup_logging(args)
    for note in recipe.adjustments:
        common.logger.info("recipe adjustment: %s", note)
    common.logger.info("data %s: %s", recipe.script_args.dataset_path, data_note)
    train_data, eval_data = common.load_splits(recipe)
    set_seed(args.seed)

    fast_masks.install()  # transformers' assistant-mask loop dominated tiny-critic steps
    module = importlib.import_module(f"stepcritic.train.{METHOD_MODULES[method]}")
    model, processor = common.load_model(recipe)
    trainer = module.build_trainer(recipe, model, processor, train_data, eval_data)

    state = trainer.accelerator.state
    common.logger.info("distributed: %s, %d process(es), device %s", state.distributed_type.value,
                       state.num_processes, state.device)
    checkpoint = common.resume_checkpoint(args)
    if checkpoint:
        common.logger.info("resuming from checkpoint %s (global step %s)", checkpoint,
                           common.checkpoint_step(checkpoint))
    if recipe.script_args.max_train_minutes:
        trainer.add_callback(time_budget(recipe.script_args.max_train_minutes))
    result = trainer.train(resume_from_checkpoint=checkpoint)
    metrics = dict(result.metrics)
    if eval_data is not None:
        metrics.update(trainer.evaluate())
    peak = common.peak_gpu_memory_gib()
    if peak is not None:  # this process's peak, what the README's memory columns report
        metrics["peak_gpu_memory_gib"] = peak
        common.logger.info("peak GPU memory of this process: %.1f GiB", peak)

    trainer.save_model(args.output_dir)
    if trainer.is_world_process_zero():
        processor.save_pretrained(args.output_dir)
        trainer.save_state()
        trained = trainer.accelerator.unwrap_model(trainer.model)
        trainable, total = common.count_parameters(trained)
        if recipe.script_args.model_card:
            from stepcritic.train.model_card import write_model_card

            write_model_card(recipe, args.output_dir, metrics, trainable, total,
                             common.dataset_summary(recipe.script_args.dataset_path))
        if recipe.script_args.merge_adapter:
            merged = common.save_merged(trained, processor, args.output_dir)
            metrics["merged_dir"] = merged
        common.logger.info("saved %s critic to %s after %d steps", method, os.path.abspath(args.output_dir),
                           trainer.state.global_step)
    return metrics
