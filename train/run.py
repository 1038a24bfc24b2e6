"""`train(recipe)`: one training run, whatever the method.

Order of a run: check the data against the recipe (kind, splits, columns, and images against what the model reads:
before any weights load, so a wrong dataset fails in a second), seed, data, load model + processor, LoRA / freezing,
build the method's trainer, train (resuming from the latest checkpoint in `output_dir` when there is one, or
starting over when `overwrite_output_dir` says so), save model + processor, model card, optional adapter merge, and
one closing line in words: where the critic is, after how many steps and how long, its final loss and the command
that evaluates it. Progress is logged as lines in words too, with transformers' bar only on a terminal. Each method
module exposes `build_trainer(recipe, model, processor, train, eval)`.

Whether `output_dir` may be written at all is the caller's check (`preflight.check_output_dir`, which
`stepcritic train` runs first): a script that trains into a folder it owns, as `stepcritic demo` does, replaces
what is there.
"""

from __future__ import annotations

import importlib
import logging
import shutil
import sys

from stepcritic.train import common, fast_masks, length_groups, preflight

METHOD_MODULES = {"sft": "sft", "prm": "prm", "dpo": "dpo", "reward": "reward", "grpo": "grpo"}


def method_module(recipe) -> str:
    """The module that builds the recipe's trainer: GRPO of a policy (policy-sft rows) has its own."""
    if recipe.script_args.method == "grpo" and recipe.script_args.dataset_kind == "policy-sft":
        return "policy_grpo"
    return METHOD_MODULES[recipe.script_args.method]


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


# the trainer's log keys worth a word on the terminal (the rest stay in trainer_state.json)
LOG_WORDS = {"loss": "loss", "grad_norm": "grad norm", "learning_rate": "learning rate",
             "mean_token_accuracy": "token accuracy", "rewards/accuracies": "reward accuracy",
             "rewards/margins": "reward margin", "reward": "reward",
             # a policy's evaluation (`policy_grpo`)
             "accuracy": "accuracy", "critic_reward": "critic reward", "reward_hacking": "reward hacking flag"}


