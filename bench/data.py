"""Benchmark of the data stage at scale: synthesise N chains, ingest them from the canonical jsonl, build every kind.

    python -m stepcritic.bench.data [--n 20000] [--kinds KIND ...] [--image-size 96] [--workdir DIR]

Each stage is one `stepcritic data ...` command in a fresh process, so its peak RSS (from `os.wait4`, the child's
own rusage) is that stage's alone: `synth --n N`, then (outside the clock) the synthesised chains are written out
as a canonical .jsonl with one image file per group, as a user's own annotations would be, then
`ingest --format jsonl` of that file and `build --kind K` from the ingested chains for every kind. Prints one JSON
object: per stage the wall time, chains/s, peak RSS and the size written. A stage whose memory passes
`--max-rss-gib` is stopped and reported as such instead of taking the machine down.
Targets (issue 14): peak RSS under 2 GB at N = 200,000, and time linear in N (200k/20k ratio between 8 and 12).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time

from stepcritic.data_prep.contract import KIND_NAMES


def folder_mib(path: str) -> float:
    total = 0
    for root, _, names in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, name)) for name in names)
    return round(total / 2**20, 1)


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_stage(name: str, argv: list[str], n_chains: int, out: str | None, max_rss_mib: float) -> dict:
    """Run `stepcritic <argv>` in a child process; its wall time, chains/s, peak RSS and output size."""
    command = [sys.executable, "-m", "stepcritic", *argv]
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"})
    stopped, done = threading.Event(), threading.Event()

    def watch():  # the kernel's peak comes from wait4; this only stops a runaway stage (no poll(): wait4 reaps)
        while not done.wait(0.2):
            if _rss_mib(proc.pid) > max_rss_mib:  # 0 once the child has exited
                stopped.set()
                os.kill(proc.pid, signal.SIGKILL)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    stderr = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    done.set()
    proc.returncode = os.waitstatus_to_exitcode(status)
    watcher.join()
    result = {"stage": name, "seconds": round(wall, 2), "chains_per_s": round(n_chains / wall, 1),
              "peak_rss_mib": round(usage.ru_maxrss / 1024), "ok": proc.returncode == 0}
    if stopped.is_set():
        result["error"] = f"stopped: RSS passed {max_rss_mib:.0f} MiB"
    elif proc.returncode != 0:
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
        for batch in ds.iter(batch_size=1000):
            for i in range(len(batch["chain_id"])):
                record = {key: batch[key][i] for key in batch}
                name = f"{record['group_id']}.png"
                if not os.path.exists(os.path.join(images, name)):
                    with open(os.path.join(images, name), "wb") as img:
                        img.write(record["image"]["bytes"])
                record["image"] = f"images/{name}"
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.bench.data", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20_000, help="chains to synthesise (default 20000)")
    parser.add_argument("--kinds", nargs="+", choices=KIND_NAMES, default=list(KIND_NAMES), metavar="KIND",
                        help=f"build kinds to run (default: all of {', '.join(KIND_NAMES)})")
    parser.add_argument("--image-size", type=int, default=96, help="synthetic image side in px (default 96)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-rss-gib", type=float, default=12.0,
                        help="stop a stage whose memory passes this (default 12 GiB)")
    parser.add_argument("--workdir", default=None, help="keep data and outputs here (default: a temp dir)")
    args = parser.parse_args(argv)
    max_rss = args.max_rss_gib * 1024

    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or tmp
        os.makedirs(work, exist_ok=True)
        synth_out, jsonl, chains = (os.path.join(work, p) for p in ("synth", "canonical/chains.jsonl", "chains"))
        stages = [run_stage("synth", ["data", "synth", "--n", str(args.n), "--seed", str(args.seed),
                                      "--image-size", str(args.image_size), "--out", synth_out],
                            args.n, synth_out, max_rss)]
        report = {"benchmark": "stepcritic.bench.data", "n_chains": args.n, "image_size": args.image_size,
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                              "platform": platform.platform()},
                  "stages": stages}
        if stages[0]["ok"]:
            start = time.perf_counter()
            os.makedirs(os.path.dirname(jsonl), exist_ok=True)
            written = write_canonical_jsonl(synth_out, jsonl)
            report["canonical_jsonl"] = {"chains": written, "seconds": round(time.perf_counter() - start, 2),
                                         "mib": folder_mib(os.path.dirname(jsonl))}
            stages.append(run_stage("ingest", ["data", "ingest", "--format", "jsonl", "--input", jsonl,
                                               "--out", chains], args.n, chains, max_rss))
        if stages[-1]["stage"] == "ingest" and stages[-1]["ok"]:
            for kind in args.kinds:
                out = os.path.join(work, kind)
                stages.append(run_stage(f"build/{kind}", ["data", "build", "--chains", chains, "--kind", kind,
                                                          "--out", out, "--seed", str(args.seed)],
                                        args.n, out, max_rss))
        report["peak_rss_mib"] = max(s["peak_rss_mib"] for s in stages)
        report["total_seconds"] = round(sum(s["seconds"] for s in stages), 1)
        print(json.dumps(report, indent=2))
    return 0 if all(s["ok"] for s in stages) else 1


if __name__ == "__main__":
    raise SystemExit(main())
