"""Everything only a GPU can show, as one resumable command (a benchmark, not a test).

    python -m stepcritic.bench.gpu_suite --out DIR [--dry] [--only NAME ...] [--redo] [--time-limit S]
        [--budget FAMILY=S ...] [--list]

Named units, each with its own time budget (a unit stops early when it runs out, and records so). Each is recorded
in DIR/gpu_suite.json as it ends; a later call skips the ones recorded ok or skipped (--redo runs them again),
runs a failed one again (its one-line error is recorded, and the suite goes on) and leaves alone one that a killed
call left unfinished (--redo --only NAME runs it). So the suite runs as a series of 10-minute commands:
`--time-limit 570` starts no unit whose budget could overrun the command, and `--budget throughput=120` shortens a
family's budgets so that more units fit one command (a throughput sweep then stops at a smaller micro-batch).

  throughput/<model>/lora    bf16 LoRA training of the real-size shape (random weights from `archs.real_config`,
                             nothing downloaded), the recipe's frozen tower and activation checkpointing, TRL's
                             fused LM head, 4,096 tokens with a 448 px image per sample; the micro-batch swept 1, 2,
                             4, ... up to the largest that fits (CUDA out of memory is caught): samples/s, tokens/s,
                             MFU, peak memory per batch (`bench.train_throughput`). Models: qwen2.5-vl-3b/7b,
                             qwen3-vl-4b/8b. Padding-free is recorded as refused there (Qwen-VL's multimodal RoPE,
                             `train/packing.py`); the tiny-gpu critic below runs it.
  throughput/<model>/liger   the same with liger-kernel's fused linear cross-entropy instead of TRL's fused head
                             (skipped when liger-kernel is not installed)
  launch/zero{2,3}/<method>  `accelerate launch` under recipes/accelerate/zero{2,3}.yaml of the qwen2.5-vl-3b
                             sft/prm/dpo/reward recipe on a random real-size checkpoint, 3 steps, after the recipe's
                             `stepcritic train --dry-run`
  prm-scoring                `PRMScorer` over 10,000 synthetic five-step chains (random real-size qwen2.5-vl-3b)
  tiny-gpu/padded            a short run of recipes/tiny-gpu/prm.yaml (base pre-training left out: it changes the
  tiny-gpu/padding-free      weights, not the step time), padded and with `padding_free: true`; steps/s

--dry runs every unit on the CPU with tiny shapes (tiny configs, 1-2 steps, a handful of chains); a launch unit
then prints the command it would run and is skipped when DeepSpeed is not installed. DIR/gpu_suite.md holds
README-ready markdown tables, rewritten from the JSON after every unit. Exit status: 0 when every selected unit
is ok or skipped, 1 when one failed, 2 for a usage error (no GPU without --dry), 3 when --time-limit left units
pending (run the same command again).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import functools
import gc
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from stepcritic import atomic

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"
MODELS = ("qwen2.5-vl-3b", "qwen2.5-vl-7b", "qwen3-vl-4b", "qwen3-vl-8b")
LAUNCH_MODEL = "qwen2.5-vl-3b"
METHODS = ("sft", "prm", "dpo", "reward")
BUDGETS = {"throughput": 420, "launch": 300, "prm-scoring": 300, "tiny-gpu": 300}
DONE = ("ok", "skipped")
SOFTWARE = ("torch", "transformers", "trl", "peft", "accelerate", "deepspeed", "liger-kernel")
ENVIRONMENT = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}


@dataclass(frozen=True)
class Shapes:
    real_size: bool
    seq_len: int
    image_size: int
    steps: int
    batches: tuple
    launch_chains: int
    launch_steps: int
    scoring_chains: int
    scoring_batch: int
    tiny_chains: int
    tiny_steps: int
    cpu_overrides: tuple = ()  # --dry on a machine with a GPU still trains on the CPU
    tiny_overrides: tuple = ()
    # the GPU recipe's critic without its vision-language pre-training: it changes the weights, not the step time
    tiny_model: str = "stepcritic:tiny/llava-medium,vision_pretrain_steps=200"


GPU = Shapes(real_size=True, seq_len=4096, image_size=448, steps=5, batches=(1, 2, 4, 8, 16, 32), launch_chains=200,
             launch_steps=3, scoring_chains=10_000, scoring_batch=64, tiny_chains=4000, tiny_steps=500)
DRY = Shapes(real_size=False, seq_len=64, image_size=56, steps=1, batches=(1, 2), launch_chains=60, launch_steps=1,
             scoring_chains=12, scoring_batch=4, tiny_chains=16, tiny_steps=2, cpu_overrides=("--use_cpu", "true"),
             tiny_model="stepcritic:tiny/llava",
             tiny_overrides=("--per_device_train_batch_size", "2", "--dataloader_num_workers", "0", "--bf16", "false"))


class Skipped(Exception):
    def __init__(self, note: str, result: dict):
        super().__init__(note)
        self.note, self.result = note, result


class UnitFailed(Exception):
    """A failure whose partial result (a command, a log path) is still worth recording."""

    def __init__(self, message: str, result: dict):
        super().__init__(message)
        self.result = result


def units() -> dict[str, tuple]:
    """Unit name -> (function, arguments), in the order a call runs them."""
    out = {f"throughput/{m}/{v}": (throughput_unit, m, v) for m in MODELS for v in ("lora", "liger")}
    out.update({f"launch/zero{z}/{m}": (launch_unit, z, m) for z in (2, 3) for m in METHODS})
    out["prm-scoring"] = (scoring_unit,)
    out.update({f"tiny-gpu/{v}": (tiny_gpu_unit, v) for v in ("padded", "padding-free")})
    return out


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _rel(path) -> str:
    path = Path(path)
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def _is_oom(error: BaseException) -> bool:
    import torch

    return isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower()


def _release_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()  # train_throughput reports the process's peak: make it this batch's


class Context:
    """One unit's time budget and the inputs units share, built once under DIR/work and reused by later calls."""

    def __init__(self, out: Path, dry: bool, budget: float):
        self.work, self.dry, self.budget = out / "work", dry, budget
        self.shapes = DRY if dry else GPU
        self.start = time.monotonic()

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    @staticmethod
    def _once(path: Path, build) -> str:
        if not path.is_dir():  # built beside, renamed into place: a killed call never leaves a half-built input
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic.replacing(path) as tmp:
                build(tmp)
        return str(path)

    def checkpoint(self) -> str:
        from stepcritic.train.tiny.offline_models import build_random_checkpoint

        size = "real" if self.shapes.real_size else "tiny"
        path = self._once(self.work / f"model-{LAUNCH_MODEL}-{size}", lambda p: build_random_checkpoint(
            LAUNCH_MODEL, p, size=size, device="cuda" if self.shapes.real_size else None))
        _release_memory()  # the weights built on the GPU must not stay cached while a launched run needs the memory
        return path

    def dataset(self, kind: str, n: int, prm_notes: bool = False, test_fraction: float = 0.1) -> str:
        from stepcritic.data_prep.build import build_dataset
        from stepcritic.data_prep.schema import load_chains
        from stepcritic.data_prep.synth import synthesize_to_disk

        chains = self._once(self.work / f"chains-{n}", lambda p: synthesize_to_disk(n, 0, p))
        name = f"{kind}{'-notes' if prm_notes else ''}-{n}"
        return self._once(self.work / "data" / name, lambda p: build_dataset(
            load_chains(chains), kind, p, test_fraction=test_fraction, prm_notes=prm_notes))


