"""Judges asked side by side, each in a worker process (`stepcritic eval --jobs N`).

A small local critic decoding one token per forward pass keeps about one core busy whatever torch's thread count
(the demo's critique writer judged 40 chains in 10.0 s on two threads and 10.5 s on one), so judges asked one
after another leave the other cores idle. Each worker rebuilds its judge from the judge's spec, loads the chains
itself and fills that judge's own cache folder, as `runner.run_judge` does in the main process: the judgments read
back and the report are the same as with one job. The cores are shared out: each worker runs torch on
`cores // jobs` threads. Workers are spawned, not forked: the child of a process that has already run torch's
OpenMP threads can hang.

A judge that its spec does not rebuild (one made in code with objects the spec cannot carry, an RPTS scorer bound
to its trees) is asked in the main process while the workers run.
"""

from __future__ import annotations

import os

from stepcritic.errors import UserError
from stepcritic.eval.errors import EvalError


def _start_worker(threads: int) -> None:
    # before torch is imported: its thread pools read these once
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = str(threads)


def _ask(run, load, spec: str, chains: str, limit: int | None, decode: bool, args: tuple) -> dict:
    from stepcritic.eval.judges.registry import build_judge

    try:
        judge = build_judge(spec)
        try:
            return run(judge, load(chains, decode, limit), *args)
        finally:
            judge.close()
    except UserError as e:  # the one-line message travels; the exception class may not unpickle
        return {"error": str(e)}
    except Exception as e:
        return {"error": f"judge {spec!r} failed: {type(e).__name__}: {e}"}


def rebuilds(judge) -> bool:
    """Whether `build_judge(judge.spec)` makes the same judge (same class, same fingerprint)."""
    from stepcritic.eval.judges.registry import build_judge

    if hasattr(judge, "bind_trees"):
        return False
    try:
        twin = build_judge(judge.spec)
    except UserError:
        return False
    try:
        return type(twin) is type(judge) and twin.name == judge.name and twin.fingerprint() == judge.fingerprint()
    finally:
        twin.close()


def run_judges(run, load, judges: list, jobs: int, chains: str, limit: int | None, datasets: dict,
               args: tuple) -> dict:
    """`{judge.name: run(judge, dataset, *args)}` for every judge, up to `jobs` of them at once: `run` is
    `runner.run_judge` and `load` `gold.load_dataset` (handed over, so that this module does not import the
    runner that imports it). `datasets` maps `needs_images` to the loaded chains for the judges asked here; the
    workers load their own, with progress bars off (their bars would interleave)."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing import get_context

    apart = [judge for judge in judges if rebuilds(judge)]
    here = [judge for judge in judges if judge not in apart]
    threads = max(1, (os.cpu_count() or 1) // jobs)
    quiet = (*args[:4], False, *args[5:])  # gold, questions, out_dir, wants_critiques, progress, ...
    runs = {}
    with ProcessPoolExecutor(min(jobs, len(apart)) or 1, mp_context=get_context("spawn"), initializer=_start_worker,
                             initargs=(threads,)) as pool:
        futures = {judge.name: pool.submit(_ask, run, load, judge.spec, chains, limit, judge.needs_images, quiet)
                   for judge in apart}
        for judge in here:
            runs[judge.name] = run(judge, datasets[judge.needs_images], *args)
        for name, future in futures.items():
            try:
                result = future.result()
            except BrokenProcessPool as e:
                raise EvalError(f"judge {name!r}: its worker process died ({e}); a script that evaluates with jobs > 1 "
                                "must do so under `if __name__ == \"__main__\":`, since each worker imports the "
                                "script again") from None
            if "error" in result:
                raise EvalError(result["error"])
            runs[name] = result
    return {judge.name: runs[judge.name] for judge in judges}
