"""Throughput and latency of `stepcritic serve` on loopback, and what dynamic batching buys (a benchmark, not a test).

    python -m stepcritic.bench.serve [--judge SPEC] [--requests 400] [--seconds 20] [--rss-requests 2000]

Without `--judge`, a tiny PRM is trained first (two steps on synthetic chains, as the tests' `tiny_prm`), so the
numbers are those of a real trained artifact through the whole path: HTTP, request parsing and image checks, the
batcher, the processor and the forward pass. Each request carries one chain of 3-5 steps and one 64-pixel image.

The server runs as `python -m stepcritic.cli serve` in its own process (`--threads` torch threads). For each
concurrency (1, 8, 32), clients on keep-alive connections send requests back to back, up to `--requests` requests
or `--seconds` seconds, whichever comes first, after a warm-up; reported: chains/s and the p50/p99 latency. The
same is measured at concurrency 32 with `--max-batch 1` (no batching); target: batching >= 3x its throughput.
Last, `--rss-requests` requests at concurrency 8 while the server's RSS is read from /proc every 0.1 s: its peak
per tenth of the run, which stays flat after the warm-up when nothing leaks.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

CONCURRENCIES = (1, 8, 32)
BATCHING_TARGET = 3.0


def tiny_prm(work: str) -> str:
    """A PRM folder after two training steps on synthetic chains."""
    from stepcritic.bench.runner import synth_chains
    from stepcritic.data_prep.build import build_dataset
    from stepcritic.train.config import parse_recipe
    from stepcritic.train.run import train

    recipes = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes", "tiny")
    build_dataset(synth_chains(8), "prm-sft", os.path.join(work, "data"), test_fraction=0.25, seed=0)
    recipe = parse_recipe(os.path.join(recipes, "prm.yaml"), dict(
        dataset_path=os.path.join(work, "data"), output_dir=os.path.join(work, "prm"), max_steps=2,
        per_device_train_batch_size=2, logging_steps=1, report_to="none", save_strategy="no"))
    train(recipe)
    return os.path.join(work, "prm")


def bodies(n: int) -> list[bytes]:
    """n request bodies, one chain each, all different (3-5 steps, one of four 64-pixel images)."""
    from PIL import Image, ImageDraw

    images = []
    for color in ("red", "blue", "green", "orange"):
        im = Image.new("RGB", (64, 64), "white")
        ImageDraw.Draw(im).ellipse((16, 16, 48, 48), fill=color)
        buf = io.BytesIO()
        im.save(buf, format="PNG")
        images.append("data:image/png;base64," + base64.b64encode(buf.getvalue()).decode())
    return [json.dumps({"chains": [{
        "id": f"r{i}", "question": f"What colour is the circle in picture {i % 4}?", "images": [images[i % 4]],
        "steps": [f"Step {s + 1}: the circle looks {('red', 'blue', 'green')[(i + s) % 3]} ({i})."
                  for s in range(3 + i % 3)]}]}).encode() for i in range(n)]


class Server:
    def __init__(self, spec: str, work: str, threads: int, *args: str):
        self.err_path = os.path.join(work, f"server-{time.monotonic_ns()}.err")
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "stepcritic.cli", "serve", "--judge", spec,
                                          "--port", "0", *args], stdout=subprocess.DEVNULL, stderr=err, env=env)
        deadline, self.port = time.monotonic() + 180, None
        while self.port is None or not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start:\n{open(self.err_path).read()[-3000:]}")
            found = re.search(r"on http://127\.0\.0\.1:(\d+)", open(self.err_path).read())
            self.port = int(found.group(1)) if found else None
            time.sleep(0.1)

    def _healthy(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            conn.request("GET", "/health")
            return conn.getresponse().status == 200
        except OSError:
            return False

    def rss_mib(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) / 1024

    def stop(self) -> None:
        self.proc.terminate()
        if self.proc.wait(60) != 0:
            raise SystemExit(f"the server exited with {self.proc.returncode}")


def load(port: int, payloads: list[bytes], concurrency: int, seconds: float, progress=None) -> dict:
    """Send `payloads` from `concurrency` keep-alive clients (stopping after `seconds`); throughput and latency."""
    latencies, lock, next_index = [], threading.Lock(), iter(range(len(payloads)))
    deadline = time.perf_counter() + seconds

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        while time.perf_counter() < deadline:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            start = time.perf_counter()
            conn.request("POST", "/v1/score", body=payloads[i], headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise SystemExit(f"request {i}: HTTP {response.status}")
            with lock:
                latencies.append(time.perf_counter() - start)
                if progress:
                    progress(len(latencies))

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(client) for _ in range(concurrency)]:
            future.result()
    wall = time.perf_counter() - start
    latencies.sort()
    return {"concurrency": concurrency, "requests": len(latencies), "seconds": round(wall, 2),
            "chains_per_s": round(len(latencies) / wall, 1),
            "p50_ms": round(1000 * latencies[len(latencies) // 2], 1),
            "p99_ms": round(1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 1)}


def report(label: str, row: dict) -> None:
    print(f"{label:<28} concurrency {row['concurrency']:>2}: {row['chains_per_s']:>7.1f} chains/s, "
          f"p50 {row['p50_ms']:>7.1f} ms, p99 {row['p99_ms']:>7.1f} ms ({row['requests']} requests in "
          f"{row['seconds']} s)", flush=True)


def rss_run(server: Server, payloads: list[bytes]) -> list[float]:
    """The server's peak RSS (MiB) in each tenth of a run over `payloads` at concurrency 8."""
    tenth = max(1, len(payloads) // 10)
    peaks, done = [0.0] * 10, [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            part = min(9, done[0] // tenth)
            peaks[part] = max(peaks[part], server.rss_mib())
            time.sleep(0.1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        load(server.port, payloads, 8, float("inf"), progress=lambda n: done.__setitem__(0, n))
    finally:
        stop.set()
        sampler.join()
    return peaks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.bench.serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judge", help="judge spec to serve (default: a tiny PRM trained first)")
    parser.add_argument("--requests", type=int, default=400, help="most requests per measurement (default 400)")
    parser.add_argument("--seconds", type=float, default=20.0, help="most seconds per measurement (default 20)")
    parser.add_argument("--warmup", type=int, default=32, help="requests before measuring (default 32)")
    parser.add_argument("--max-batch", type=int, default=32, help="the batching server's --max-batch (default 32)")
    parser.add_argument("--max-wait-ms", type=float, default=10.0, help="its --max-wait-ms (default 10)")
    parser.add_argument("--rss-requests", type=int, default=2000, help="requests of the RSS run (0: none)")
    parser.add_argument("--threads", type=int, default=1, help="the server's torch threads (default 1)")
    args = parser.parse_args(argv)
    import torch

    results = {"rows": []}
    with tempfile.TemporaryDirectory() as work:
        if args.judge is None:
            torch.set_num_threads(1)
            start = time.perf_counter()
            args.judge = f"prm:{tiny_prm(work)}"
            print(f"trained a tiny PRM in {time.perf_counter() - start:.0f} s", flush=True)
        payloads = bodies(args.warmup + args.requests + args.rss_requests)
        warm, measured = payloads[:args.warmup], payloads[args.warmup:args.warmup + args.requests]
        print(f"serving {args.judge} ({args.threads} torch thread(s)); each request: one chain, one image", flush=True)
        batched, single = {}, None
        for label, max_batch in ((f"--max-batch {args.max_batch}", args.max_batch), ("--max-batch 1", 1)):
            server = Server(args.judge, work, args.threads, "--max-batch", str(max_batch), "--max-wait-ms",
                            str(args.max_wait_ms), "--max-queue", "4096")
            try:
                load(server.port, warm, 8, args.seconds)
                for concurrency in (CONCURRENCIES if max_batch > 1 else (32,)):
                    row = load(server.port, measured, concurrency, args.seconds)
                    report(label, row)
                    results["rows"].append({"max_batch": max_batch, **row})
                    if max_batch > 1:
                        batched[concurrency] = row
                    else:
                        single = row
                if max_batch > 1 and args.rss_requests:
                    peaks = rss_run(server, payloads[args.warmup + args.requests:])
                    results["rss_mib_per_tenth"] = [round(p, 1) for p in peaks]
                    print(f"server RSS over {args.rss_requests} requests, peak per tenth (MiB): "
                          + " ".join(f"{p:.0f}" for p in peaks), flush=True)
            finally:
                server.stop()
        ratio = batched[32]["chains_per_s"] / single["chains_per_s"]
        results["batching_ratio_at_32"] = round(ratio, 2)
        print(f"batching at concurrency 32: {ratio:.2f}x the throughput of --max-batch 1 (target >= "
              f"{BATCHING_TARGET:g}x): {'met' if ratio >= BATCHING_TARGET else 'NOT met'}")
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