def sweep(measure, batches, left, clock=time.monotonic) -> dict:
    """`measure(batch)` for growing micro-batches until one runs out of memory or would overrun the time left
    (`left()`, seconds; a point is assumed to cost the last one's time scaled by the batch)."""
    points, oom_at, stopped = [], None, None
    for batch in batches:
        if points:
            last = points[-1]
            predicted = last["wall_s"] * batch / last["per_device_batch_size"]
            if predicted > left():
                stopped = f"time budget: batch {batch} would need about {predicted:.0f} s, {max(left(), 0):.0f} s left"
                break
        start = clock()
        try:
            report = measure(batch)
        except Exception as error:
            if not _is_oom(error):
                raise
            oom_at = batch
            oom = _one_line(error)
        finally:
            _release_memory()
        if oom_at is not None:
            break
        points.append(dict(report, wall_s=round(clock() - start, 1)))
    if not points:
        raise RuntimeError(f"micro-batch {batches[0]} does not fit: {oom}" if oom_at else "no batch was measured")
    return {"points": points, "largest_fitting_batch": points[-1]["per_device_batch_size"], "oom_at_batch": oom_at,
            "stopped": stopped, "best_batch": max(points, key=lambda p: p["tokens_per_s"])["per_device_batch_size"]}


def _liger_missing(model_type: str) -> str | None:
    if importlib.util.find_spec("liger_kernel") is None:
        return "liger-kernel not installed (pip install liger-kernel); the lora unit measures TRL's fused LM head"
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        return f"the installed liger-kernel has no kernels for {model_type}"
    return None


