"""What TRL's `GRPOTrainer` hands a reward function, read as (question, answer text, images) per completion.

TRL 1.16 calls every plain reward function as

    reward_func(prompts=prompts, completions=completions, completion_ids=completion_ids, **reward_kwargs)

with one entry per completion (each prompt repeated `num_generations` times). `reward_kwargs` holds every dataset
column but `prompt` for that completion's row (`images`, `image`, label columns...), plus `trainer_state`,
`log_extra` and `log_metric` (and `environments` with an environment factory). The function's `__name__` names its
metrics (`rewards/<name>/mean`), and a `None` reward becomes NaN (see `step_reward`).

The shapes read here:
- a plain (standard) prompt is a string and its completion a string;
- a conversational prompt is a list of `{"role", "content"}` messages and its completion a list of messages (the
  assistant's turn; with tools, tool calls and results too). Content is a string or a list of parts
  (`{"type": "text", "text": ...}`, `{"type": "image"}`).
- images: when a row has an `images` (a list) or `image` column, TRL's VLM path fills each `{"type": "image"}` part
  of the prompt with the image itself (`{"type": "image", "image": <PIL image>}`, `data_utils.
  prepare_multimodal_messages`), and the column is passed to the reward function as well, one row per completion.

The question is the text of the prompt's last user message (a plain prompt is the question), without `<image>`
placeholders: the critic's prompt places the images itself, and a critic whose image token is `<image>` (LLaVA's)
would count each placeholder as one more image than it was given. The answer is the text of the completion's
assistant messages (tool results are not the policy's writing, so they are left out). The images are the row's
`images` column, else its `image` column, else the images filled into the prompt's parts, else none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stepcritic.rewards.splitting import Split, split_steps

# LLaVA-style image placeholders written in a prompt's text (verl's multimodal prompts, LLaVA conversations)
IMAGE_PLACEHOLDER = re.compile(r"<image>")


@dataclass
class Completion:
    question: str
    text: str          # what the policy wrote
    steps: list[str]   # `text` cut into steps (`splitting.split_steps`)
    images: list       # PIL images, bytes or `{"bytes", "path"}` dicts; empty for a text-only prompt


def content_text(content, joiner: str = "\n") -> str:
    """A message's text: its string content, or its text parts joined (image parts carry no text)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError(f"message content must be a string or a list of parts, got {type(content).__name__}")
    return joiner.join(part.get("text") or "" for part in content
                       if isinstance(part, dict) and part.get("type") == "text")


def _messages(value, where: str) -> list[dict]:
    if not isinstance(value, list) or not all(isinstance(m, dict) and "role" in m for m in value):
        raise ValueError(f"{where}: expected a string or a list of {{'role', 'content'}} messages, got "
                         f"{type(value).__name__}")
    return value


def question_text(prompt, where: str = "prompt") -> str:
    """The question a prompt asks: the prompt itself when it is a string, else its last user message's text; without
    image placeholders."""
    if isinstance(prompt, str):
        question = prompt
    else:
        users = [m for m in _messages(prompt, where) if m["role"] == "user"]
        if not users:
            raise ValueError(f"{where}: no user message to read the question from")
        question = content_text(users[-1].get("content"))
    question = IMAGE_PLACEHOLDER.sub("", question).strip()
    if not question:
        raise ValueError(f"{where}: the question is empty (a critic judges steps against a question's text)")
    return question


def completion_text(completion, where: str = "completion") -> str:
    """What the policy wrote: the completion when it is a string, else its assistant messages' text, one paragraph
    per message."""
    if isinstance(completion, str):
        return completion
    texts = [content_text(m.get("content"), joiner="") for m in _messages(completion, where)
             if m["role"] == "assistant"]
    return "\n\n".join(t for t in texts if t.strip())


def prompt_images(prompt) -> list:
    """The images TRL filled into a conversational prompt's image parts, in order."""
    if prompt is None or isinstance(prompt, str):
        return []
    return [part["image"] for m in prompt if isinstance(m.get("content"), list)
            for part in m["content"] if isinstance(part, dict) and part.get("type") == "image"
            and part.get("image") is not None]


def _column(columns: dict, name: str, n: int):
    values = columns.get(name)
    if values is None:
        return None
    if not isinstance(values, (list, tuple)) or len(values) != n:
        size = len(values) if isinstance(values, (list, tuple)) else type(values).__name__
        raise ValueError(f"the {name!r} column must hold one entry per completion ({n}), got {size}")
    return values


def row_images(images_entry, image_entry, prompt) -> list:
    """One completion's images (see the module docstring for the order of precedence)."""
    if images_entry is not None:
        return list(images_entry) if isinstance(images_entry, (list, tuple)) else [images_entry]
    if image_entry is not None:
        return [image_entry]
    return prompt_images(prompt)


def completions_from_trl(prompts: list, completions: list, split: Split = None, **columns) -> list[Completion]:
    """TRL's reward-function arguments as one `Completion` per completion, in order. Raises ValueError naming the
    argument when the lists disagree in length or an entry has neither TRL shape."""
    if not isinstance(prompts, (list, tuple)) or not isinstance(completions, (list, tuple)):
        raise ValueError("prompts and completions must be lists, one entry per completion")
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions: TRL passes one prompt per "
                         "completion")
    n = len(completions)
    images, image = _column(columns, "images", n), _column(columns, "image", n)
    out = []
    for i, (prompt, completion) in enumerate(zip(prompts, completions)):
        text = completion_text(completion, f"completions[{i}]")
        out.append(Completion(question=question_text(prompt, f"prompts[{i}]"), text=text,
                              steps=split_steps(text, split),
                              images=row_images(None if images is None else images[i],
                                                None if image is None else image[i], prompt)))
    return out
