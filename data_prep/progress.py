"""The progress bar the data commands show on stderr while they read and write (off unless asked: library calls and
tests stay silent; the command line turns it on for a terminal, and `--quiet` turns it off). Imported only when a
command runs: `tqdm` stays out of `--help`."""

from __future__ import annotations

import sys

from tqdm import tqdm


class _Bar(tqdm):
    # no monitor thread: `data build --num-proc` and `ingest --num-proc` fork workers, and a thread caught writing to
    # stderr at the fork would leave the worker's stderr locked for good
    monitor_interval = 0


def bar(enabled: bool, desc: str, unit: str = "chains", total: int | None = None) -> tqdm:
    """A `tqdm` bar counting `unit`, or one that shows nothing (every method still works) when not `enabled`."""
    # leave=False: the command's summary line follows, and a finished bar would only repeat it
    return _Bar(total=total, desc=desc, unit=f" {unit}", disable=not enabled, file=sys.stderr, leave=False,
                dynamic_ncols=True)


def say(progress: tqdm, log, message: str) -> None:
    """`log(message)` without breaking a bar that is being drawn on the same stream."""
    if progress.disable:
        log(message)
    else:
        with progress.external_write_mode(file=sys.stderr):
            log(message)
