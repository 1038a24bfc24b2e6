"""Text-only models: which models read images, the processor of one that does not, and its rows.

A model reads images when its config has a vision tower (`vision_config`) or its type is an image-text-to-text
architecture; anything else that transformers maps to a causal LM (Qwen2.5, Qwen3, Llama, the tiny `text` critic)
reads text alone. The choice follows from the checkpoint's config (`loading.reads_text_only`), never from a recipe
key, so a recipe names a text model exactly as it names a VLM.

Everything downstream of loading is written once, against a processor: the trainers, the scorers and the judges
call `apply_chat_template`, `processor(text=..., images=...)`, `processor.tokenizer`. `TextProcessor` gives a
tokenizer those calls. Its one real job is the message content: StepCritic's rows and prompts hold content as a
list of parts (`[{"type": "text", "text": ...}]`, the multimodal layout), and text-only chat templates read a
string (Qwen2.5's concatenates `message.content`, so a list fails; Qwen3's renders a list as nothing at all,
silently). Parts are joined into a string here, and an image part stops with `ModalityMismatch`.

The trainers hand TRL the bare tokenizer (`trainer_processing_class`): TRL takes a text model's path from a
tokenizer, and the rows it reads were made text-only by `text_rows` (content as strings, no `images` column).
"""

from __future__ import annotations

from stepcritic.errors import UserError

# the columns of built rows that hold conversations (lists of messages)
MESSAGE_COLUMNS = ("messages", "prompt", "chosen", "rejected", "completion")


class ModalityMismatch(UserError):
    """A text-only model given images, or data that asks for an image it does not have."""


# ----------------------------------------------------------------------------- which models read images

def config_reads_images(config) -> bool:
    """Whether a transformers config is a vision-language model's."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    if getattr(config, "vision_config", None) is not None:
        return True
    return config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def describe(model: str, config=None) -> str:
    """`'Qwen/Qwen2.5-1.5B-Instruct' (qwen2, text only)`: a model as the errors name it."""
    kind = "" if config is None else f"{config.model_type}, "
    return f"{model!r} ({kind}text only)"


# ----------------------------------------------------------------------------- the processor of a text model

def text_content(content, model: str = "the model") -> str:
    """Message content as one string: text parts joined; an image part is refused."""
    if content is None or isinstance(content, str):
        return content
    texts = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            texts.append(part.get("text") or "")
        elif kind in ("image", "image_url", "video"):
            raise ModalityMismatch(f"{model} reads text only, but the conversation holds an image; judge or train "
                                   "on text-only chains, or use a vision-language model")
    return "".join(texts)


def text_messages(messages, model: str = "the model") -> list[dict]:
    return [{**message, "content": text_content(message.get("content"), model)} for message in messages]


def text_conversations(conversation, model: str = "the model"):
    """One conversation (a list of messages) or a batch of them, content as strings."""
    if conversation and isinstance(conversation[0], (list, tuple)):
        return [text_messages(messages, model) for messages in conversation]
    return text_messages(conversation, model)


class TextProcessor:
    """A tokenizer with the processor calls StepCritic makes (see the module docstring); other attributes are the
    tokenizer's. Saves as the tokenizer alone, so a trained text critic is a plain causal-LM checkpoint."""

    def __init__(self, tokenizer, name: str | None = None):
        self.tokenizer = tokenizer
        self.name = repr(name) if name else f"this {type(tokenizer).__name__} model"

    @property
    def chat_template(self):
        return self.tokenizer.chat_template

    @chat_template.setter
    def chat_template(self, value):
        self.tokenizer.chat_template = value

    def apply_chat_template(self, conversation, processor_kwargs: dict | None = None, **kwargs):
        kwargs = dict(kwargs)
        extra = dict(processor_kwargs or {})
        if "padding" in extra:
            kwargs["padding"] = extra.pop("padding")
        if extra:
            kwargs["tokenizer_kwargs"] = {**kwargs.get("tokenizer_kwargs", {}), **extra}
        return self.tokenizer.apply_chat_template(text_conversations(conversation, self.name), **kwargs)

    def __call__(self, text=None, images=None, **kwargs):
        if images:
            raise ModalityMismatch(f"{self.name} reads text only, but was given {len(images)} image(s)")
        return self.tokenizer(text, **kwargs)

    def save_pretrained(self, *args, **kwargs):
        return self.tokenizer.save_pretrained(*args, **kwargs)

    def __getattr__(self, name):  # decode, batch_decode, pad_token_id, ...
        if name == "tokenizer":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.tokenizer, name)


def trainer_processing_class(processor):
    """What a trainer takes as `processing_class`: a VLM's processor, or a text model's tokenizer."""
    return processor.tokenizer if isinstance(processor, TextProcessor) else processor


# ----------------------------------------------------------------------------- rows

def _flatten_batch(batch: dict) -> dict:
    return {column: [None if messages is None else text_messages(messages) for messages in batch[column]]
            for column in MESSAGE_COLUMNS if column in batch}


def rows_with_images(dataset) -> list[int]:
    """Indices of the rows that carry an image (read from Arrow, nothing decoded)."""
    if "images" not in dataset.column_names:
        return []
    import pyarrow.compute as pc

    counts = pc.list_value_length(dataset.with_format("arrow")[:]["images"]).fill_null(0)
    return [i for i, n in enumerate(counts.to_pylist()) if n]


def text_rows(dataset, where: str, model: str):
    """Built rows as a text model's trainer reads them: no `images` column, message content as strings."""
    if dataset is None:
        return None
    pictured = rows_with_images(dataset)
    if pictured:
        raise ModalityMismatch(f"{where}: {len(pictured)} rows have images (first: row {pictured[0]}), but {model} "
                               "reads text only")
    columns = [column for column in MESSAGE_COLUMNS if column in dataset.column_names]
    if "images" in dataset.column_names:
        dataset = dataset.remove_columns("images")
    if not columns:
        return dataset
    return dataset.map(_flatten_batch, batched=True, desc="messages as text")


def _placeholders(messages) -> int:
    if not isinstance(messages, list):  # a column of another layout: the contract's column check names it
        return 0
    return sum(sum(isinstance(p, dict) and p.get("type") == "image" for p in m["content"])
               for m in messages if isinstance(m, dict) and isinstance(m.get("content"), list))


def image_count_problem(split, where: str, indices: list[int]) -> str | None:
    """The first sampled row whose messages ask for another number of images than it carries (a placeholder with no
    image behind it, or an image no placeholder shows), as one line; None when they agree."""
    columns = [column for column in (*MESSAGE_COLUMNS, "images") if column in split.column_names]
    if not indices or not any(column in MESSAGE_COLUMNS for column in columns):
        return None
    import pyarrow.compute as pc

    table = split.with_format("arrow").select_columns(columns)[indices]
    images = (pc.list_value_length(table["images"]).fill_null(0).to_pylist() if "images" in columns
              else [0] * len(indices))
    rows = table.select([c for c in columns if c != "images"]).to_pylist()
    for index, row, n_images in zip(indices, rows, images):
        asked = sum(_placeholders(row[column]) for column in row)
        if asked != n_images:
            return (f"{where} row {index}: its messages show {asked} image(s) but the row carries {n_images}; every "
                    "image part needs an image in `images` and every image a part (rebuild it with `stepcritic data "
                    "build`)")
    return None