@contextlib.contextmanager
def _forwards_kept(model_type: str):
    """Liger swaps the model class's forward for the whole process: later units of the same family must get theirs
    back."""
    import importlib

    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    saved = {cls: cls.__dict__["forward"] for cls in vars(module).values()
             if isinstance(cls, type) and "forward" in cls.__dict__}
    try:
        yield
    finally:
        for cls, forward in saved.items():
            cls.forward = forward


def throughput_unit(ctx: Context, model: str, variant: str) -> dict:
    from stepcritic.bench.train_throughput import train_throughput
    from stepcritic.train import archs, packing
    from stepcritic.train.config import parse_recipe

    s = ctx.shapes
    recipe = RECIPES / model / "sft-lora.yaml"
    model_type = archs.model_type_of(model)
    info = {"recipe": _rel(recipe), "real_size": s.real_size, "seq_len": s.seq_len, "image_size": s.image_size,
            "steps": s.steps, "loss": "liger" if variant == "liger" else "fused"}
    if model_type not in packing.PACKABLE:
        info["padding_free"] = f"not run: train/packing.py refuses {model_type} (multimodal RoPE)"
    if variant == "liger" and (note := _liger_missing(model_type)):
        raise Skipped(note, info)

    def measure(batch: int) -> dict:
        parsed = parse_recipe(str(recipe), ["--per_device_train_batch_size", str(batch), *s.cpu_overrides])
        return train_throughput(parsed, s.steps, s.real_size, s.seq_len, s.image_size, info["loss"])

    with _forwards_kept(model_type) if variant == "liger" else contextlib.nullcontext():
        info.update(sweep(measure, s.batches, ctx.left))
    return info


def _dry_run(recipe: Path, overrides: list[str]) -> dict:
    """The recipe's `stepcritic train --dry-run`, in this process (the data and launcher checks, no weights)."""
    from stepcritic.train import cli

    out, err = io.StringIO(), io.StringIO()
    namespace = argparse.Namespace(config=str(recipe), dry_run=True, overrides=overrides)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(namespace)
    return {"command": shlex.join(["stepcritic", "train", "--config", _rel(recipe), *overrides, "--dry-run"]),
            "exit": code, "plan": out.getvalue().splitlines(), "problems": err.getvalue().splitlines()}


def _card_facts(run_dir: Path) -> dict:
    """Run time and steps per second from the model card's final metrics (training prints them as words only)."""
    card = run_dir / "README.md"
    found = re.search(r"## Final metrics\s+```json\n(.*?)```", card.read_text(), re.S) if card.is_file() else None
    if not found:
        return {}
    metrics = json.loads(found.group(1))
    return {key: float(metrics[name]) for key, name in (("train_runtime_s", "train_runtime"),
                                                          ("steps_per_s", "train_steps_per_second"))
            if isinstance(metrics.get(name), (int, float))}


def _log_facts(text: str) -> dict:
    patterns = {"distributed": r"distributed: (\w+, \d+ process\(es\))", "steps": r"critic to .* after (\d+) steps?",
                "peak_gpu_memory_gib": r"peak GPU memory of this process: ([\d.]+)"}
    facts = {}
    for key, pattern in patterns.items():
        found = re.findall(pattern, text)
        if found:
            facts[key] = {"distributed": str, "steps": int}.get(key, float)(found[-1])
    return facts


def _run_logged(command: list[str], timeout: float, log_path: Path, env: dict) -> tuple[int | None, float]:
    """Run in its own process group, so a timeout (or this process being stopped) ends the launcher's workers too;
    the exit code is None when the time ran out."""
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=log_path.parent,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=max(timeout, 1))
        except BaseException as error:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            if not isinstance(error, subprocess.TimeoutExpired):
                raise
            code = None
    return code, time.monotonic() - start


def launch_unit(ctx: Context, zero: int, method: str) -> dict:
    import torch

    from stepcritic.train.config import DATASET_KINDS

    s = ctx.shapes
    recipe = RECIPES / LAUNCH_MODEL / f"{method}-lora.yaml"
    run_dir = ctx.work / "runs" / f"zero{zero}-{method}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    overrides = ["--model_name_or_path", ctx.checkpoint(), "--dataset_path",
                 ctx.dataset(DATASET_KINDS[method][0], s.launch_chains), "--output_dir", str(run_dir),
                 "--max_steps", str(s.launch_steps), "--max_eval_samples", "8", "--save_strategy", "no",
                 "--report_to", "none", "--logging_steps", "1"]
    if ctx.dry:
        overrides += ["--bf16", "false", "--dtype", "float32"]  # the recipes' bf16 is slow on a CPU
    deepspeed = importlib.util.find_spec("deepspeed") is not None
    # DeepSpeed on a CPU has a ZeRO-2 launcher config only (cpu_zero2.yaml, with DS_ACCELERATOR=cpu)
    on_cpu = ctx.dry and zero == 2 and deepspeed
    config = RECIPES / "accelerate" / ("cpu_zero2.yaml" if on_cpu else f"zero{zero}.yaml")
    if not config.is_file():
        raise FileNotFoundError(f"no launcher config {_rel(config)}")
    processes = 1 if ctx.dry else torch.cuda.device_count()
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
               "--num_processes", str(processes), "-m", "stepcritic.train", "--config", str(recipe), *overrides]
    info = {"recipe": _rel(recipe), "launcher": _rel(config), "processes": processes, "command": shlex.join(command),
            "dry_run": _dry_run(recipe, overrides)}
    print(f"  command: {info['command']}", flush=True)
    if info["dry_run"]["exit"]:
        problem = (info["dry_run"]["problems"] or ["exit 2"])[0].removeprefix("stepcritic train: error: ")
        raise UnitFailed(f"stepcritic train --dry-run: {problem}", info)
    if not deepspeed:
        raise Skipped("deepspeed not installed", info)
    if ctx.dry and zero == 3:
        raise Skipped("--dry: no CPU launcher config for ZeRO-3 (recipes/accelerate/cpu_zero2.yaml is ZeRO-2)", info)
    env = dict(os.environ, **ENVIRONMENT, **({"DS_ACCELERATOR": "cpu"} if on_cpu else {}))
    log = run_dir / "launch.log"
    code, seconds = _run_logged(command, ctx.left(), log, env)
    text = log.read_text(errors="replace")
    info.update(exit=code, wall_s=round(seconds, 1), log=str(log), **_log_facts(text), **_card_facts(run_dir))
    if code is None:
        raise UnitFailed(f"stopped at the time budget ({ctx.budget:.0f} s) before the run ended; log {log}", info)
    if code:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        errors = [line for line in lines if re.search(r"error", line, re.IGNORECASE)]
        raise UnitFailed(f"exit {code}: {(errors or lines or ['no output'])[-1][:240]}", info)
    return info


def scoring_unit(ctx: Context) -> dict:
    import torch

    from stepcritic.bench.scoring import five_step_chains
    from stepcritic.bench.timing import timed
    from stepcritic.train.scoring import PRMScorer

    s = ctx.shapes
    path = ctx.checkpoint()
    chains = five_step_chains(s.scoring_chains)
    cuda = s.real_size and torch.cuda.is_available()
    scorer = PRMScorer.from_pretrained(path, dtype="bfloat16" if cuda else "float32", device="cuda" if cuda else None,
                                       batch_size=s.scoring_batch)
    scorer.score(chains[:s.scoring_batch])  # warm-up: allocation, kernels
    part, done, seconds, stopped = s.scoring_batch * 8, 0, 0.0, None
    while done < len(chains):
        if done and seconds / done * part > ctx.left():
            stopped = f"time budget ({ctx.budget:.0f} s) after {done} chains"
            break
        batch = chains[done:done + part]
        seconds += timed(functools.partial(scorer.score, batch))
        done += len(batch)
    return {"model": f"random {LAUNCH_MODEL} ({'real size' if s.real_size else 'tiny'})",
            "device": torch.cuda.get_device_name() if cuda else "cpu", "dtype": "bfloat16" if cuda else "float32",
            "chains": done, "chains_requested": len(chains), "steps_per_chain": 5, "batch_size": s.scoring_batch,
            "seconds": round(seconds, 2), "chains_per_s": round(done / seconds, 1), "stopped": stopped}


