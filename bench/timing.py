"""Timing helpers shared by the benchmarks (GPU work is synchronised before the clock stops)."""

from __future__ import annotations

import statistics
import time


def timed(fn, repeats: int = 1) -> float:
    """Seconds for `repeats` calls of fn (GPU work included)."""
    import torch

    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def best_of(fn, rounds: int) -> float:
    """The fastest of `rounds` timings: on a shared machine the minimum is the least disturbed one."""
    return min(timed(fn) for _ in range(rounds))


def median_of(fn, rounds: int) -> float:
    """The median of `rounds` timings."""
    return statistics.median(timed(fn) for _ in range(rounds))
