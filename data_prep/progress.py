"""The progress bar the data commands show on stderr while they read and write (off unless asked: library calls and
tests stay silent; the command line turns it on for a terminal, and `--quiet` turns it off)."""

from __future__ import annotations

import sys


def bar(enabled: bool, desc: str, unit: str = "chains", total: int | None = None):
    """A `tqdm` bar counting `unit`, or one that shows nothing (every method still works) when not `enabled`."""
    from tqdm import tqdm

    class Bar(tqdm):
        # no monitor thread: `data build --num-proc` forks workers, and a thread caught writing to stderr at the
        # fork would leave the worker's stderr locked for good
        monitor_interval = 0

    # leave=False: the command's summary line follows, and a finished bar would repeat it
    return Bar(total=total, desc=desc, unit=f" {unit}", disable=not enabled, file=sys.stderr, leave=False,
               dynamic_ncols=True)


def say(progress, log, message: str) -> None:
    """`log(message)` without breaking a bar that is being drawn on the same stream."""
    if progress.disable:
        log(message)
    else:
        with progress.external_write_mode(file=sys.stderr):
            log(message)