def tiny_gpu_unit(ctx: Context, variant: str) -> dict:
    from stepcritic.train.config import parse_recipe
    from stepcritic.train.run import train

    s = ctx.shapes
    recipe_path = RECIPES / "tiny-gpu" / "prm.yaml"
    data = ctx.dataset("prm-sft", s.tiny_chains, prm_notes=True, test_fraction=0.02)
    run_dir = ctx.work / "runs" / f"tiny-gpu-{variant}"
    shutil.rmtree(run_dir, ignore_errors=True)
    # the critic's build (vision pre-training) also comes out of the budget, before the trainer's clock starts
    minutes = max(0.2, (ctx.left() - min(120, 0.3 * ctx.left())) / 60)
    recipe = parse_recipe(str(recipe_path), [
        "--dataset_path", data, "--output_dir", str(run_dir), "--max_steps", str(s.tiny_steps),
        "--max_train_minutes", f"{minutes:.2f}", "--model_name_or_path", s.tiny_model, "--save_strategy", "no",
        "--report_to", "none", "--logging_steps", "50", "--padding_free", str(variant == "padding-free").lower(),
        *s.cpu_overrides, *s.tiny_overrides])
    metrics = train(recipe)
    steps = json.loads((run_dir / "trainer_state.json").read_text())["global_step"]
    runtime, batch = metrics["train_runtime"], recipe.training_args.per_device_train_batch_size
    return {"recipe": _rel(recipe_path), "model": recipe.model_args.model_name_or_path,
            "padding_free": variant == "padding-free",
            "attn_implementation": recipe.model_args.attn_implementation or "transformers' default",
            "base_pretrain": "left out (no base_pretrain_steps): it changes the weights, not the step time",
            "per_device_batch_size": batch, "steps": steps, "train_runtime_s": round(runtime, 2),
            "steps_per_s": round(steps / runtime, 2), "samples_per_s": round(steps * batch / runtime, 1),
            "stopped": f"max_train_minutes {minutes:.2f}" if steps < s.tiny_steps else None}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _environment(dry: bool) -> dict:
    from importlib import metadata

    versions = {}
    for name in SOFTWARE:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    if dry:
        return {"device": "cpu, tiny shapes", "software": versions}
    import torch

    return {"device": f"{torch.cuda.device_count()} x {torch.cuda.get_device_name()}", "software": versions}


def _reset_accelerate() -> None:
    # Accelerate keeps one process-wide state; a unit's trainer must not inherit the previous unit's settings.
    if "accelerate.state" in sys.modules:
        from accelerate.state import AcceleratorState

        with contextlib.suppress(Exception):
            AcceleratorState._reset_state(reset_partial_state=True)


def run_unit(name: str, ctx: Context) -> dict:
    fn, *args = units()[name]
    record = {"budget_s": ctx.budget, "started": _now()}
    try:
        record.update(status="ok", result=fn(ctx, *args))
    except Skipped as skip:
        record.update(status="skipped", note=skip.note, result=skip.result)
    except Exception as error:
        if not isinstance(error, UnitFailed):
            traceback.print_exc()
        record.update(status="error", error=str(error) if isinstance(error, UnitFailed) else _one_line(error),
                      result=getattr(error, "result", {}))
    finally:
        _release_memory()
        _reset_accelerate()
    record.update(seconds=round(time.monotonic() - ctx.start, 1), finished=_now())
    stopped = (record.get("result") or {}).get("stopped")
    if stopped:
        record["stopped"] = stopped
    return record


