"""What the server tests share: a cheap judge (`py:serve_kit.HashJudge`), the server as a subprocess, a small
HTTP client on the standard library, and request bodies.

`HashJudge` scores a step by hashing the chain's question, images and the step, so its scores depend on the chain's
content only, as a model's do, at no cost; `delay` stands in for a forward pass's time per batch, and a step that
reads `FAIL` makes it raise, as a model does on an input it cannot take.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time

from helpers import png

from stepcritic.data_prep.schema import chain_images
from stepcritic.eval.judges.base import Critique, Judge

TESTS = os.path.dirname(os.path.abspath(__file__))
HASH_JUDGE = "py:serve_kit.HashJudge"


class HashJudge(Judge):
    kind = "serve-hash"
    OPTIONS = {"delay": float}

    def __init__(self, spec: str, delay: float = 0.0, **options):
        super().__init__(spec, delay=delay, **options)
        self.delay = delay

    def judge_batch(self, chains: list[dict]) -> list[Critique]:
        if self.delay:
            time.sleep(self.delay)
        out = []
        for chain in chains:
            seed = hashlib.sha256(chain["question"].encode())
            for image in chain_images(chain):
                seed.update(hashlib.sha256(image["bytes"]).digest())
            p_incorrect = []
            for step in chain["steps"]:
                if step["text"] == "FAIL":
                    raise ValueError("this judge cannot read the step FAIL")
                digest = hashlib.sha256(seed.digest() + step["text"].encode()).digest()
                p_incorrect.append(int.from_bytes(digest[:4], "big") / 2**32)
            out.append(Critique(chain["chain_id"], [p < 0.5 for p in p_incorrect], p_incorrect=p_incorrect))
        return out


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


PNGS = [png((255, 0, 0)), png((0, 0, 255), shape="square"), png((0, 160, 0), size=48)]


def wire_chain(n: int, steps: int | None = None, images: int | None = None) -> dict:
    """The n-th of a family of valid wire chains: 1-5 steps, 0-2 images (data URLs and bare base64)."""
    steps = 1 + n % 5 if steps is None else steps
    images = n % 3 if images is None else images
    pictures = [data_url(PNGS[(n + k) % 3]) if k == 0 else base64.b64encode(PNGS[(n + k) % 3]).decode()
                for k in range(images)]
    return {"id": f"c{n}", "question": f"What is shown in picture {n % 7}?",
            "steps": [f"Step {s + 1}: the shape {'is quite ' * (n % 4)}red number {n % 11}." for s in range(steps)],
            "images": pictures}


def canonical(wire: dict) -> dict:
    """The chain `make_chain` builds from a wire chain: what a direct `score_chains` call is given."""
    from stepcritic.rewards.core import make_chain

    pictures = [base64.b64decode(v.split(",", 1)[-1]) for v in wire.get("images") or []]
    return make_chain(wire["question"], wire["steps"], pictures, chain_id=str(wire.get("id", "chain")))


class Server:
    """`python -m stepcritic.cli serve --port 0 ...` in a subprocess; its stdout and stderr go to files."""

    def __init__(self, args: list, tmp_path, name: str = "server", env: dict | None = None):
        self.out_path, self.err_path = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
        environment["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS, environment.get("PYTHONPATH")) if p)
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "stepcritic.cli", "serve", "--port", "0", *args],
                                         stdout=out, stderr=err, env=environment)
        self.port = None

    def wait_ready(self, timeout: float = 60.0) -> "Server":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}: {self.log()}")
            if self.port is None:
                found = re.search(r"on http://127\.0\.0\.1:(\d+)", self.err_path.read_text())
                self.port = int(found.group(1)) if found else None
            if self.port is not None:
                try:
                    if request(self.port, "GET", "/health")[0] == 200:
                        return self
                except OSError:
                    pass
            time.sleep(0.05)
        raise AssertionError(f"the server did not start: {self.log()}")

    def log(self) -> str:
        return self.out_path.read_text() + self.err_path.read_text()

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def __enter__(self):
        return self.wait_ready()

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def request(port: int, method: str, path: str, body=None, headers: dict | None = None, conn=None,
            timeout: float = 30.0):
    """(status, headers, parsed JSON or text) of one request; `conn` reuses a keep-alive connection."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        raw = response.read()
        text = raw.decode()
        kind = response.getheader("content-type") or ""
        return response.status, dict(response.getheaders()), json.loads(text) if "json" in kind else text
    finally:
        if own:
            conn.close()


def metric(text: str, name: str, **labels) -> float:
    """The sum of a metric's samples whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        found = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if found and all(f'{k}="{v}"' in (found.group(1) or "") for k, v in labels.items()):
            total += float(found.group(2))
    return total
