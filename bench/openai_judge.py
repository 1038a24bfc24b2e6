"""Throughput of the OpenAI-compatible judge against the local fake server (a benchmark, not a test).

    python -m stepcritic.bench.openai_judge [--n 1000] [--concurrency 32] [--latency 0.1] [--repeats 3]

Every request waits `latency` seconds at the server, as a remote model would, so the number measured is
how well the judge overlaps requests (and what its own per-request work costs), not model speed.
The chains are synthetic (`data_prep.synth`) and the server is `testing.fake_openai_server`, so an installed
package runs it as well as a source checkout. The judge runs as `stepcritic eval` runs it: `judge_stream` over
all chains, each critique appended (flushed and fsynced) to a judgment cache in a temporary folder as it arrives.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def run_once(base_url: str, chains: list[dict], concurrency: int) -> float:
    from stepcritic.eval.cache import JsonlLog
    from stepcritic.eval.judges.registry import make_judge

    judge = make_judge({"kind": "openai", "target": "bench", "base_url": base_url, "concurrency": concurrency})
    critiques = []
    with tempfile.TemporaryDirectory() as tmp:
        log = JsonlLog(os.path.join(tmp, "critiques.jsonl"), key="chain_id")
        start = time.perf_counter()
        for _, critique in judge.judge_stream(chains):
            log.append([critique.to_json()])
            critiques.append(critique)
        elapsed = time.perf_counter() - start
        log.close()
    judge.close()
    if not all(c.valid for c in critiques):
        raise SystemExit("benchmark: some judgments were invalid; the fake server or the judge is broken")
    return len(critiques) / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="judgments per run")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.1, help="server delay per request, seconds")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    from stepcritic.data_prep.synth import synthesize
    from stepcritic.testing.fake_openai_server import FakeOpenAIServer

    base = synthesize(6, seed=0)
    chains = [dict(base[i % len(base)], chain_id=f"bench-{i}") for i in range(args.n)]
    rates = []
    with FakeOpenAIServer(latency=args.latency) as server:
        for run in range(1, args.repeats + 1):
            rates.append(run_once(server.base_url, chains, args.concurrency))
            print(f"run {run}: {rates[-1]:.1f} judgments/s", flush=True)
    ideal = args.concurrency / args.latency
    print(f"median of {args.repeats}: {statistics.median(rates):.1f} judgments/s "
          f"(n={args.n}, concurrency={args.concurrency}, latency={args.latency * 1000:.0f} ms; "
          f"ideal {ideal:.0f}/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