def _fmt(value, spec: str = "", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def _comment(record: dict) -> str:
    return record.get("error") or record.get("note") or record.get("stopped") or ""


def markdown(state: dict) -> str:
    """README-ready tables of the recorded units, in the suite's order."""
    recorded = [(name, state["units"][name]) for name in units() if name in state["units"]]
    lines = [f"GPU suite{' --dry' if state['dry'] else ''}: {state['device']}, updated {state['updated']}; "
             + ", ".join(f"{k} {v}" for k, v in state["software"].items()), ""]

    def table(prefix: str, header: list[str], row) -> None:
        rows = [row(name.split("/"), rec, rec.get("result") or {}) for name, rec in recorded if name.startswith(prefix)]
        if rows:
            lines.extend(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)])
            lines.extend("| " + " | ".join(str(cell) for cell in cells) + " |" for cells in rows)
            lines.append("")

    def throughput(parts, rec, r):
        best = next((p for p in r.get("points", []) if p["per_device_batch_size"] == r.get("best_batch")), {})
        largest = r.get("largest_fitting_batch")
        if largest is not None:
            # a sweep stopped by its time budget found no limit: say so, not "fit" as if the next had not
            largest = f"{largest}" + (f" (OOM at {r['oom_at_batch']})" if r.get("oom_at_batch") else
                                      " (larger not tried)" if r.get("stopped") else "")
        mfu = best.get("mfu")
        note = _comment(rec) if rec["status"] != "ok" or r.get("stopped") else r.get("padding_free", "")
        return [parts[1], parts[2], rec["status"], _fmt(largest), _fmt(best.get("per_device_batch_size")),
                _fmt(best.get("samples_per_s")), _fmt(best.get("tokens_per_s"), ",.0f"),
                _fmt(best.get("peak_memory_gib"), "", " GiB"), _fmt(None if mfu is None else 100 * mfu, ".1f", "%"),
                note]

    table("throughput/", ["model", "variant", "status", "largest micro-batch that fit", "best batch", "samples/s",
                          "tokens/s", "peak memory", "MFU", "note"], throughput)
    table("launch/", ["launcher", "method", "status", "wall s", "steps/s", "peak GPU memory", "note"],
          lambda p, rec, r: [r.get("launcher", p[1]), p[2], rec["status"], _fmt(r.get("wall_s")),
                             _fmt(r.get("steps_per_s")), _fmt(r.get("peak_gpu_memory_gib"), "", " GiB"),
                             _comment(rec)])
    table("prm-scoring", ["PRM", "chains", "batch", "seconds", "chains/s", "note"],
          lambda p, rec, r: [r.get("model", "-"), _fmt(r.get("chains"), ","), _fmt(r.get("batch_size")),
                             _fmt(r.get("seconds")), _fmt(r.get("chains_per_s")), _comment(rec)])
    table("tiny-gpu/", ["tiny-gpu critic", "status", "steps", "steps/s", "samples/s", "note"],
          lambda p, rec, r: [p[1], rec["status"], _fmt(r.get("steps")), _fmt(r.get("steps_per_s")),
                             _fmt(r.get("samples_per_s")), _comment(rec)])
    return "\n".join(lines)


def _save(out: Path, state: dict) -> None:
    state["updated"] = _now()
    for name, text in (("gpu_suite.json", json.dumps(state, indent=2)), ("gpu_suite.md", markdown(state))):
        atomic.write_text(out / name, text + "\n")  # a call killed mid-write leaves the previous file whole


def select(patterns: list[str] | None) -> list[str]:
    """Unit names matching any pattern: a name, a prefix ending at a '/', or a glob."""
    names = list(units())
    if not patterns:
        return names
    unknown = [p for p in patterns if not any(n == p or n.startswith(p.rstrip("/") + "/") or fnmatch.fnmatch(n, p)
                                              for n in names)]
    if unknown:
        raise ValueError(f"no unit matches {', '.join(unknown)}; units: {', '.join(names)}")
    return [n for n in names if any(n == p or n.startswith(p.rstrip("/") + "/") or fnmatch.fnmatch(n, p)
                                    for p in patterns)]


