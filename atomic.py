"""Files and folders written crash-safely: made under a temporary name beside their place, then renamed into it.

A reader, or the next run after a process killed part-way, finds the previous version or the new one, never part of
either; a write that fails removes what it had written and leaves the previous version as it was. `replacing` gives
a writer that wants a path (`torch.save`, `save_pretrained`, a dataset builder) the temporary path of a file or a
folder; `writing` gives a file opened there; `write_text` and `write_json` are the one-call forms. The temporary name
is the path with `.tmp` appended, and one left by a killed process is removed by the next write to the same path, so
these are for a path one process writes at a time. `build_dir_once` is for a cache folder that several processes
(DDP ranks, parallel tests) may race to build: each builds in a folder of its own and the first rename wins.

Kept beside `errors.py` because every stage writes this way. Stdlib only: the command-line modules import modules
that import this one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path

TMP = ".tmp"


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


@contextmanager
def replacing(path: str | os.PathLike):
    """Yield the temporary path (`path` + `.tmp`, anything already there removed) for the block to write a file or
    a folder at; when the block ends without an error it takes the place of `path` in one `os.replace` (a folder
    replaces only a missing or empty one). When the block or the rename raises, what it wrote is removed and the
    error propagates: `path` is left as it was."""
    tmp = os.fspath(path) + TMP
    _remove(tmp)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            _remove(tmp)
        raise


@contextmanager
def writing(path: str | os.PathLike, mode: str = "w", *, fsync: bool = False):
    """Yield a file opened (UTF-8 in text mode) at `replacing`'s temporary path; it becomes `path` when the block
    ends without an error. `fsync`: its data reaches the disk before the rename, so that not even a crash of the
    machine itself can leave `path` empty or short."""
    with replacing(path) as tmp, open(tmp, mode, encoding=None if "b" in mode else "utf-8") as f:
        yield f
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def write_text(path: str | os.PathLike, text: str, *, fsync: bool = False) -> None:
    """`text` as the whole of `path`, in UTF-8 (`writing`)."""
    with writing(path, fsync=fsync) as f:
        f.write(text)


def write_json(path: str | os.PathLike, obj, *, fsync: bool = False, **dumps_kw) -> None:
    """`json.dumps(obj, **dumps_kw)` as the whole of `path` (`writing`); an object that does not serialise raises
    before anything is written."""
    write_text(path, json.dumps(obj, **dumps_kw), fsync=fsync)


def build_dir_once(target: str | os.PathLike, build) -> str:
    """The folder `target`, made unless it is a folder already by `build(folder)` (a `Path`, an empty folder) in a
    fresh hidden sibling, `.NAME-XXXXXXXX`, renamed to `target` when the build returns. Processes racing to build it
    each build in their own sibling: the first rename wins and losing it is no error. The sibling is removed whether
    the build succeeds or fails; an error of the build propagates, an `OSError` only when no other process made
    `target` meanwhile."""
    target = Path(target)
    if target.is_dir():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(staging)
        os.rename(staging, target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(target)
