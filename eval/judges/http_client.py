"""The HTTP request loop the judges behind a web API share (`openai:`, `remote:`): one client, written once, so that
retries, secrecy and what a killed run may lose cannot drift apart between them.

Plain HTTP from the standard library with a thread pool: `concurrency` requests in flight, each retried with
exponential backoff and full jitter on 408, 409, 429, 5xx and connection errors (refused, reset, timed out, cut
short), waiting what a `Retry-After` header asks for, up to `MAX_BACKOFF_S`. A request that still fails comes back
as a `Failure` (never an exception): the judge marks the chains it was for `failed`, which the runner does not
cache and asks again on the next run, instead of stopping the run.

Only when `concurrency` requests have failed before any answer came (in a stream: and more are left to ask) is
the endpoint treated as unusable and `EndpointUnavailable` raised: asking the rest would only repeat the failure
(a wrong URL, a server down, a bad key). A few requests that all fail while nothing else is left are failures like
any other.

`answered` keeps the pool full across a whole dataset without running ahead of what the caller has saved: requests
come in groups (one chain's prompts, or one request for several chains), a group is handed over as soon as all of
it is answered, and more requests go out only as groups are handed over, never more than `concurrency` requests of
groups not yet handed over. So whenever the process is killed, at most `concurrency` requests were sent for
answers that were not saved.

The API key is held by `_Secret`, and cut out of every error message the client makes.
"""

from __future__ import annotations

import collections
import http.client
import json
import queue
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
MAX_BACKOFF_S = 30.0  # the longest wait between two tries, whatever a Retry-After header asks

K = TypeVar("K")
T = TypeVar("T")
R = TypeVar("R")


class EndpointUnavailable(RuntimeError):
    """`concurrency` requests failed before any answer came, with more left to ask: wrong URL, server down, or a
    bad key."""


class _Secret:
    """Holds the API key so that printing or logging the judge or its client shows nothing of it."""

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


class Failure:
    """A request that got no answer: the HTTP status (None when no status came: refused, reset, timed out), what the
    server or the socket said (the key cut out), and after how many attempts the client gave up."""

    def __init__(self, status: int | None, detail: str, retry_after: str | None = None):
        self.status, self.detail = status, detail
        self.attempts: int | None = None
        try:
            self.retry_after = float(retry_after) if retry_after else None
        except ValueError:  # an HTTP date: fall back to our own backoff
            self.retry_after = None

    def __str__(self) -> str:
        text = f"HTTP {self.status}: {self.detail}" if self.status else self.detail
        return text if self.attempts is None else f"{text} (after {self.attempts} attempts)"

    def __repr__(self) -> str:
        return f"Failure({str(self)!r})"