def parse_budgets(items: list[str] | None) -> dict[str, float]:
    """`FAMILY=S` items over BUDGETS; ValueError names the item that is not one."""
    budgets = dict(BUDGETS)
    for item in items or []:
        family, _, seconds = item.partition("=")
        if family not in BUDGETS:
            raise ValueError(f"--budget {item}: no unit family {family!r}; families: {', '.join(BUDGETS)}")
        try:
            budgets[family] = float(seconds)
        except ValueError:
            raise ValueError(f"--budget {item}: seconds must be a number, as in {family}=120") from None
        if budgets[family] <= 0:
            raise ValueError(f"--budget {item}: seconds must be positive")
    return budgets


def run_suite(out: Path, names: list[str], dry: bool, redo: bool, time_limit: float | None,
              budgets: dict[str, float] | None = None) -> int:
    budgets = budgets or BUDGETS
    path = out / "gpu_suite.json"
    state = json.loads(path.read_text()) if path.is_file() else {"suite": "stepcritic.bench.gpu_suite", "dry": dry,
                                                                "units": {}}
    if state["dry"] != dry:
        print(f"gpu_suite: error: {path} holds a {'--dry' if state['dry'] else 'GPU'} suite; give another --out",
              file=sys.stderr)
        return 2
    state.update(_environment(dry))
    start, pending = time.monotonic(), []
    for index, name in enumerate(names, 1):
        record = state["units"].get(name, {})
        if record.get("status") == "running":  # the previous call ended inside this unit
            record = state["units"][name] = dict(record, status="error", interrupted=True, error=(
                "interrupted: the call running it ended (killed, or out of time); --redo --only NAME runs it again"))
            _save(out, state)
        if not redo and (record.get("status") in DONE or record.get("interrupted")):
            print(f"[{index}/{len(names)}] {name}: {record['status']} earlier, not run again (--redo runs it)")
            continue
        budget = budgets[name.split("/")[0]]
        if time_limit is not None and time.monotonic() - start + budget > time_limit:
            pending.append(name)
            continue
        print(f"[{index}/{len(names)}] {name} (budget {budget:g} s)", flush=True)
        state["units"][name] = {"status": "running", "started": _now(), "budget_s": budget}
        _save(out, state)
        record = state["units"][name] = run_unit(name, Context(out, dry, budget))
        _save(out, state)
        print(f"[{index}/{len(names)}] {name}: {record['status']} in {record['seconds']} s"
              + (f": {_comment(record)}" if _comment(record) else ""), flush=True)
    failed = [n for n in names if state["units"].get(n, {}).get("status") == "error"]
    print(f"{path}\n{out / 'gpu_suite.md'}")
    if failed:
        print(f"failed: {', '.join(failed)}")
    if pending:
        print(f"pending ({len(pending)}, over --time-limit {time_limit:.0f} s): run the same command again")
        return 3
    return 1 if failed else 0


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.bench.gpu_suite", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="folder for gpu_suite.json, gpu_suite.md and the shared inputs (work/)")
    parser.add_argument("--dry", action="store_true", help="every unit on the CPU with tiny shapes")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="units to run: names, prefixes (launch/zero3) or globs (*/liger)")
    parser.add_argument("--redo", action="store_true", help="run the selected units again even if recorded")
    parser.add_argument("--time-limit", type=float, metavar="S",
                        help="start no unit whose budget would end past S seconds after the start of this call")
    parser.add_argument("--budget", nargs="+", metavar="FAMILY=S",
                        help=f"a unit family's time budget in seconds, per unit (families: {', '.join(BUDGETS)})")
    parser.add_argument("--list", action="store_true", help="print the units and their time budgets")
    return parser


def main(argv=None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        names, budgets = select(args.only), parse_budgets(args.budget)
    except ValueError as error:
        parser.exit(2, f"gpu_suite: error: {error}\n")
    if args.list:
        print("\n".join(f"{name}  {budgets[name.split('/')[0]]:g} s" for name in names))
        return 0
    if not args.out:
        parser.exit(2, "gpu_suite: error: --out DIR is required\n")
    os.environ.update(ENVIRONMENT)  # before transformers is imported: nothing is downloaded
    if not args.dry and not cuda_available():
        print("gpu_suite: error: a CUDA GPU is needed (torch sees none); --dry runs every unit with tiny shapes on "
              "the CPU", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    def stop(signum, frame):  # so a launch's process group is ended too (see _run_logged)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return run_suite(out, names, args.dry, args.redo, args.time_limit, budgets)
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    raise SystemExit(main())
