"""The text a generative judge exchanges with its model: a `Prompt` (chat messages and the images they show) built from
`data_prep.prompts` messages, a `Reply`, and a reply read back as a critique. Apart from `GenerativeJudge` so that
its strategies (`lookback`) build prompts without importing the judge that runs them; `generative` re-exports them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from stepcritic.data_prep.critique import parse_critique
from stepcritic.data_prep.schema import chain_images
from stepcritic.eval.judges.base import Critique


@dataclass
class Prompt:
    messages: list  # chat messages; images are `{"type": "image"}` placeholders, filled from `images` in order
    images: list    # PIL images
    # the last message is an assistant turn already begun, which the model goes on writing (a rollout from a step
    # prefix, `stepcritic data label`); backends that cannot continue a turn say so (`CONTINUES`)
    continue_final: bool = False


@dataclass
class Reply:
    text: str | None = None
    error: str | None = None  # set when no answer came back (the request failed)


# ----------------------------------------------------------------------------- prompts

def chain_prompt(messages: list, chain: dict) -> Prompt:
    """A prompt from `data_prep.prompts` messages: every turn that shows images shows all of the chain's, in order."""
    images = chain_images(chain)
    n_placeholders = sum(1 for m in messages if isinstance(m["content"], list)
                         for part in m["content"] if part.get("type") == "image")
    if not images:  # a text-only chain: its prompts show no image
        if n_placeholders:
            raise ValueError(f"{chain.get('chain_id')}: {n_placeholders} image placeholders and the chain has no image")
        return Prompt(messages, [])
    if n_placeholders % len(images):
        raise ValueError(f"{chain.get('chain_id')}: {n_placeholders} image placeholders for {len(images)} images")
    return Prompt(messages, images * (n_placeholders // len(images)))


def with_appended_text(prompt: Prompt, text: str) -> Prompt:
    """The same prompt with `text` added to the end of its last message."""
    messages = copy.deepcopy(prompt.messages)
    last = messages[-1]
    if isinstance(last["content"], str):
        last["content"] += text
    else:
        last["content"].append({"type": "text", "text": text})
    return Prompt(messages, prompt.images)


# ----------------------------------------------------------------------------- reading replies

def critique_from_reply(chain: dict, reply: Reply) -> Critique:
    n = len(chain["steps"])
    if reply.error:
        return Critique(chain["chain_id"], [None] * n, raw=reply.text, valid=False, error=reply.error, failed=True)
    parsed = parse_critique(reply.text, n)
    judged = [v for v in parsed.verdicts if v is not None]
    return Critique(chain["chain_id"], parsed.verdicts, explanations=parsed.explanations,
                    answer_correct=parsed.answer_correct,
                    # share of steps judged correct: lets a critic rank the chains of a group
                    chain_score=sum(judged) / len(judged) if judged else None,
                    raw=reply.text, valid=parsed.valid, error=parsed.error)