class HTTPClient:
    """POSTs JSON to one URL (and GETs others on the same server) with the retry rules of the module docstring.

    `name` and `hint` make the message of `EndpointUnavailable`: "{name}: none of N requests to {url} succeeded
    (last error: ...); {hint}".
    """

    def __init__(self, url: str, api_key: str | None, concurrency: int = 8, timeout: float = 120.0,
                 max_retries: int = 5, backoff: float = 1.0, name: str = "judge", hint: str = "check the URL",
                 thread_name: str = "http-judge"):
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.url, self.concurrency, self.timeout = url, concurrency, timeout
        self.max_retries, self.backoff = max_retries, backoff
        self.name, self.hint = name, hint
        self._key = _Secret(api_key)
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=thread_name)
        self._reached = False  # has the endpoint answered at least once?
        self._unanswered = 0  # requests failed before it did

    def __repr__(self) -> str:
        return f"HTTPClient({self.url!r}, key={self._key!r}, concurrency={self.concurrency})"

    # -------------------------------------------------------------- one request

    def post_json(self, body: dict) -> bytes | Failure:
        """The answer's body to `body` POSTed as JSON to `url`, or the `Failure` once the retries are spent."""
        return self._exchange(self.url, json.dumps(body).encode(), "POST")

    def get(self, url: str) -> bytes | Failure:
        """The answer's body to a GET of `url` (another route of the same server), retried as a POST is."""
        return self._exchange(url, None, "GET")

    def _exchange(self, url: str, data: bytes | None, method: str) -> bytes | Failure:
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self._key.get():
            headers["Authorization"] = f"Bearer {self._key.get()}"
        error = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self._delay(attempt, error))
            try:
                request = urllib.request.Request(url, data=data, headers=headers, method=method)
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return response.read()
            except urllib.error.HTTPError as e:
                error = Failure(e.code, self._key.redact(_body_excerpt(e)), e.headers.get("Retry-After"))
                if e.code not in RETRY_STATUS:  # a bad request or a bad key will not get better by asking again
                    break
            except (OSError, http.client.HTTPException) as e:  # refused, reset, timed out, cut short
                error = Failure(None, self._key.redact(f"{type(e).__name__}: {getattr(e, 'reason', e)}"))
        error.attempts = attempt + 1
        return error

    def _delay(self, attempt: int, error: Failure | None) -> float:
        if error is not None and error.retry_after:
            return min(error.retry_after, MAX_BACKOFF_S)
        # exponential backoff with full jitter, so that many throttled threads do not retry in lockstep
        return random.uniform(0, min(self.backoff * 2 ** (attempt - 1), MAX_BACKOFF_S))

    def redact(self, text: str | None) -> str | None:
        """`text` with the key cut out, for what a judge keeps of an answer (its raw output)."""
        return self._key.redact(text)

    # -------------------------------------------------------------- many requests

    def map(self, ask: Callable[[T], R], items: list[T]) -> list[R]:
        """`ask(item)` for every item on the pool, in order. `ask` returns a result whose `error` is None when the
        endpoint answered. A caller of `map` may always ask more, so `concurrency` failures before any answer
        raise `EndpointUnavailable` whatever is left."""
        results = list(self.pool.map(ask, items))
        if results and not self._reached:
            if any(r.error is None for r in results):
                self._reached = True
            else:
                self._unanswered += len(results)
                if self._unanswered >= self.concurrency:
                    raise self.unavailable(results[-1].error)
        return results

    def answered(self, groups: Iterable[tuple[K, list[T]]], ask: Callable[[T], R]) -> Iterator[tuple[K, list[R]]]:
        """`(key, results)` for each group of items, as soon as `ask` has answered all of the group (see the module
        docstring); `ask` runs on the pool and returns a result whose `error` is None when the endpoint answered.

        The callers ask for the next group only once they have saved the last one, so a group's requests count
        as unsaved until then. A group with no items is handed over at once, with no results.
        """
        groups = enumerate(groups)
        finished: queue.SimpleQueue = queue.SimpleQueue()  # (group, position, future) as each request is done
        open_groups: dict[int, tuple[K, list]] = {}  # group -> (key, its results so far), until handed over
        unsent: collections.deque = collections.deque()  # (group, position, item) left of the newest group
        unsaved = 0
        more, ahead = True, None  # `ahead`: a group read to learn whether any is left, not yet sent
        while True:
            # Items go out one by one, so the pool stays full even when the next group would not fit whole. A
            # group that is alone goes out whole even past `concurrency`: only it could free a slot, and only
            # once it is all answered.
            while more and (unsaved < self.concurrency or (unsent and len(open_groups) == 1)):
                if not unsent:
                    item, ahead = (ahead, None) if ahead is not None else (next(groups, None), None)
                    if item is None:
                        more = False
                        break
                    group, (key, items) = item
                    if not items:
                        yield key, []
                        continue
                    open_groups[group] = (key, [None] * len(items))
                    unsent.extend((group, k, one) for k, one in enumerate(items))
                group, k, one = unsent.popleft()
                future = self.pool.submit(ask, one)
                future.add_done_callback(lambda f, group=group, k=k: finished.put((group, k, f)))
                unsaved += 1
            if not open_groups:
                return
            group, k, future = finished.get()
            result = future.result()
            if not self._reached:
                if result.error is None:
                    self._reached = True
                else:
                    self._unanswered += 1
                    if self._unanswered >= self.concurrency:
                        if more and not unsent and ahead is None:
                            ahead = next(groups, None)
                            more = ahead is not None
                        if unsent or more:
                            raise self.unavailable(result.error)
            key, results = open_groups[group]
            results[k] = result
            if all(r is not None for r in results):
                del open_groups[group]
                yield key, results
                unsaved -= len(results)  # resumed: the caller has saved them

    def unavailable(self, last_error: str | None) -> EndpointUnavailable:
        return EndpointUnavailable(f"{self.name}: none of {self._unanswered} requests to {self.url} succeeded "
                                   f"(last error: {last_error}); {self.hint}")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _body_excerpt(error: urllib.error.HTTPError) -> str:
    try:
        return error.read().decode("utf-8", "replace")[:300].strip() or error.reason
    except OSError:
        return str(error.reason)
