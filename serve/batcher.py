"""Dynamic batching: chains from concurrent requests share forward passes, on one worker thread.

The judge is not thread-safe and a forward pass holds the CPU or GPU for milliseconds to seconds, so exactly one
thread runs it and the event loop only queues chains and awaits futures. The worker takes the oldest chain, waits
at most `max_wait_s` from that chain's arrival for others to join it, and scores up to `max_batch` chains in one
call; a request's chains may be spread over several batches, and its future resolves when the last one is scored.

A batch holds chains under different aggregates only when requests asked for different ones; each aggregate's
chains are then scored in their own call, so that every score comes from `score(chains, aggregate)` exactly as a
lone request's would. If a call fails, its chains are scored again one by one, so one chain the judge cannot take
fails its own request only, never its batch-mates'.

The queue is bounded: `submit` refuses (`QueueFull`) once `max_queue` chains wait, so load past what the model
can do is turned away at once instead of piling up. `stop` refuses new chains and lets the worker finish every
chain already queued before it exits: every accepted request is answered.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

log = logging.getLogger("stepcritic.serve")


class QueueFull(Exception):
    """`max_queue` chains are waiting already."""


class Stopped(Exception):
    """The server is shutting down and takes no new chains."""


class ChainFailed(Exception):
    """The judge raised on a chain scored alone; `index` is the chain's position in its request."""

    def __init__(self, index: int, error: BaseException):
        super().__init__(f"chain {index}: {error}")
        self.index, self.error = index, error


@dataclass
class _Pending:
    """One request's place: its future and its results, which only the worker thread writes."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    results: list
    remaining: int
    error: ChainFailed | None = None


@dataclass
class _Item:
    chain: dict
    aggregate: str
    pending: _Pending
    index: int
    arrived: float = field(default_factory=time.monotonic)


class Batcher:
    def __init__(self, score, max_batch: int, max_wait_s: float, max_queue: int, on_batch=None):
        """`score(chains, aggregate) -> list` runs on the worker thread; `on_batch(size, seconds)` is told of
        every call that succeeded."""
        self.score, self.max_batch, self.max_wait_s, self.max_queue = score, max_batch, max_wait_s, max_queue
        self.on_batch = on_batch or (lambda size, seconds: None)
        self._queue: deque[_Item] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="stepcritic-serve-model", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def waiting(self) -> int:
        """Chains queued and not yet taken into a batch."""
        return len(self._queue)

    def has_room(self, chains: int = 1) -> bool:
        return not self._stopping and len(self._queue) + chains <= self.max_queue

    async def submit(self, chains: list, aggregate: str) -> list:
        """Every chain's `score` result, in order, once all are scored. Raises `QueueFull` or `Stopped` without
        queueing anything, and `ChainFailed` when the judge raised on one of them."""
        loop = asyncio.get_running_loop()
        pending = _Pending(loop, loop.create_future(), [None] * len(chains), len(chains))
        if not chains:
            return []
        with self._cond:
            if self._stopping:
                raise Stopped()
            if len(self._queue) + len(chains) > self.max_queue:
                raise QueueFull()
            now = time.monotonic()
            self._queue.extend(_Item(chain, aggregate, pending, i, now) for i, chain in enumerate(chains))
            self._cond.notify()
        return await pending.future

    def stop(self) -> None:
        """Take no more chains; the worker scores those queued, without waiting for company, then exits."""
        with self._cond:
            self._stopping = True
            self._cond.notify()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _next_batch(self) -> list[_Item] | None:
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if not self._queue:
                return None
            deadline = self._queue[0].arrived + self.max_wait_s
            while len(self._queue) < self.max_batch and not self._stopping:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            groups: dict[str, list[_Item]] = {}
            for item in batch:
                groups.setdefault(item.aggregate, []).append(item)
            for aggregate, items in groups.items():
                self._score(items, aggregate)

    def _score(self, items: list[_Item], aggregate: str) -> None:
        start = time.perf_counter()
        try:
            results = self.score([item.chain for item in items], aggregate)
        except Exception as error:  # noqa: BLE001 -- whatever the judge raises goes back to its request
            if len(items) == 1:
                log.warning("the judge failed on a chain: %s: %s", type(error).__name__, error)
                self._finish(items[0], None, error)
                return
            for item in items:  # find the chain at fault: the others still get their scores
                self._score([item], aggregate)
            return
        self.on_batch(len(items), time.perf_counter() - start)
        for item, result in zip(items, results):
            self._finish(item, result, None)

    def _finish(self, item: _Item, result, error: BaseException | None) -> None:
        pending = item.pending
        if error is not None and pending.error is None:
            pending.error = ChainFailed(item.index, error)
        pending.results[item.index] = result
        pending.remaining -= 1
        if pending.remaining == 0:
            try:
                pending.loop.call_soon_threadsafe(_resolve, pending)
            except RuntimeError:  # the loop is closed: nobody is left to answer
                pass


def _resolve(pending: _Pending) -> None:
    if pending.future.done():  # the request was cancelled meanwhile
        return
    if pending.error is not None:
        pending.future.set_exception(pending.error)
    else:
        pending.future.set_result(pending.results)
