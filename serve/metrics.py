"""The server's counters in Prometheus' text exposition format (version 0.0.4), written by hand: a few counters and
histograms need no client library.

Requests are counted by route and status code; latency (whole request, body read to answer sent) and batch size
(chains per forward pass) are histograms; queue depth is read from the batcher when scraped. Routes outside the
known ones are counted as `other`, so a client probing paths cannot grow the label set (nor put a path it chose
into the output). The event loop and the model thread both update counters, hence the lock.
"""

from __future__ import annotations

import threading
from bisect import bisect_left

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
ROUTES = ("/v1/score", "/get_reward", "/health", "/metrics")


def route_label(path: str) -> str:
    return path if path in ROUTES else "other"


class Histogram:
    def __init__(self, buckets: tuple):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.buckets, value)] += 1
        self.sum += value

    def lines(self, name: str, labels: str = "") -> list[str]:
        out, cumulative = [], 0
        sep = "," if labels else ""
        for bound, count in zip([*map(_number, self.buckets), "+Inf"], self.counts):
            cumulative += count
            out.append(f'{name}_bucket{{{labels}{sep}le="{bound}"}} {cumulative}')
        braces = f"{{{labels}}}" if labels else ""
        out += [f"{name}_sum{braces} {_number(self.sum)}", f"{name}_count{braces} {cumulative}"]
        return out


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = {}
        self.latency: dict[str, Histogram] = {}
        self.batch_size = Histogram(BATCH_BUCKETS)
        self.batch_seconds = Histogram(LATENCY_BUCKETS)
        self.chains_scored = 0
        self.received = 0  # requests that reached the application
        self.answered = 0  # of them, those whose answer was sent (or whose client had gone)

    def request_started(self) -> None:
        with self._lock:
            self.received += 1

    def request_done(self, path: str, status: int, seconds: float) -> None:
        route = route_label(path)
        with self._lock:
            self.answered += 1
            self.requests[(route, status)] = self.requests.get((route, status), 0) + 1
            self.latency.setdefault(route, Histogram(LATENCY_BUCKETS)).observe(seconds)

    def batch_done(self, size: int, seconds: float) -> None:
        with self._lock:
            self.batch_size.observe(size)
            self.batch_seconds.observe(seconds)
            self.chains_scored += size

    def render(self, queue_depth: int) -> str:
        with self._lock:
            lines = ["# HELP stepcritic_requests_total Requests answered, by route and HTTP status.",
                     "# TYPE stepcritic_requests_total counter"]
            lines += [f'stepcritic_requests_total{{route="{route}",status="{status}"}} {count}'
                      for (route, status), count in sorted(self.requests.items())]
            lines += ["# HELP stepcritic_request_seconds Time from a request's arrival to its answer.",
                      "# TYPE stepcritic_request_seconds histogram"]
            for route, histogram in sorted(self.latency.items()):
                lines += histogram.lines("stepcritic_request_seconds", f'route="{route}"')
            lines += ["# HELP stepcritic_batch_size Chains per forward pass.",
                      "# TYPE stepcritic_batch_size histogram", *self.batch_size.lines("stepcritic_batch_size"),
                      "# HELP stepcritic_batch_seconds Time the judge took per forward pass.",
                      "# TYPE stepcritic_batch_seconds histogram",
                      *self.batch_seconds.lines("stepcritic_batch_seconds"),
                      "# HELP stepcritic_chains_scored_total Chains scored.",
                      "# TYPE stepcritic_chains_scored_total counter",
                      f"stepcritic_chains_scored_total {self.chains_scored}",
                      "# HELP stepcritic_queue_depth Chains waiting for a forward pass.",
                      "# TYPE stepcritic_queue_depth gauge", f"stepcritic_queue_depth {queue_depth}"]
        return "\n".join(lines) + "\n"


def _number(value) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)
