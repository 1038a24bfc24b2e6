"""A judge behind any OpenAI-compatible chat endpoint (GPT-4o, or a local vLLM / SGLang server).

Plain HTTP from the standard library with a thread pool: `concurrency` requests in flight, each retried
with exponential backoff and jitter on 429, 5xx and connection errors. A request that still fails marks its
chain `failed` (with the error): no judgment, which the runner does not cache and asks again on the next run,
instead of stopping the run. Only when `concurrency` requests have failed before any answer came (in a stream:
and more are left to ask) is the endpoint treated as unusable and `EndpointUnavailable` raised: asking the rest
would only repeat the failure. A few requests that all fail while nothing else is left are failures like any other.

`judge_stream`, which the runner uses, keeps the pool full across the whole dataset: a new chain's
requests go out as soon as an earlier chain's critique has been handed over (and saved), never more than
`concurrency` requests of unsaved chains at once. A run killed at any moment so repeats at most
`concurrency` requests when it resumes. (LookBack, several rounds per chain, still works batch by batch.)

The API key is read from the environment variable named by `api_key_env` and kept out of the
fingerprint, the options, repr, raw outputs and error messages.
"""

from __future__ import annotations

import base64
import collections
import http.client
import json
import os
import queue
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from stepcritic.data_prep.images import png_bytes
from stepcritic.eval.judges.base import Critique
from stepcritic.eval.judges.generative import GenerativeJudge, Prompt, Reply

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
MAX_BACKOFF_S = 30.0

K = TypeVar("K")


class EndpointUnavailable(RuntimeError):
    """`concurrency` requests failed before any answer came, with more left to ask: wrong URL, server down, or a
    bad key."""


