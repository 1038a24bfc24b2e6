"""Benchmark of the evaluation runner: 10,000 chains, baseline judges, every default task and metric.

    python -m stepcritic.bench.runner [--chains 10000] [--runs 3] [--judge random,rate=0.3,seed=0]
    python -m stepcritic.bench.runner --large      # 100,000 chains

Synthesises canonical chains (tiny PNGs, 2-4 chains per image/question group, premises for RPTS) once,
then times `python -m stepcritic.eval` in a fresh process per run with an empty output folder, so each
run does the full job (judging, cache, metrics, report, plots). Prints each run's wall time, CPU time and
peak RSS (from `os.wait4`, the child's own rusage) and the medians, against the target where there is one.
Target: < 5 s at 10,000 chains; < 60 s and < 1 GB at 100,000.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

CATEGORIES = ("perception", "reasoning")
# chains: (seconds, bytes of peak RSS) that the median run must stay under (None: no memory target)
TARGETS = {10_000: (5.0, None), 100_000: (60.0, 10**9)}
LARGE = 100_000
COLORS = ("red", "blue", "green", "yellow")


def tiny_pngs() -> dict:
    from PIL import Image

    out = {}
    for name in COLORS:
        buf = io.BytesIO()
        Image.new("RGB", (8, 8), name).save(buf, format="PNG")
        out[name] = buf.getvalue()
    return out


def synth_step(rng: random.Random, index: int, correct: bool) -> dict:
    kind = "description" if index < 2 else "reasoning"
    describes = kind == "description"
    return {
        "text": f"Step {index + 1}: the {rng.choice(COLORS)} shape is {rng.choice(('left', 'right'))}.",
        "type": kind, "correct": correct,
        "description_correctness": ("correct" if correct else "unsupported") if describes else None,
        "description_relevance": "both" if describes else None,
        "description_errors": [] if correct or not describes else ["attribute"],
        "logic_correct": None if describes else correct, "logic_relevant": None if describes else True,
        "informative": None if describes else True,
        "logic_error": None if correct or describes else "inter",
        "explanations": [] if correct else [f"The shape in step {index + 1} has another colour."],
        "premises": list(range(index)) if index >= 2 else [],
        "human_score": 1.0 if correct else 0.0,
    }


def synth_chains(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    pngs = tiny_pngs()
    chains, group = [], 0
    while len(chains) < n:
        color = COLORS[group % len(COLORS)]
        for member in range(min(rng.randint(2, 4), n - len(chains))):
            steps = [synth_step(rng, i, member == 0 or rng.random() > 0.3) for i in range(rng.randint(3, 6))]
            chain_ok = all(s["correct"] for s in steps)
            chains.append({
                "chain_id": f"bench-{group}-{member}", "group_id": f"g{group}", "source": "bench",
                "image": {"bytes": pngs[color], "path": None}, "question": f"Question {group}: where is it?",
                "reference_answer": "left", "final_answer": "left" if chain_ok else "right",
                "answer_correct": chain_ok, "chain_correct": chain_ok, "generator": "bench",
                "category": CATEGORIES[group % 2], "steps": steps, "meta": "{}",
            })
        group += 1
    return chains


def timed_run(command: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MiB) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"eval run failed ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # Linux reports KiB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.bench.runner", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chains", type=int, default=10_000)
    parser.add_argument("--large", action="store_const", const=LARGE, dest="chains",
                        help=f"{LARGE:,} chains, the size of the memory target")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--judge", action="append", dest="judges", help="default: random,rate=0.3,seed=0")
    parser.add_argument("--workdir", default=None, help="keep data and outputs here (default: a temp dir)")
    args = parser.parse_args(argv)
    from stepcritic.data_prep.schema import save_chains

    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or tmp
        data = os.path.join(work, "chains")
        start = time.perf_counter()
        save_chains(synth_chains(args.chains), data)
        print(f"synthesised {args.chains} chains in {time.perf_counter() - start:.1f} s")
        walls, cpus, rss = [], [], []
        for run in range(args.runs):
            command = [sys.executable, "-m", "stepcritic.eval", "--chains", data, "--out",
                       os.path.join(work, f"out{run}"), "--no-progress"]
            for spec in args.judges or ["random,rate=0.3,seed=0"]:
                command += ["--judge", spec]
            wall, cpu, peak = timed_run(command)
            walls.append(wall)
            cpus.append(cpu)
            rss.append(peak)
            print(f"run {run + 1}: {wall:.1f} s wall, {cpu:.1f} s CPU, {peak:.0f} MiB peak RSS")
        wall, peak = statistics.median(walls), statistics.median(rss)
        print(f"median of {args.runs}: {wall:.1f} s wall, {statistics.median(cpus):.1f} s CPU, {peak:.0f} MiB peak RSS")
        if args.chains in TARGETS:
            seconds, limit = TARGETS[args.chains]
            met = wall < seconds and (limit is None or peak * 2**20 < limit)
            print(f"target at {args.chains:,} chains: < {seconds:g} s" + (f" and < {limit / 1e9:g} GB" if limit else "")
                  + (": met" if met else ": NOT met"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
