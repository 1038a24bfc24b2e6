"""Benchmark of the data stage at scale: chains/s and peak memory of every stage, for one or more N.

    python -m stepcritic.bench.data_stage --n 20000 200000 [--kinds KIND ...] [--workdir DIR] [--json FILE]

For each N: `data synth --n N`; the synthesised chains written out (outside the clock) as a canonical .jsonl with
one PNG per group, as a user's own annotations would be; `data ingest --format jsonl` of that file; and
`data build --kind K` from the ingested chains for every kind. Each stage is one `stepcritic data ...` command in a
fresh child process, and its peak RSS is that child's own (`os.wait4`'s rusage: the kernel's high-water mark of
the process, file pages it mapped included), so one stage never masks another. Prints a table per N and, with
several N, each stage's time ratio largest/smallest N against the N ratio (linear growth: the same ratio).
Targets: peak RSS under 2 GB at N = 200,000; time linear in N (200k/20k between 8 and 12).
A benchmark, not a test: run it by hand and put the numbers in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from stepcritic.data_prep.contract import KIND_NAMES

RSS_TARGET_MIB = 2000 * 1e6 / 2**20  # "under 2 GB"


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.bench.data_stage", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[20_000], help="chain counts to run (default 20000)")
    parser.add_argument("--kinds", nargs="+", choices=KIND_NAMES, default=list(KIND_NAMES), metavar="KIND",
                        help=f"build kinds to run (default: all of {', '.join(KIND_NAMES)})")
    parser.add_argument("--image-size", type=int, default=96, help="synthetic image side in px (default 96)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-proc", type=int, default=1,
                        help="--num-proc of ingest and every build (default 1); a stage's peak RSS is then that of its "
                             "largest process (wait4 gives the maximum over the processes, not their sum)")
    parser.add_argument("--workdir", default=None, help="keep data and outputs here (default: a temporary folder)")
    parser.add_argument("--json", default=None, help="also write the full report to this file")
    return parser


def folder_mib(path: str) -> float:
    total = sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)
    return round(total / 2**20, 1)


def run_stage(name: str, argv: list[str], n_chains: int, out: str | None) -> dict:
    """Run `stepcritic <argv>` in a child process: its wall time, chains/s, peak RSS and output size."""
    env = {**os.environ, "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
    start = time.perf_counter()
    # --overwrite: the outputs are the benchmark's own, and a run again with the same --workdir measures again
    proc = subprocess.Popen([sys.executable, "-m", "stepcritic", *argv, "--overwrite"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env)
    stderr = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage; wait4 also reaps it
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    # CPU time (user + system, the child's own) beside wall time: on a machine shared with other jobs the wall
    # clock of the same stage varies by 2x from run to run, its CPU time by a few percent
    result = {"stage": name, "seconds": round(seconds, 2), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
              "chains_per_s": round(n_chains / seconds, 1), "peak_rss_mib": round(usage.ru_maxrss / 1024),
              "ok": proc.returncode == 0}
    if proc.returncode != 0:
        result["error"] = (stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:500]
    if out and os.path.exists(out):
        result["output_mib"] = folder_mib(out)
    return result


def write_canonical_jsonl(chains_dir: str, path: str) -> int:
    """The synthesised chains as canonical JSON lines, each group's image once as a PNG file next to them."""
    from datasets import Image, load_from_disk

    ds = load_from_disk(chains_dir).cast_column("image", Image(decode=False))
    images = os.path.join(os.path.dirname(path), "images")
    os.makedirs(images, exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for batch in ds.iter(batch_size=500):
            for values in zip(*batch.values()):
                record = dict(zip(batch, values))
                name = f"{record['group_id']}.png"
                if not os.path.exists(os.path.join(images, name)):
                    with open(os.path.join(images, name), "wb") as img:
                        img.write(record["image"]["bytes"])
                record["image"] = f"images/{name}"
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                n += 1
    return n


def run_n(n: int, args, work: str) -> dict:
    synth_out, jsonl, chains = (os.path.join(work, p) for p in ("synth", "canonical/chains.jsonl", "chains"))
    stages = [run_stage("synth", ["data", "synth", "--n", str(n), "--seed", str(args.seed),
                                  "--image-size", str(args.image_size), "--out", synth_out], n, synth_out)]
    report = {"n_chains": n, "stages": stages}
    if stages[0]["ok"]:
        start = time.perf_counter()
        os.makedirs(os.path.dirname(jsonl), exist_ok=True)
        # in a child: a fresh process's peak RSS starts from its parent's at the fork (vfork shares the memory map,
        # and exec keeps the high-water mark), so this process must stay small for the stages to measure alone
        written = int(subprocess.run([sys.executable, "-c", "import sys; from stepcritic.bench.data_stage import "
                                      "write_canonical_jsonl as w; print(w(sys.argv[1], sys.argv[2]))",
                                      synth_out, jsonl], check=True, capture_output=True, text=True).stdout)
        report["canonical_jsonl"] = {"chains": written, "seconds": round(time.perf_counter() - start, 2),
                                     "mib": folder_mib(os.path.dirname(jsonl))}
        stages.append(run_stage("ingest", ["data", "ingest", "--format", "jsonl", "--input", jsonl, "--out", chains,
                                           "--num-proc", str(args.num_proc)], n, chains))
    if stages[-1]["stage"] == "ingest" and stages[-1]["ok"]:
        report["chains_mib"] = stages[-1].get("output_mib")
        for kind in args.kinds:
            out = os.path.join(work, kind)
            stages.append(run_stage(f"build/{kind}", ["data", "build", "--chains", chains, "--kind", kind,
                                                      "--out", out, "--seed", str(args.seed),
                                                      "--num-proc", str(args.num_proc)], n, out))
    report["peak_rss_mib"] = max(s["peak_rss_mib"] for s in stages)
    report["seconds"] = round(sum(s["seconds"] for s in stages), 1)
    report["cpu_seconds"] = round(sum(s["cpu_seconds"] for s in stages), 1)
    return report


def table(report: dict) -> str:
    lines = [f"N = {report['n_chains']:,}: {report['seconds']} s in all ({report['cpu_seconds']} s CPU), peak RSS "
             f"{report['peak_rss_mib']} MiB",
             f"  {'stage':<22}{'seconds':>9}{'CPU s':>9}{'chains/s':>11}{'peak RSS MiB':>14}{'output MiB':>12}"]
    for s in report["stages"]:
        lines.append(f"  {s['stage']:<22}{s['seconds']:>9.1f}{s['cpu_seconds']:>9.1f}{s['chains_per_s']:>11.0f}"
                     f"{s['peak_rss_mib']:>14}"
                     f"{s.get('output_mib', ''):>12}" + ("" if s["ok"] else f"  FAILED: {s.get('error')}"))
    return "\n".join(lines)


def scaling(reports: list[dict]) -> dict:
    """Per stage: time at the largest N over time at the smallest, beside the N ratio (linear: equal)."""
    small, large = reports[0], reports[-1]

    def ratios(key):
        before = {s["stage"]: s[key] for s in small["stages"]}
        return {s["stage"]: round(s[key] / before[s["stage"]], 2) for s in large["stages"]
                if before.get(s["stage"], 0) > 0}

    return {"n_ratio": round(large["n_chains"] / small["n_chains"], 2), "time_ratio": ratios("seconds"),
            "total_time_ratio": round(large["seconds"] / small["seconds"], 2), "cpu_ratio": ratios("cpu_seconds"),
            "total_cpu_ratio": round(large["cpu_seconds"] / small["cpu_seconds"], 2)}


def main(args: argparse.Namespace) -> int:
    if any(n < 1 for n in args.n):
        print(f"--n takes positive chain counts, got {args.n}", file=sys.stderr)
        return 2
    ns = sorted(set(args.n))
    result = {"benchmark": "stepcritic.bench.data_stage", "image_size": args.image_size, "num_proc": args.num_proc,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform()},
              "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        for n in ns:
            work = os.path.join(args.workdir or tmp, f"n{n}")
            os.makedirs(work, exist_ok=True)
            report = run_n(n, args, work)
            result["runs"].append(report)
            print(table(report), flush=True)
            if args.workdir is None:  # the next N needs the disk more than we need these outputs
                subprocess.run(["rm", "-rf", work], check=False)
    if len(ns) > 1:
        result["scaling"] = scaling(result["runs"])
        print(f"time ratio N={ns[-1]:,} / N={ns[0]:,} (N ratio {result['scaling']['n_ratio']}): "
              + ", ".join(f"{k} {v}" for k, v in result["scaling"]["time_ratio"].items())
              + f"; all stages {result['scaling']['total_time_ratio']}")
        print("CPU time ratio: " + ", ".join(f"{k} {v}" for k, v in result["scaling"]["cpu_ratio"].items())
              + f"; all stages {result['scaling']['total_cpu_ratio']}")
    largest = result["runs"][-1]
    ok = all(s["ok"] for r in result["runs"] for s in r["stages"])
    print(f"peak RSS at N={largest['n_chains']:,}: {largest['peak_rss_mib']} MiB "
          f"({'under' if largest['peak_rss_mib'] < RSS_TARGET_MIB else 'OVER'} the 2 GB target)"
          + ("" if ok else "; some stages FAILED (see above), so these numbers are incomplete"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(make_parser().parse_args()))