class _Secret:
    """Holds the API key so that printing or logging the judge shows nothing of it."""

    def __init__(self, value: str | None):
        self._value = value

    def get(self) -> str | None:
        return self._value

    def __repr__(self) -> str:
        return "<secret>" if self._value else "<none>"

    def redact(self, text: str | None) -> str | None:
        if text and self._value:
            return text.replace(self._value, "***")
        return text


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
    OPTIONS = {**GenerativeJudge.OPTIONS, "base_url": str, "api_key_env": str, "concurrency": int,
               "timeout": float, "max_retries": int, "backoff": float}
    RUNTIME_OPTIONS = GenerativeJudge.RUNTIME_OPTIONS | {"concurrency", "timeout", "max_retries", "backoff",
                                                        "api_key_env"}

    def __init__(self, spec: str, target: str | None = None, base_url: str = "https://api.openai.com/v1",
                 api_key_env: str = "OPENAI_API_KEY", concurrency: int = 8, timeout: float = 120.0,
                 max_retries: int = 5, backoff: float = 1.0, **options):
        if not target:
            raise ValueError("the openai judge needs a model name: openai:MODEL (e.g. openai:gpt-4o)")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        options.setdefault("batch_size", 4 * concurrency)  # enough chains per batch to keep the pool busy
        super().__init__(spec, target=target, base_url=base_url, api_key_env=api_key_env,
                         concurrency=concurrency, timeout=timeout, max_retries=max_retries, backoff=backoff,
                         **options)
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.concurrency, self.timeout = concurrency, timeout
        self.max_retries, self.backoff = max_retries, backoff
        self._key = _Secret(os.environ.get(api_key_env))
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="openai-judge")
        self._reached = False  # has the endpoint answered at least once?
        self._unanswered = 0  # requests failed before it did

    def generate(self, prompts: list[Prompt]) -> list[Reply]:
        replies = list(self._pool.map(self._request, prompts))
        if replies and not self._reached:
            if any(r.error is None for r in replies):
                self._reached = True
            else:
                self._unanswered += len(replies)
                if self._unanswered >= self.concurrency:  # a caller of `generate` may always ask more
                    raise self._unavailable(self._unanswered, replies[-1].error)
        return replies

    def _unavailable(self, n_failed: int, last_error: str | None) -> EndpointUnavailable:
        return EndpointUnavailable(
            f"{self.kind} judge {self.target!r}: none of {n_failed} requests to {self.url} succeeded "
            f"(last error: {last_error}); check base_url, the server and ${self.options['api_key_env']}")

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
        for (index, chain), replies in self._answered(asked):
            yield index, self.read_replies(chain, replies)

    def generate_stream(self, prompts: Iterable[Prompt]) -> Iterator[tuple[int, Reply]]:
        """`(index, reply)` as each request is answered, the pool kept full: a new prompt goes out as soon as an
        earlier reply has been handed over (and saved), never more than `concurrency` unsaved at once, so a kill
        costs at most `concurrency` requests. As in `judge_stream`, `concurrency` failures before any answer, with more
        prompts left, mean the endpoint is unusable."""
        for index, (reply,) in self._answered((index, [prompt]) for index, prompt in enumerate(prompts)):
            yield index, reply

    def _answered(self, groups: Iterable[tuple[K, list[Prompt]]]) -> Iterator[tuple[K, list[Reply]]]:
        """`(key, replies)` for each group of prompts (one chain's), as soon as all of the group is answered.

        The callers ask for the next group only once they have saved the last one, so a group's requests count
        as unsaved until then. A group with no prompts is handed over at once, with no replies.
        """
        groups = enumerate(groups)
        finished: queue.SimpleQueue = queue.SimpleQueue()  # (group, position, future) as each request is done
        open_groups: dict[int, tuple[K, list]] = {}  # group -> (key, its replies so far), until handed over
        unsent: collections.deque = collections.deque()  # (group, position, prompt) left of the newest group
        unsaved = 0
        more, ahead = True, None  # `ahead`: a group read to learn whether any is left, not yet sent
        while True:
            # Prompts go out one by one, so the pool stays full even when the next chain would not fit whole. A
            # group that is alone goes out whole even past `concurrency`: only it could free a slot, and only
            # once it is all answered.
            while more and (unsaved < self.concurrency or (unsent and len(open_groups) == 1)):
                if not unsent:
                    item, ahead = (ahead, None) if ahead is not None else (next(groups, None), None)
                    if item is None:
                        more = False
                        break
                    group, (key, prompts) = item
                    if not prompts:
                        yield key, []
                        continue
                    open_groups[group] = (key, [None] * len(prompts))
                    unsent.extend((group, k, prompt) for k, prompt in enumerate(prompts))
                group, k, prompt = unsent.popleft()
                future = self._pool.submit(self._request, prompt)
                future.add_done_callback(lambda f, group=group, k=k: finished.put((group, k, f)))
                unsaved += 1
            if not open_groups:
                return
            group, k, future = finished.get()
            reply = future.result()
            if not self._reached:
                if reply.error is None:
                    self._reached = True
                else:
                    self._unanswered += 1
                    if self._unanswered >= self.concurrency:
                        if more and not unsent and ahead is None:
                            ahead = next(groups, None)
                            more = ahead is not None
                        if unsent or more:
                            raise self._unavailable(self._unanswered, reply.error)
            key, replies = open_groups[group]
            replies[k] = reply
            if all(r is not None for r in replies):
                del open_groups[group]
                yield key, replies
                unsaved -= len(replies)  # resumed: the caller has saved them

    def _request(self, prompt: Prompt) -> Reply:
        body = json.dumps({"model": self.target, "messages": openai_messages(prompt),
                           "temperature": self.temperature, "max_tokens": self.max_tokens}).encode()
        headers = {"Content-Type": "application/json"}
        if self._key.get():
            headers["Authorization"] = f"Bearer {self._key.get()}"
        error = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self._delay(attempt, error))
            try:
                request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    payload = response.read()
            except urllib.error.HTTPError as e:
                error = _HTTPFailure(e.code, self._key.redact(_body_excerpt(e)), e.headers.get("Retry-After"))
                if e.code not in RETRY_STATUS:
                    break
                continue
            except (OSError, http.client.HTTPException) as e:  # refused, reset, timed out, cut short
                error = _HTTPFailure(None, self._key.redact(f"{type(e).__name__}: {getattr(e, 'reason', e)}"))
                continue
            return self._read(payload)
        return Reply(error=f"{error} (after {attempt + 1} attempts)")

    def _read(self, payload: bytes) -> Reply:
        text = self._key.redact(payload.decode("utf-8", "replace"))
        try:
            return Reply(text=json.loads(text)["choices"][0]["message"]["content"] or "")
        except (json.JSONDecodeError, KeyError, IndexError, TypeError):
            # the server answered, but not in the chat format: keep what it said for the record
            return Reply(text=text[:2000])

    def _delay(self, attempt: int, error: "_HTTPFailure | None") -> float:
        if error is not None and error.retry_after:
            return min(error.retry_after, MAX_BACKOFF_S)
        # exponential backoff with full jitter, so that many throttled threads do not retry in lockstep
        return random.uniform(0, min(self.backoff * 2 ** (attempt - 1), MAX_BACKOFF_S))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class _HTTPFailure:
    def __init__(self, status: int | None, detail: str, retry_after: str | None = None):
        self.status, self.detail = status, detail
        try:
            self.retry_after = float(retry_after) if retry_after else None
        except ValueError:  # an HTTP date: fall back to our own backoff
            self.retry_after = None

    def __str__(self) -> str:
        return f"HTTP {self.status}: {self.detail}" if self.status else self.detail


def _body_excerpt(error: urllib.error.HTTPError) -> str:
    try:
        return error.read().decode("utf-8", "replace")[:300].strip() or error.reason
    except OSError:
        return str(error.reason)
