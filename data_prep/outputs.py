"""Where the data commands write: never over an input, never over an earlier output unless asked, never half.

`check_out` refuses an output path that is, is inside, or contains an input (writing there would destroy it, or
leave a dataset inside another), and one that already holds something unless `overwrite`. A root (a folder inputs
are read from, such as the image root) is looser: an output may go below it, as long as what it would replace there
is nothing, an empty folder or an earlier StepCritic output, never a file or a folder of the user's. `staged` gives the
command a folder to write into beside the output (`.NAME.partial-HOST-PID-XXXXXXXX`, on the same disk) and renames
it to the output only once it is complete: a command that fails or is killed leaves the earlier output as it was,
or no output at all. With `overwrite` the earlier output is moved into that folder just before the rename; should a
command be killed between the two renames, the next command writing to the same path puts it back. The next
command also removes what a killed one left there, once the process that made it is gone. Stdlib only: the
command-line module imports the modules that import this one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
from contextlib import contextmanager

from stepcritic.errors import UserError

PARTIAL = ".partial-"
PREVIOUS = "previous"  # inside a staging folder: the output it replaces, between the two renames
# a host name keeps a folder written by another machine on a shared disk from being taken for a dead process's
_HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"


class OutputError(UserError, ValueError):
    """An output path that would destroy an input or an earlier output."""


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def _within(inner: str, outer: str) -> bool:
    return inner != outer and os.path.commonpath([inner, outer]) == outer


def check_inputs(out_dir: str, inputs: dict[str, str | None], roots: dict[str, str | None] | None = None) -> None:
    """Refuse `out_dir` equal to, inside, or containing any of `inputs` ({what: path}, e.g. {"--chains": ...}) that
    exists, and equal to or containing any of `roots` (folders read from, e.g. {"--image-root": ...}); what an output
    below a root would replace is `check_below_roots`' to judge."""
    out = _real(out_dir)
    for what, path in {**inputs, **(roots or {})}.items():
        if not path or not os.path.lexists(path):  # the command says what is missing, in its own words
            continue
        source = _real(path)
        if out == source:
            raise OutputError(f"--out {out_dir} is {what} {path}: writing there would destroy the input; "
                              "choose another --out")
        if _within(out, source) and what in inputs:
            raise OutputError(f"--out {out_dir} is inside {what} {path}; choose an --out outside the input")
        if _within(source, out):
            raise OutputError(f"--out {out_dir} contains {what} {path}: replacing it would destroy the input; "
                              "choose another --out")


def is_output(path: str) -> bool:
    """Whether folder `path` is a dataset a StepCritic command wrote (chains from ingest or synth, or a build)."""
    def has(*names: str) -> bool:
        return all(os.path.isfile(os.path.join(path, name)) for name in names)

    return has("state.json", "stats.json") or has("dataset_dict.json", "build_stats.json")


def check_below_roots(out_dir: str, roots: dict[str, str | None]) -> None:
    """Refuse an `out_dir` below one of `roots` that already holds a file or a folder of the user's: it may be an
    input itself (an image, a folder of them), and even --overwrite must not replace it. Nothing there, an empty
    folder or an earlier StepCritic output is fair game."""
    out = _real(out_dir)
    for what, path in roots.items():
        if not path or not os.path.isdir(path) or not _within(out, _real(path)) or not os.path.lexists(out_dir):
            continue
        if not os.path.isdir(out_dir):
            raise OutputError(f"--out {out_dir} is an existing file inside {what} {path}, perhaps one it reads; "
                              "choose another --out")
        if os.listdir(out_dir) and not is_output(out_dir):
            raise OutputError(f"--out {out_dir} is a folder inside {what} {path} that holds {_holds(out_dir)}, not "
                              "a StepCritic output: replacing it could destroy inputs; choose a new or empty folder")


def _holds(path: str) -> str:
    try:
        with open(os.path.join(path, "build_stats.json")) as f:
            return f"a {json.load(f)['kind']} dataset"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if os.path.isfile(os.path.join(path, "dataset_dict.json")) or os.path.isfile(os.path.join(path, "state.json")):
        return "a dataset"
    entries = sorted(os.listdir(path))
    return f"{len(entries)} entries ({', '.join(entries[:3])}{', ...' if len(entries) > 3 else ''})"


def check_out(out_dir: str, overwrite: bool = False, inputs: dict[str, str | None] | None = None,
              roots: dict[str, str | None] | None = None) -> None:
    """Refuse `out_dir` when it overlaps an input or a root (`check_inputs`, `check_below_roots`), or (unless
    `overwrite`) when it is a file or a folder that is not empty. Puts back an output a killed command had moved
    aside first, so that it counts as there."""
    parent, name = os.path.split(_real(out_dir))
    if not name:
        raise OutputError(f"--out {out_dir} names no folder; choose a folder to write")
    check_inputs(out_dir, inputs or {}, roots)
    _recover(parent, name)
    check_below_roots(out_dir, roots or {})
    if overwrite or not os.path.lexists(out_dir):
        return
    if not os.path.isdir(out_dir):
        raise OutputError(f"--out {out_dir} is an existing file; pass --overwrite to replace it, or choose another "
                          "--out")
    if os.listdir(out_dir):
        raise OutputError(f"--out {out_dir} already holds {_holds(out_dir)}; pass --overwrite to replace it "
                          "(once the new output is complete), or choose another --out")


def _alive(pid: int) -> bool:
    if os.name == "nt":  # signal 0 is CTRL_C_EVENT there: never send it; leave the folder
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _recover(parent: str, name: str) -> None:
    """Staging folders beside `parent/name` that this host's dead processes left: the output one had moved aside
    goes back (when nothing took its place), the rest is removed."""
    pattern = re.compile(re.escape(f".{name}{PARTIAL}{_HOST}-") + r"(\d+)-[^-]+$")
    try:
        entries = os.listdir(parent)
    except FileNotFoundError:
        return
    for entry in entries:
        match = pattern.match(entry)
        if not match or _alive(int(match.group(1))):
            continue
        folder = os.path.join(parent, entry)
        previous = os.path.join(folder, PREVIOUS)
        out = os.path.join(parent, name)
        if os.path.lexists(previous) and not os.path.lexists(out):
            os.rename(previous, out)
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def staged(out_dir: str, overwrite: bool = False, inputs: dict[str, str | None] | None = None,
           roots: dict[str, str | None] | None = None):
    """Yield the path to write the output at (a folder's path, not yet made); when the block ends without an
    error it becomes `out_dir` (`check_out` first, and again before the rename, for an output made meanwhile)."""
    check_out(out_dir, overwrite, inputs, roots)
    parent, name = os.path.split(_real(out_dir))
    os.makedirs(parent, exist_ok=True)
    folder = tempfile.mkdtemp(prefix=f".{name}{PARTIAL}{_HOST}-{os.getpid()}-", dir=parent)
    try:
        target = os.path.join(folder, name)
        yield target
        if not os.path.lexists(target):  # pragma: no cover (every writer makes its folder)
            raise RuntimeError(f"nothing was written at {target}")
        _install(target, os.path.join(parent, name), folder, overwrite, out_dir, roots)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _install(target: str, out: str, folder: str, overwrite: bool, shown: str,
             roots: dict[str, str | None] | None = None) -> None:
    previous = os.path.join(folder, PREVIOUS)
    if os.path.lexists(out):
        check_out(shown, overwrite, roots=roots)
        os.rename(out, previous)
    try:
        os.rename(target, out)
    except OSError:
        if os.path.lexists(previous) and not os.path.lexists(out):
            os.rename(previous, out)
        raise
