"""A stand-in for vLLM's offline engine, for the `vllm:` code path on CPU: `LLM.chat` takes the OpenAI-format
messages StepCritic sends, turns their data-URL images back into pictures and has the checkpoint write with
transformers (`eval.judges.hf.generate_texts`). Only the surface StepCritic calls is here; every engine started and
every `chat` call is recorded in `CALLS` for the tests to read."""

import base64
import io
from dataclasses import dataclass, field

CALLS: list = []


@dataclass
class SamplingParams:
    temperature: float = 1.0
    max_tokens: int = 16


@dataclass
class CompletionOutput:
    text: str


@dataclass
class RequestOutput:
    outputs: list = field(default_factory=list)


def _prompt(messages: list, continuing: bool):
    from PIL import Image

    from stepcritic.eval.judges.prompting import Prompt

    images, turns = [], []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") == "image_url":
                    data = part["image_url"]["url"].split(",", 1)[1]
                    images.append(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))
                    parts.append({"type": "image"})
                else:
                    parts.append(part)
            content = parts
        turns.append({"role": message["role"], "content": content})
    return Prompt(turns, images, continue_final=continuing)


class LLM:
    def __init__(self, model: str, **engine_args):
        from stepcritic.train.loading import load_critic

        self.model, self.processor = load_critic(model, dtype="float32", merged=True)
        self.model.eval()
        self.processor.tokenizer.padding_side = "left"
        CALLS.append(("engine", model, engine_args))

    def chat(self, messages, params, use_tqdm=True, add_generation_prompt=True, continue_final_message=False):
        from stepcritic.eval.judges.hf import generate_texts

        assert add_generation_prompt != continue_final_message  # vLLM refuses both at once
        CALLS.append(("chat", len(messages), continue_final_message))
        prompts = [_prompt(m, continue_final_message) for m in messages]
        texts = generate_texts(self.model, self.processor, prompts, params.max_tokens, params.temperature)
        return [RequestOutput([CompletionOutput(text)]) for text in texts]
