"""A small stand-in for `stepcritic serve` for the tests of the `remote:` judge (127.0.0.1, random port, own thread).

It speaks the server's wire format (`serve/__init__.py`): `POST /v1/score` answers each chain with step scores and
a chain score under the requested aggregate (`rewards.core.aggregate_steps`), and `GET /health` names the judge it
serves, `{"status": "ok", "judge": {"spec", "fingerprint"}}`. Its step scores are made up from each step's text
(`fake_step_scores`), each of the form 1 - P(incorrect), as a real server's are. Standard library only, like
`fake_openai_server`, so an installed package can run against it.

Knobs for tests, all changeable between requests: `latency` (seconds per scoring request), `fail_first` (that many
attempts per request body get `fail_status` first, with a `Retry-After: retry_after` header when set),
`reset_first` (that many attempts per body have their connection reset with no answer), `fail_matching` (only
requests with a chain whose question contains this text fail or are reset), `reject_matching` (a request with such a
chain is refused as malformed, 422, as the real server refuses a chain with too many steps), `api_key` (then a
scoring request without `Authorization: Bearer api_key` gets 401; with `echo_auth` its error quotes the header
back, as some servers do), `judge` (what /health and every answer name; {}: none), `health_names_judge` (False:
/health says only `{"status": "ok"}`, and only the answers name the judge), `outcome` (score whole chains only, as an
outcome reward model does). It records every scoring request's headers and body, and the
highest number of scoring requests it had in flight at once.
"""

from __future__ import annotations

import hashlib
import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from stepcritic.rewards.core import AGGREGATES, aggregate_steps


def fake_step_scores(question: str, steps: list[str]) -> list[float]:
    """One score per step, fixed by the texts: 1 - q for a q with many digits, so that a client that rounds,
    truncates or recomputes them shows."""
    out = []
    for k, text in enumerate(steps):
        digest = hashlib.sha256(f"{question}\n{k}\n{text}".encode()).hexdigest()
        out.append(1.0 - int(digest[:13], 16) / 16 ** 13)
    return out


def fake_chain_score(question: str, steps: list[str]) -> float:
    """The whole-chain score of `outcome` mode, deliberately outside [0, 1] as a reward model's may be."""
    return 4.0 * sum(fake_step_scores(question, steps)) - 3.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


class FakeScoreServer:
    def __init__(self, latency: float = 0.0, fail_first: int = 0, fail_status: int = 503,
                 retry_after: float | None = None, reset_first: int = 0, fail_matching: str | None = None,
                 reject_matching: str | None = None, api_key: str | None = None, echo_auth: bool = False,
                 judge: dict | None = None, health_names_judge: bool = True, outcome: bool = False):
        self.latency, self.fail_first, self.fail_status = latency, fail_first, fail_status
        self.retry_after = retry_after
        self.reset_first, self.fail_matching, self.reject_matching = reset_first, fail_matching, reject_matching
        self.api_key, self.echo_auth, self.outcome = api_key, echo_auth, outcome
        self.health_names_judge = health_names_judge
        self.judge = {"spec": "fake:scores", "fingerprint": "fake0000000001"} if judge is None else judge
        self.requests: list[dict] = []   # {"headers": {...}, "body": {...}} of every scoring request received
        self.health_requests = 0
        self.in_flight = self.max_in_flight = 0
        self._attempts: dict[str, int] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                server._score(self)

            def do_GET(self):
                server._get(self)

            def log_message(self, *args):  # keep test output clean
                pass

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def chains_scored(self) -> list[str]:
        """The ids of every chain of every scoring request, in the order received."""
        return [chain.get("id") for request in self.requests for chain in request["body"].get("chains", [])]

    # -------------------------------------------------------------- routes

    def _get(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.path.rstrip("/") != "/health":
            self._send(handler, 404, {"detail": "not found"})
            return
        with self._lock:
            self.health_requests += 1
        named = self.judge and self.health_names_judge
        self._send(handler, 200, {"status": "ok", **({"judge": self.judge} if named else {})})

    def _score(self, handler: BaseHTTPRequestHandler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
        if handler.path.rstrip("/") != "/v1/score":
            self._send(handler, 404, {"detail": "not found"})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(handler, 400, {"detail": "the body is not JSON"})
            return
        with self._lock:
            self.requests.append({"headers": dict(handler.headers), "body": body})
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        done = []

        def finished():  # counted down before the answer goes out: the client may send its next request the moment
            if not done:  # it has this answer, before this thread could count this one down
                done.append(True)
                with self._lock:
                    self.in_flight -= 1
        try:
            self._answer(handler, body, raw, finished)
        finally:
            finished()

    def _answer(self, handler: BaseHTTPRequestHandler, body: dict, raw: bytes, finished) -> None:
        if self.api_key is not None and handler.headers.get("Authorization") != f"Bearer {self.api_key}":
            detail = f"bad key {handler.headers.get('Authorization')}" if self.echo_auth else "unauthorized"
            finished()
            self._send(handler, 401, {"detail": detail})
            return
        chains = body.get("chains") if isinstance(body, dict) else None
        aggregate = body.get("aggregate", "min") if isinstance(body, dict) else None
        problem = _wire_problem(chains, aggregate)
        questions = [c["question"] for c in chains] if problem is None else []
        if problem is None and self.reject_matching and any(self.reject_matching in q for q in questions):
            problem = f"a chain asks {self.reject_matching!r}"
        if problem is not None:
            finished()
            self._send(handler, 422, {"detail": problem})
            return
        time.sleep(self.latency)
        targeted = self.fail_matching is None or any(self.fail_matching in q for q in questions)
        with self._lock:
            seen = self._attempts[raw.decode()] = self._attempts.get(raw.decode(), 0) + 1
        if targeted and seen <= self.reset_first:
            # SO_LINGER 0: closing sends a reset, not an orderly end, so the client's read fails mid-request
            handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            handler.close_connection = True
            return
        if targeted and seen <= self.reset_first + self.fail_first:
            detail = f"bad key {handler.headers.get('Authorization')}" if self.echo_auth else "busy, try again later"
            headers = {"Retry-After": f"{self.retry_after:g}"} if self.retry_after is not None else {}
            finished()
            self._send(handler, self.fail_status, {"detail": detail}, headers)
            return
        results = []
        for chain in chains:
            if self.outcome:
                steps, score = [], fake_chain_score(chain["question"], chain["steps"])
            else:
                steps = fake_step_scores(chain["question"], chain["steps"])
                score = aggregate_steps(steps, aggregate)
            results.append({"id": chain.get("id"), "step_scores": steps, "score": score})
        finished()
        self._send(handler, 200, {"results": results, "aggregate": aggregate, "judge": self.judge})

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        try:
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
            pass


def _wire_problem(chains, aggregate) -> str | None:
    """What in a `/v1/score` body breaks the wire format, or None."""
    if aggregate not in AGGREGATES:
        return f"unknown aggregate {aggregate!r}"
    if not isinstance(chains, list):
        return "'chains' must be a list"
    for chain in chains:
        if not isinstance(chain, dict) or not isinstance(chain.get("question"), str):
            return "every chain needs a 'question'"
        if not isinstance(chain.get("steps"), list) or not chain["steps"] or \
                not all(isinstance(s, str) for s in chain["steps"]):
            return "every chain needs 'steps', a non-empty list of strings"
        images = chain.get("images", [])
        if not isinstance(images, list) or not all(isinstance(i, str) and i.startswith("data:image/png;base64,")
                                                   for i in images):
            return "'images' must be PNG data URLs"
    return None
