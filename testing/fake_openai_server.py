"""A small OpenAI-compatible chat server for tests and the benchmark (127.0.0.1, random port, own thread).

It ships with the package (standard library only) because `bench.openai_judge` runs against it, and shipped
code never imports from `tests/`; nothing the `stepcritic` command runs imports it.

It answers `POST /v1/chat/completions` from what the prompt asks for: a JSON critique that flags step 2
(the number of steps is read from the "Step k:" lines), a question list or a short answer for the
LookBack phases, a letter for the listwise question, a label for verifier prompts, "Answer: red" to the
corrector when the review calls the final answer wrong (else the final answer again), and "Verdict: yes" to
the explanation matcher when the critic's explanation mentions the colour. Knobs for tests:
`latency` (seconds per request), `fail_first` (that many requests per prompt get `fail_status`
first; with `echo_auth` the error quotes the Authorization header back, as some real APIs do),
`drop_first` (that many requests per prompt have their connection closed with no answer first),
`fail_matching` (only prompts containing this text fail, hang or are dropped), `garbage` (answer text that is not a
critique), `hang` (never answer in time). The knobs can be changed between requests. It records every
request body and header, and the highest number of requests it had in flight at once.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _last(pattern: str, text: str) -> str | None:
    found = re.findall(pattern, text)
    return found[-1].strip() if found else None


def reply_for(text: str) -> str:
    """What a helpful (and fixed-minded) critic would say to our prompts."""
    if 'one last line of the form "Answer:' in text:  # the corrector (correction.j2)
        # answers "red" where the review calls the final answer wrong, else keeps the final answer
        review = _last(r"(?m)^Review of the final answer: (.*)$", text) or ""
        final = _last(r"(?m)^Final answer: (.*)$", text) or ""
        return "Going by the review.\nAnswer: " + ("red" if review.startswith("incorrect") else final)
    if 'reads exactly "Verdict: yes"' in text:  # the explanation matcher (explanation_match.j2)
        explanation = text.split("and explained:", 1)[-1].split("Does the critic", 1)[0]
        return "Comparing the two.\nVerdict: " + ("yes" if "colour" in explanation.lower() else "no")
    if "JSON list of at most" in text:
        return '["What colour is the shape?"]'
    if "answer this question from what you can see" in text:
        return "The shape is blue."
    if "Reply with the letter" in text:
        return "B"
    if "Reply with exactly one of these words" in text:
        return "incorrect"
    if "rate how sound this answer is" in text:
        return "7"
    n_steps = max([int(n) for n in re.findall(r"(?m)^Step (\d+):", text)] or [3])
    steps = [{"step": i, "correct": i != 2} | ({"explanation": "The colour is wrong."} if i == 2 else {})
             for i in range(1, n_steps + 1)]
    return json.dumps({"steps": steps, "answer_correct": False})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default listen backlog of 5 would drop a burst of 32 clients


class FakeOpenAIServer:
    def __init__(self, latency: float = 0.0, fail_first: int = 0, fail_status: int = 500,
                 garbage: str | None = None, hang: bool = False, echo_auth: bool = False, drop_first: int = 0,
                 fail_matching: str | None = None):
        self.latency, self.fail_first, self.fail_status = latency, fail_first, fail_status
        self.garbage, self.hang, self.echo_auth = garbage, hang, echo_auth
        self.drop_first, self.fail_matching = drop_first, fail_matching
        self.requests: list[dict] = []   # {"headers": {...}, "body": {...}} of every request received
        self.in_flight = self.max_in_flight = 0
        self._attempts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                server._handle(self)

            def log_message(self, *args):  # keep test output clean
                pass

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def prompt_texts(self) -> list[str]:
        return [" ".join(part.get("text", "") for m in r["body"]["messages"] for part in m["content"]
                         if isinstance(part, dict)) for r in self.requests]

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
        with self._lock:
            self.requests.append({"headers": dict(handler.headers), "body": body})
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        done = []

        def finished():  # a request stops counting as in flight before its answer goes out: the client may send the
            if not done:  # next one the moment it has the answer, before this thread could count this one down
                done.append(True)
                with self._lock:
                    self.in_flight -= 1
        try:
            text = " ".join(m["content"] if isinstance(m["content"], str) else
                            " ".join(p.get("text", "") for p in m["content"] if p.get("type") == "text")
                            for m in body["messages"])
            targeted = self.fail_matching is None or self.fail_matching in text
            if self.hang and targeted:
                self._stop.wait(30)
                return
            time.sleep(self.latency)
            with self._lock:
                seen = self._attempts[text] = self._attempts.get(text, 0) + 1
            if targeted and seen <= self.drop_first:
                handler.close_connection = True  # hang up without a status line: the client sees the connection cut
                return
            if targeted and seen <= self.fail_first:
                message = f"bad key {handler.headers.get('Authorization')}" if self.echo_auth else "try again later"
                finished()
                self._send(handler, self.fail_status, {"error": {"message": message}})
                return
            content = self.garbage if self.garbage is not None else reply_for(text)
            finished()
            self._send(handler, 200, {"id": "fake", "object": "chat.completion", "model": body.get("model"),
                                      "choices": [{"index": 0, "finish_reason": "stop",
                                                   "message": {"role": "assistant", "content": content}}]})
        finally:
            finished()

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        try:
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass
