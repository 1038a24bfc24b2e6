"""A judge behind any OpenAI-compatible chat endpoint (GPT-4o, or a local vLLM / SGLang server).

Its requests go through `http_client.HTTPClient`, which it shares with `remote:`: `concurrency` requests in flight,
each retried with exponential backoff and jitter on 429, 5xx and connection errors. A request that still fails marks
its chain `failed` (with the error): no judgment, which the runner does not cache and asks again on the next run,
instead of stopping the run. Only when `concurrency` requests have failed before any answer came (in a stream: and
more are left to ask) is the endpoint treated as unusable and `EndpointUnavailable` raised: asking the rest would
only repeat the failure. A few requests that all fail while nothing else is left are failures like any other.

`judge_stream`, which the runner uses, keeps the pool full across the whole dataset: a new chain's
requests go out as soon as an earlier chain's critique has been handed over (and saved), never more than
`concurrency` requests of unsaved chains at once. A run killed at any moment so repeats at most
`concurrency` requests when it resumes. (LookBack, several rounds per chain, still works batch by batch.)

`continues=true` says the server can go on writing an assistant turn begun in the prompt, as vLLM's and SGLang's
OpenAI-compatible servers do when a request carries `continue_final_message` (OpenAI's own API opens a new turn
instead): the judge can then be a completer for `stepcritic data label` and a policy for beam search.

The API key is read from the environment variable named by `api_key_env` and kept out of the
fingerprint, the options, repr, raw outputs and error messages. For OpenAI's own API (the default `base_url`) a
variable that is unset or empty is an error when the judge is made, before any request.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Iterator
from urllib.parse import urlsplit

from stepcritic.data_prep.images import png_bytes
from stepcritic.eval.judges.base import Critique
from stepcritic.eval.judges.generative import GenerativeJudge, Prompt, Reply
from stepcritic.eval.judges.http_client import EndpointUnavailable, Failure, HTTPClient

# EndpointUnavailable is defined in http_client; callers of this judge catch it under this name too
__all__ = ["EndpointUnavailable", "OpenAIJudge", "openai_messages"]
# the default base_url's host, which answers nothing without a key (a local server may need none)
PUBLIC_HOST = "api.openai.com"


def openai_messages(prompt: Prompt) -> list[dict]:
    """Chat messages in the OpenAI wire format: image placeholders become base64 PNG data URLs."""
    images = iter(prompt.images)
    out = []
    for message in prompt.messages:
        content = message["content"]
        if isinstance(content, list):
            content = [
                {"type": "image_url",
                 "image_url": {"url": "data:image/png;base64," + base64.b64encode(png_bytes(next(images))).decode()}}
                if part.get("type") == "image" else part
                for part in content]
        out.append({"role": message["role"], "content": content})
    return out


class OpenAIJudge(GenerativeJudge):
    kind = "openai"
    shards = False  # asked from rank 0 alone, at its own concurrency (`Judge.shards`)
    OPTIONS = {**GenerativeJudge.OPTIONS, "base_url": str, "api_key_env": str, "concurrency": int,
               "timeout": float, "max_retries": int, "backoff": float, "continues": bool}
    RUNTIME_OPTIONS = GenerativeJudge.RUNTIME_OPTIONS | {"concurrency", "timeout", "max_retries", "backoff",
                                                        "api_key_env"}

    def __init__(self, spec: str, target: str | None = None, base_url: str = "https://api.openai.com/v1",
                 api_key_env: str = "OPENAI_API_KEY", concurrency: int = 8, timeout: float = 120.0,
                 max_retries: int = 5, backoff: float = 1.0, continues: bool = False, **options):
        if not target:
            raise ValueError("the openai judge needs a model name: openai:MODEL (e.g. openai:gpt-4o)")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        options.setdefault("batch_size", 4 * concurrency)  # enough chains per batch to keep the pool busy
        if continues:  # only when set, so the cache keys of judges that never continue a turn stay as they were
            options["continues"] = True
        super().__init__(spec, target=target, base_url=base_url, api_key_env=api_key_env,
                         concurrency=concurrency, timeout=timeout, max_retries=max_retries, backoff=backoff,
                         **options)
        if not os.environ.get(api_key_env) and urlsplit(base_url).hostname == PUBLIC_HOST:
            # every request would be refused, each after its retries: say so before the first one (and after the
            # spec's own mistakes)
            raise ValueError(f"${api_key_env} is not set, and {base_url} needs an API key: export {api_key_env}=..., "
                             f"or name another variable with api_key_env=VAR")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.concurrency, self.timeout = concurrency, timeout
        self.CONTINUES = continues  # `Prompt.continue_final` honoured: the server says so, not the class
        self.max_retries, self.backoff = max_retries, backoff
        self._client = HTTPClient(self.url, os.environ.get(api_key_env), concurrency=concurrency, timeout=timeout,
                                  max_retries=max_retries, backoff=backoff, name=f"{self.kind} judge {target!r}",
                                  hint=f"check base_url, the server and ${api_key_env}", thread_name="openai-judge")

    def generate(self, prompts: list[Prompt]) -> list[Reply]:
        return self._client.map(self._request, prompts)

    def judge_stream(self, chains: Iterable[dict]) -> Iterator[tuple[int, Critique]]:
        """Critiques in the order they finish, with the pool kept full from the first chain to the last.

        The requests of chains whose critique is not yet handed over ("unsaved") never exceed `concurrency`
        (a chain needing more prompts than that goes alone); more requests are sent as soon as a critique has
        been handed over, which the runner does only after saving it. So whenever the process is killed, at
        most `concurrency` requests were sent for judgments that were not saved.
        """
        if self.strategy == "lookback":
            # LookBack has three rounds of requests per chain (lookback.py), each over a whole batch: it keeps
            # the batch-level default, so a kill can cost up to `batch_size` chains' requests.
            yield from super().judge_stream(chains)
            return
        asked = (((index, chain), self.prompts_for(chain)) for index, chain in enumerate(chains))
        for (index, chain), replies in self._client.answered(asked, self._request):
            yield index, self.read_replies(chain, replies)

    def generate_stream(self, prompts: Iterable[Prompt]) -> Iterator[tuple[int, Reply]]:
        """`(index, reply)` as each request is answered, the pool kept full: a new prompt goes out as soon as an
        earlier reply has been handed over (and saved), never more than `concurrency` unsaved at once, so a kill
        costs at most `concurrency` requests. As in `judge_stream`, `concurrency` failures before any answer, with more
        prompts left, mean the endpoint is unusable."""
        groups = ((index, [prompt]) for index, prompt in enumerate(prompts))
        for index, (reply,) in self._client.answered(groups, self._request):
            yield index, reply

    def _request(self, prompt: Prompt) -> Reply:
        body = {"model": self.target, "messages": openai_messages(prompt), "temperature": self.temperature,
                "max_tokens": self.max_tokens}
        if prompt.continue_final:  # vLLM's and SGLang's extra parameters: write on in the last (assistant) turn
            body.update(continue_final_message=True, add_generation_prompt=False)
        answer = self._client.post_json(body)
        if isinstance(answer, Failure):
            return Reply(error=str(answer))
        return self._read(answer)

    def _read(self, payload: bytes) -> Reply:
        text = self._client.redact(payload.decode("utf-8", "replace"))
        try:
            return Reply(text=json.loads(text)["choices"][0]["message"]["content"] or "")
        except (json.JSONDecodeError, KeyError, IndexError, TypeError):
            # the server answered, but not in the chat format: keep what it said for the record
            return Reply(text=text[:2000])

    def close(self) -> None:
        self._client.close()