def _number(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else f"{value:,}"


def progress_line(state, logs: dict) -> str | None:
    """One trainer log entry in words (`step 10 of 150: loss 0.512, learning rate 0.00098`); None for the totals
    logged when training ends, which the closing summary says instead."""
    if "train_runtime" in logs:
        return None
    evaluation = any(key.startswith("eval_") for key in logs)
    prefix = "eval_" if evaluation else ""
    words = [f"{'eval ' if evaluation else ''}{name} {_number(logs[prefix + key])}" for key, name in LOG_WORDS.items()
             if isinstance(logs.get(prefix + key), (int, float))]
    if not words:
        return None
    return f"step {state.global_step:,} of {state.max_steps:,}: {', '.join(words)}"


def progress(show_bar: bool):
    """transformers' progress bar (kept on a terminal, left out of log files) with each log entry written as a line
    in words instead of the dict the trainer prints."""
    from transformers.trainer_callback import ProgressCallback

    class Progress(ProgressCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.current_step = 0
            if show_bar:
                super().on_train_begin(args, state, control, **kwargs)

        def on_step_end(self, args, state, control, **kwargs):
            if self.training_bar is not None:
                super().on_step_end(args, state, control, **kwargs)

        def on_prediction_step(self, args, state, control, **kwargs):
            if show_bar:
                super().on_prediction_step(args, state, control, **kwargs)

        def on_log(self, args, state, control, logs=None, **kwargs):
            line = progress_line(state, logs or {})
            if line is None or not state.is_world_process_zero:
                return
            if self.training_bar is not None:
                self.training_bar.write(line, file=sys.stderr)
            else:
                print(line, file=sys.stderr, flush=True)

        def on_train_end(self, args, state, control, **kwargs):
            if self.training_bar is not None:
                super().on_train_end(args, state, control, **kwargs)

    return Progress()


def duration(seconds: float) -> str:
    """`41 s`, `2 min 14 s`, `1 h 03 min`."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def summary(recipe, metrics: dict, log_history: list, steps: int, resumed_at: int | None) -> str:
    """The line a run ends with: what was saved where, after how many steps and how long, its final loss, and
    the `stepcritic eval` command that scores it."""
    from stepcritic.train.model_card import eval_command

    args, method = recipe.training_args, recipe.method
    # a note-writing PRM is scored from its merged model, whose config records the note format
    judged = metrics.get("merged_dir") if method == "prm" and metrics.get("merged_dir") else args.output_dir
    losses = [entry["loss"] for entry in log_history if isinstance(entry.get("loss"), (int, float))]
    facts = [f"resumed at step {resumed_at:,}"] if resumed_at is not None else []
    if "train_runtime" in metrics:
        facts.append(f"{duration(metrics['train_runtime'])}{' this run' if resumed_at is not None else ''}")
    if losses:
        facts.append(f"final loss {losses[-1]:.4g}")
    elif isinstance(metrics.get("train_loss"), (int, float)):
        facts.append(f"mean loss {metrics['train_loss']:.4g}")
    if isinstance(metrics.get("eval_loss"), (int, float)):
        facts.append(f"eval loss {metrics['eval_loss']:.4g}")
    what = "policy" if recipe.script_args.dataset_kind == "policy-sft" else f"{method} critic"
    return (f"saved the {what} to {args.output_dir} after {steps:,} step{'' if steps == 1 else 's'} "
            f"({'; '.join(facts)}); "
            f"evaluate it with: {eval_command(method, judged, recipe.script_args.dataset_kind)}")


def train(recipe) -> dict:
    """Run the recipe; returns the final metrics (train metrics, eval metrics when there is an eval split)."""
    from transformers import set_seed

    args = recipe.training_args
    # first: a wrong dataset or model path stops here, before any logging noise
    data_note = preflight.check_dataset_kind(recipe)
    preflight.check_model_path(recipe)
    preflight.check_loggers(recipe)
    preflight.check_modality(recipe)
    _setup_logging(args)
    for note in recipe.adjustments:
        common.logger.info("recipe adjustment: %s", note)
    common.logger.info("data %s: %s", recipe.script_args.dataset_path, data_note)
    train_data, eval_data = common.load_splits(recipe)
    set_seed(args.seed)

    fast_masks.install()  # transformers' assistant-mask loop dominated tiny-critic steps
    module = importlib.import_module(f"stepcritic.train.{method_module(recipe)}")
    model, processor = common.load_model(recipe)
    trainer = module.build_trainer(recipe, model, processor, train_data, eval_data)
    if length_groups.install(trainer, train_data):
        common.logger.info("group_by_length: rows grouped by the length of their text")
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(progress(show_bar=sys.stderr.isatty() and not args.disable_tqdm))

    state = trainer.accelerator.state
    common.logger.info("distributed: %s, %d process(es), device %s", state.distributed_type.value,
                       state.num_processes, state.device)
    fresh = recipe.script_args.overwrite_output_dir
    if fresh and trainer.is_world_process_zero():
        # the earlier run's checkpoints would be resumed by the next rerun, or rotated out in place of this run's
        stale = preflight.stale_checkpoints(args.output_dir)
        for folder in stale:
            shutil.rmtree(folder)
        if stale:
            common.logger.info("overwrite_output_dir: deleted %d checkpoint(s) of the earlier run in %s", len(stale),
                               args.output_dir)
    checkpoint = common.resume_checkpoint(args, fresh=fresh)
    resumed_at = common.checkpoint_step(checkpoint) if checkpoint else None
    if checkpoint:
        common.logger.info("resuming from checkpoint %s (global step %s)", checkpoint, resumed_at)
        load_checkpoint = trainer._load_from_checkpoint

        def restore(resume_from_checkpoint, model=None):
            if not common.restore_full_weights(model or trainer.model, resume_from_checkpoint):
                load_checkpoint(resume_from_checkpoint, model)

        trainer._load_from_checkpoint = restore  # see common.restore_full_weights
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
        print(summary(recipe, metrics, trainer.state.log_history, trainer.state.global_step, resumed_at),
              file=sys.stderr, flush=True)
    return metrics
