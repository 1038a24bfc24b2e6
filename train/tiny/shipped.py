"""The pretrained tiny base shipped inside the package (`stepcritic/train/tiny/base/`), and the check that it
still fits the code.

Every real critic is fine-tuned from a VLM that already reads images into words. The offline tiny critic's base
is that VLM for the embedded default: the tiny LLaVA of `model.py` after `base_pretrain.py` (hours of CPU, done
once), so that the demo's minutes go to turning a base into a critic. Its weights only mean something with the
config and tokenizer they were trained with, so the folder records a fingerprint of both (`fingerprint()`),
and a base whose fingerprint no longer matches what `model.py` builds is not used: the caller falls back to a
short base built on the spot, and says so.

    python -m stepcritic.train.tiny.shipped --from RUN_DIR     install a finished base_pretrain run here
    python -m stepcritic.train.tiny.shipped --check            does the shipped base match the code?
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

FOLDER = Path(__file__).resolve().parent / "base"
META = "stepcritic_base.json"
# the stand-in when the shipped base is missing or stale: a few minutes of the same pre-training
FALLBACK = {"vision_pretrain_steps": 400, "base_pretrain_steps": 300}
REBUILD = ("python -m stepcritic.train.tiny.base_pretrain --out runs/tiny-base --steps 16000 --batch-size 8 "
           "--threads 1 --say-first --induction-steps 300 --align-steps 200 --align-weight 1 "
           "--question-weights relation=3,bigger=3,where=2 && python -m stepcritic.train.tiny.shipped --from "
           "runs/tiny-base (its card, stepcritic/train/tiny/base/README.md, gives the runs that made it)")


def fingerprint(arch: str = "llava", size: str = "small", image_size: int = 96, vocab_size: int = 1024) -> str:
    """A hash of what the weights depend on and the code decides: the model config and the tokenizer (its vocabulary,
    merges and chat template), as `model.py` builds them today."""
    from stepcritic.train.tiny.model import build_config

    config, processor = build_config(arch=arch, size=size, image_size=image_size, vocab_size=vocab_size)
    return _digest(config, processor)


def _digest(config, processor) -> str:
    described = _design(config.to_dict())
    tokenizer = processor.tokenizer
    parts = [json.dumps(described, sort_keys=True, default=str), tokenizer.backend_tokenizer.to_str(),
             processor.chat_template or ""]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _design(config: dict) -> dict:
    """A config without what saving and loading add (the class name, the dtype, the folder, the version)."""
    return {k: _design(v) if isinstance(v, dict) else v for k, v in config.items()
            if k not in ("transformers_version", "architectures", "dtype", "_name_or_path")}


def folder_fingerprint(path: str | os.PathLike) -> str:
    """The same hash, of a saved model folder's own config and tokenizer."""
    from transformers import AutoConfig, AutoProcessor

    return _digest(AutoConfig.from_pretrained(path), AutoProcessor.from_pretrained(path))


def shipped_meta() -> dict | None:
    path = FOLDER / META
    return json.loads(path.read_text()) if path.is_file() and (FOLDER / "model.safetensors").is_file() else None


def stale_reason() -> str | None:
    """None when the shipped base is there and matches the code; else why it cannot be used, in a few words."""
    meta = shipped_meta()
    if meta is None:
        return f"there is no shipped base in {FOLDER}"
    if meta.get("fingerprint") != fingerprint():
        return "the shipped base no longer matches the code (its model config or tokenizer changed)"
    return None


def base_path(cache_dir: str | os.PathLike | None = None, log=None) -> str:
    """The folder to start a tiny critic from: the shipped base when it fits the code, else a short base built
    into the tiny-model cache (a few minutes, once), with one line saying so and how to rebuild the real one."""
    reason = stale_reason()
    if reason is None:
        return str(FOLDER)
    from stepcritic.train.tiny.cache import tiny_critic_path

    log = log or (lambda line: print(line, flush=True))  # flushed: behind a pipe it would land after the build
    log(f"note: {reason}; building a short base instead (about 5 minutes on 2 CPU cores, cached), so critics "
        f"trained from it will score worse than the README says. Rebuild the shipped base with: {REBUILD}")
    return tiny_critic_path(cache_dir, **FALLBACK)


def install(run_dir: str, commit: str | None = None) -> Path:
    """Copy a finished `base_pretrain` run's model into the package folder with its card and fingerprint."""
    from stepcritic.train.tiny.card import stages, write_card

    model = Path(run_dir) / "model"
    record = json.loads((Path(run_dir) / "pretraining.json").read_text())
    if "probe" not in record:
        raise SystemExit(f"{run_dir}: the run stopped at step {record['steps']} of {record['planned_steps']}; "
                         "resume it (same command) before installing it")
    found, expected = folder_fingerprint(model), fingerprint()
    if found != expected:
        raise SystemExit(f"{model}: its config or tokenizer does not match the code ({found} != {expected})")
    runs = stages(run_dir)  # before the folder goes: a run may continue the base installed there
    if FOLDER.exists():
        shutil.rmtree(FOLDER)
    FOLDER.mkdir(parents=True)
    for name in os.listdir(model):
        shutil.copy2(model / name, FOLDER / name)
    threads = record["settings"]["threads"] or "default"
    meta = {"fingerprint": found, "commit": commit,
            "hardware": f"{platform.machine()} CPU, {os.cpu_count()} cores, torch threads: {threads}",
            "settings": runs[-1]["settings"], "steps": record["steps"], "seconds": sum(r["seconds"] for r in runs),
            "probe": record["probe"]}
    if len(runs) > 1 or runs[0].get("phases"):  # several runs, each continuing the last, or a run resumed otherwise
        meta["runs"] = [{k: r[k] for k in ("settings", "steps", "seconds", "history", "phases") if k in r}
                        for r in runs]
    (FOLDER / META).write_text(json.dumps(meta, indent=2) + "\n")
    write_card(FOLDER, record, meta, runs=runs)
    return FOLDER


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.train.tiny.shipped",
                                     description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--from", dest="run_dir",
                       help="a finished `python -m stepcritic.train.tiny.base_pretrain` run folder")
    group.add_argument("--check", action="store_true", help="exit 1 with one line when the shipped base is stale")
    parser.add_argument("--commit", help="the commit the run was made with (recorded in the card)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.check:
        reason = stale_reason()
        print(reason or f"the shipped base matches the code ({FOLDER})", file=sys.stderr if reason else sys.stdout)
        return 1 if reason else 0
    print(f"installed {install(args.run_dir, args.commit)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
