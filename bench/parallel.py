"""How `stepcritic eval` scales over processes under torchrun (a benchmark, not a test).

    python -m stepcritic.bench.parallel [--chains 2000] [--procs 1,2] [--rounds 1] [--judge SPEC]

Without `--judge`, a tiny PRM is trained first (two steps on synthetic chains, as `bench/serve.py` does). The same
command, `torchrun --nproc-per-node N -m stepcritic eval --tasks critique`, judges `--chains` synthetic chains (3-6
steps, one 64-pixel image each) into a fresh output folder for each N, every rank on one torch thread (on a GPU
machine, one GPU per rank). Reported per N: the median wall time of the whole command (start-up, model loading,
judging, the merge and the report) over `--rounds`, the CPU time of all its processes (on a shared machine, the
steadier figure: what N processes cost beyond one), and the speed-up over N=1; metrics.json must be the same bytes for
every N, or the benchmark fails. `--judge prm:tiny,OPTIONS` is the tiny PRM with options. Target on 2 cores: >= 1.7x
with 2 processes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

TARGET = 1.7


def eval_seconds(procs: int, chains: str, judge: str, out: str) -> tuple[float, float]:
    """The wall time of the command and the CPU time of all its processes."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(procs), "-m", "stepcritic",
               "eval", "--chains", chains, "--judge", judge, "--tasks", "critique", "--no-progress", "--out", out]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"benchmark: eval with {procs} processes failed:\n{done.stderr[-3000:]}")
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def scaling(n_chains: int, procs: list[int], rounds: int, judge: str | None, work: str) -> dict:
    from stepcritic.bench.runner import synth_chains
    from stepcritic.bench.serve import tiny_prm
    from stepcritic.data_prep.schema import save_chains, validate_chain

    chains = os.path.join(work, "chains")
    save_chains([validate_chain(c) for c in synth_chains(n_chains)], chains)
    if judge is None:
        import torch

        torch.set_num_threads(1)
        judge = f"prm:{tiny_prm(work)}"
    elif judge.startswith("prm:tiny"):  # the tiny PRM with options: `prm:tiny,batch_size=1`
        import torch

        torch.set_num_threads(1)
        judge = f"prm:{tiny_prm(work)}{judge[len('prm:tiny'):]}"
    seconds, cpu, metrics = {}, {}, {}
    for n in procs:
        times = []
        for r in range(rounds):
            out = os.path.join(work, f"eval-{n}-{r}")
            times.append(eval_seconds(n, chains, judge, out))
            with open(os.path.join(out, "metrics.json"), "rb") as f:
                metrics.setdefault(f.read(), []).append(n)
        seconds[n] = statistics.median(wall for wall, _ in times)
        cpu[n] = round(statistics.median(used for _, used in times), 1)
    if len(metrics) != 1:
        raise SystemExit(f"benchmark: metrics.json differs between process counts {list(metrics.values())}")
    base = seconds[procs[0]]
    return {"chains": n_chains, "judge": judge, "rounds": rounds, "cpus": os.cpu_count(),
            "seconds": seconds, "cpu_seconds": cpu, "speedup": {n: round(base / s, 2) for n, s in seconds.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.bench.parallel", description=__doc__.split("\n")[0])
    parser.add_argument("--chains", type=int, default=2000)
    parser.add_argument("--procs", default="1,2", help="comma-separated process counts; the first is the base")
    parser.add_argument("--rounds", type=int, default=1, help="runs per process count (their median is reported)")
    parser.add_argument("--judge", default=None, help="a judge spec (default: a freshly trained tiny PRM)")
    args = parser.parse_args(argv)
    procs = [int(p) for p in args.procs.split(",")]
    with tempfile.TemporaryDirectory() as work:
        report = scaling(args.chains, procs, args.rounds, args.judge, work)
    print(json.dumps(report, indent=2))
    for n in procs:
        print(f"{n} process(es): {report['seconds'][n]:.1f} s, {report['speedup'][n]:.2f}x")
    if 2 in procs and procs[0] == 1:
        verdict = "meets" if report["speedup"][2] >= TARGET else "misses"
        print(f"2 processes {verdict} the {TARGET}x target on {report['cpus']} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
