"""The one model loader: a full checkpoint, or a PEFT adapter folder on top of the base it names; a model this
package builds (`stepcritic:tiny/base`, `train/tiny/source.py`) is resolved to its cached folder first.

Training (`common.load_model`, which adds the recipe's dtype, attention and quantisation), the scorers and the
judges all load through `load_critic`, so the rule for where the processor comes from is written once: from the
folder itself when the trainer saved one there, else from the adapter's base model. A model whose config has no
vision side loads as a causal LM, its tokenizer in a `modality.TextProcessor`, so the callers never ask which
kind they hold.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager

PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json")
# a model built by this package rather than read from a folder or the Hub (`train/tiny/source.py`)
SOURCE_PREFIX = "stepcritic:"


def model_source(name: str | os.PathLike | None):
    """The `tiny.source.TinySource` a `stepcritic:` model name describes, or None for a folder or Hub name; raises
    `tiny.source.UnknownSource` (a ValueError, one line) for a `stepcritic:` name that describes none."""
    if not isinstance(name, str) or not name.startswith(SOURCE_PREFIX):
        return None
    from stepcritic.train.tiny.source import parse

    return parse(name)


def resolve_model(name: str | os.PathLike) -> str:
    """The local folder of a `stepcritic:` model name (built and cached on first use); any other name as it is."""
    source = model_source(name)
    return source.path() if source is not None else str(name)


def adapter_base(path: str | os.PathLike) -> str | None:
    """The base model an adapter folder was trained on; None for a full checkpoint (or a Hub name)."""
    config = os.path.join(path, "adapter_config.json")
    if not os.path.isfile(config):
        return None
    with open(config) as f:
        return resolve_model(json.load(f)["base_model_name_or_path"])


def has_processor(path: str | os.PathLike) -> bool:
    return any(os.path.isfile(os.path.join(path, name)) for name in PROCESSOR_FILES)


def model_config(path: str | os.PathLike, revision: str | None = None):
    """The config of a checkpoint, or of the base model an adapter folder names."""
    from transformers import AutoConfig

    path = resolve_model(path)
    return AutoConfig.from_pretrained(adapter_base(path) or path, revision=revision)


def reads_text_only(path: str | os.PathLike, revision: str | None = None) -> bool:
    """Whether a checkpoint (or an adapter's base) is a text-only model: no vision side in its config."""
    from stepcritic.train.modality import config_reads_images

    return not config_reads_images(model_config(path, revision))


def recipe_reads_text_only(recipe) -> bool | None:
    """Whether the recipe's model reads text only: from its config, else (a Hub name not in the local cache) from the
    families `archs` knows; None when neither says. Never builds a `stepcritic:` model."""
    name = recipe.model_args.model_name_or_path
    source = model_source(name)
    if source is not None:
        return source.text_only
    try:
        return reads_text_only(name, recipe.model_args.model_revision)
    except Exception:  # offline Hub, a typo, a missing folder: the families the recipes name are known without it
        from stepcritic.train import archs

        try:
            return archs.model_type_of(name) in archs.TEXT_MODEL_TYPES
        except (KeyError, ValueError):
            return None  # reported where the model loads


def load_critic(path: str | os.PathLike, dtype=None, trainable: bool = False, revision: str | None = None,
                merged: bool = False, **init_kwargs):
    """(model, processor) from `path`. An adapter folder comes back as a `PeftModel` (adapter trainable only when
    `trainable`), or with `merged` as its base with the adapter merged in, for judging: a LoRA layer kept apart runs
    three matrix products where a merged one runs one (docs/tiny-critic.md). `dtype` and `init_kwargs`
    go to `from_pretrained` (a torch dtype, its name, or "auto")."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    path = resolve_model(path)
    base = adapter_base(path)
    text_only = reads_text_only(base or path, revision)
    auto = AutoModelForCausalLM if text_only else AutoModelForImageTextToText
    with quiet_bars(os.path.isdir(base or path)):
        model = auto.from_pretrained(base or path, dtype=dtype, revision=revision, **init_kwargs)
    if base is not None:
        from peft import PeftModel

        with quiet_bars(os.path.isdir(base)):
            model = PeftModel.from_pretrained(model, path, is_trainable=trainable)
        if merged:
            model = model.merge_and_unload()
    source = path if base is None or has_processor(path) else base
    return model, load_processor(source, revision, text_only)


@contextmanager
def quiet_bars(local: bool):
    """Without transformers' progress bars while a local folder loads: its weights load in seconds and the bar is noise
    on every judge's load. A Hub name keeps them, since its files may download for minutes (the same switch silences
    the download bars)."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    if local and shown:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if local and shown:
            hf_logging.enable_progress_bar()


def load_processor(source: str, revision: str | None = None, text_only: bool | None = None):
    """A VLM's processor, or a text model's tokenizer in a `TextProcessor`; `text_only` None: read the config."""
    from transformers import AutoProcessor, AutoTokenizer

    from stepcritic.train import modality

    if text_only is None:
        text_only = reads_text_only(source, revision)
    if text_only:
        return modality.TextProcessor(untruncated(AutoTokenizer.from_pretrained(source, revision=revision)),
                                      name=source)
    processor = AutoProcessor.from_pretrained(source, revision=revision)
    untruncated(getattr(processor, "tokenizer", None))
    return processor


def untruncated(tokenizer):
    """The tokenizer without the truncation a trainer saved in it (`tokenizer.json`: the recipe's `max_length`). A
    processor passes that length to every call: with padding it is ignored, with a warning each time; without, it
    cuts the text silently. Training sets its own; a scorer or judge cuts nothing (it counts its judgement slots)."""
    if tokenizer is None:
        return None
    backend = getattr(tokenizer, "_tokenizer", None)  # a fast tokenizer's Rust side; slow ones save no truncation
    if backend is not None and backend.truncation is not None:
        backend.no_truncation()
    tokenizer.init_kwargs.pop("max_length", None)  # what the processor hands on to each call
    return tokenizer
