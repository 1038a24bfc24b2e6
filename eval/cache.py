"""Crash-safe record of finished judgments, so an interrupted evaluation resumes where it stopped.

One folder per judge under `OUT/cache/`, named by the judge's spec without its runtime options and by
its fingerprint (`Judge.fingerprint`): changing what decides a judge's output (an option, its prompt or
its model) starts only that judge afresh, while every other judge's entries stay valid and a runtime
option (batch size, device, concurrency) changes neither. Inside, append-only JSON-lines files
(`critiques.jsonl`: one line per chain, `picks.jsonl`: one line per ShiftCheck question). The runner
appends each judgment as soon as the judge hands it over, and every append is flushed to the operating system
before it returns: a process killed mid-write leaves at most a torn last line, which reload drops. Appends are
fsynced in groups (`SYNC_SECONDS`) and on close, which bounds what a crash of the whole machine can lose.

Only judgments are kept: a chain whose request got no answer (`Critique.failed`) is not written, and an entry an
older version wrote for such a failure (`valid` false with a request error, which ends "(after N attempts)") is
read as not judged (`is_judgment`), so the next run asks again.
"""

from __future__ import annotations

import json
import os
import re
import time

from stepcritic import atomic

# how the OpenAI-compatible judge ends the error of a request that got no answer
_REQUEST_ERROR = re.compile(r"\(after \d+ attempts?\)\s*$")
# A killed process loses nothing that was flushed: the operating system holds it. fsync guards only against the
# machine itself going down, and costs milliseconds per call, which at one call per judgment made the disk, not the
# judge, the pace of a fast judge (10,000 fsyncs took longer than everything else `stepcritic eval` does with
# 10,000 chains). So an append is fsynced when the last fsync is this old, and the rest at close: a machine crash
# loses at most this long of judgments, while a slow judge (one judgment per second or slower) is still fsynced
# record by record.
SYNC_SECONDS = 1.0


def is_judgment(record: dict | None) -> bool:
    """Whether a cached critique record is a judgment, not a failed request that older versions cached."""
    if not record or record.get("failed"):
        return False
    return record.get("valid", True) is not False or not _REQUEST_ERROR.search(record.get("error") or "")


def judge_cache_dir(out_dir: str, judge_name: str, fingerprint: str) -> str:
    # The readable name helps people browsing the folder and keeps apart custom judges whose options do
    # not show in their fingerprint; the fingerprint decides validity.
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", judge_name).strip("_")[:60] or "judge"
    return os.path.join(out_dir, "cache", f"{slug}-{fingerprint}")


def shard_path(path: str, shard: str) -> str:
    """Where one rank's records of the log at `path` go: `critiques.jsonl` -> `critiques.rank1.jsonl`."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.{shard}{ext}"


_SHARD = re.compile(r"^(?P<stem>.+)\.rank\d+(?P<ext>\.jsonl)$")


class JsonlLog:
    """An append-only JSON-lines file keyed by one field; later lines win on a repeated key.

    With `shard` (a rank's name, `distributed.World.shard`) it reads the log at `path` and appends to this rank's own
    file beside it (`shard_path`), so ranks never write one file; `merge_shards` folds the shards back into `path`."""

    def __init__(self, path: str, key: str, shard: str | None = None):
        self.base = path if shard else None  # read, never written, by a rank's log
        self.path, self.key = (shard_path(path, shard) if shard else path), key
        self._file = None
        self._synced_at = float("-inf")  # when the last fsync ended
        self._unsynced = False

    def load(self) -> dict:
        """All complete records by key. Cuts off a torn last line so the next append starts clean."""
        records = {record[self.key]: record for record in _complete_records(self.base)} if self.base else {}
        if not os.path.exists(self.path):
            return records
        with open(self.path, "rb") as f:
            data = f.read()
        complete_end = data.rfind(b"\n") + 1
        if complete_end < len(data):
            with open(self.path, "r+b") as f:
                f.truncate(complete_end)
        for line in data[:complete_end].splitlines():
            if line.strip():
                record = json.loads(line)
                records[record[self.key]] = record
        return records

    def records(self):
        """Every complete record in the order written (a key may repeat; the last one counts), read a line at a time:
        reading a large log back holds one record at a time, not the whole file and all its records. A torn last
        line is skipped (`load` cuts it off)."""
        if self.base:
            yield from _complete_records(self.base)
        yield from _complete_records(self.path)

    def append(self, records: list[dict]) -> None:
        """Add records: one write, flushed before returning (safe from a killed process), fsynced when the last
        fsync is `SYNC_SECONDS` old (and at `close`)."""
        if not records:
            return
        if self._file is None:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")
        self._file.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        self._file.flush()
        self._unsynced = True
        if time.monotonic() - self._synced_at >= SYNC_SECONDS:
            self.sync()

    def sync(self) -> None:
        """fsync what was appended: on disk even if the machine goes down."""
        if self._file is not None and self._unsynced:
            os.fsync(self._file.fileno())
            self._unsynced = False
            self._synced_at = time.monotonic()

    def close(self) -> None:
        if self._file is not None:
            self.sync()
            self._file.close()
            self._file = None


def _complete_lines(path: str):
    if os.path.exists(path):
        with open(path, "rb") as f:
            for line in f:
                if line.endswith(b"\n") and line.strip():
                    yield line


def _complete_records(path: str):
    return (json.loads(line) for line in _complete_lines(path))


def merge_shards(root: str) -> int:
    """Fold every rank's log under `root` (`shard_path`) into the log it shards, then remove it: the merged log is
    written whole through a temporary file (`atomic.writing`), so a kill at any moment leaves either the shards or the
    merged log, and a line the log already holds (a merge killed before its shards were removed) is not added twice.
    Run by one process while no rank writes. Returns the number of shards merged."""
    shards: dict[str, list[str]] = {}
    for folder, _, names in os.walk(root):
        for name in sorted(names):
            match = _SHARD.match(name)
            if match:
                base = os.path.join(folder, match["stem"] + match["ext"])
                shards.setdefault(base, []).append(os.path.join(folder, name))
    for base, parts in sorted(shards.items()):
        seen = set()
        with atomic.writing(base, "wb", fsync=True) as f:
            for path in [base, *parts]:
                for line in _complete_lines(path):
                    if line not in seen:
                        seen.add(line)
                        f.write(line)
        for path in parts:
            os.remove(path)
    return sum(len(parts) for parts in shards.values())


class JudgeCache:
    """The finished critiques and ShiftCheck picks of one judge (identified by its fingerprint). `shard`: this rank's
    (`JsonlLog`); only the `owner` (rank 0) marks the folder used, so that ranks never write one file."""

    def __init__(self, out_dir: str, judge_name: str, fingerprint: str, shard: str | None = None,
                 owner: bool = True):
        self.dir, self.shard = judge_cache_dir(out_dir, judge_name, fingerprint), shard
        self.critiques = JsonlLog(os.path.join(self.dir, "critiques.jsonl"), key="chain_id", shard=shard)
        self.picks = JsonlLog(os.path.join(self.dir, "picks.jsonl"), key="question_id", shard=shard)
        os.makedirs(self.dir, exist_ok=True)
        if owner:
            with open(os.path.join(self.dir, "judge.json"), "w") as f:
                json.dump({"judge": judge_name, "fingerprint": fingerprint}, f)

    def close(self) -> None:
        self.critiques.close()
        self.picks.close()


def cached_judges(out_dir: str) -> list[dict]:
    """Every judge's cache folder under `OUT/cache/`: {"judge", "fingerprint", "dir", "used"}, `used` being when
    a command last opened it (the mtime of its `judge.json`, rewritten by every `JudgeCache`)."""
    root = os.path.join(out_dir, "cache")
    found = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        path = os.path.join(root, name, "judge.json")
        try:
            with open(path) as f:
                info = json.load(f)
            found.append({"judge": info["judge"], "fingerprint": info["fingerprint"],
                          "dir": os.path.join(root, name), "used": os.path.getmtime(path)})
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a judge's folder (or one torn mid-write): nothing to report from it
    return found


def saved_sizes(out_dir: str) -> dict[str, int]:
    """The size of every JSON-lines file under `OUT/cache/`: compared before and after a command, whether it saved
    anything that a rerun would go on from."""
    sizes = {}
    for root, _, files in os.walk(os.path.join(out_dir, "cache")):
        for name in files:
            if name.endswith(".jsonl"):
                path = os.path.join(root, name)
                try:
                    sizes[path] = os.path.getsize(path)
                except OSError:
                    continue
    return sizes


def write_jsonl_atomic(path: str, records) -> int:
    """Write records to `path` via a temporary file and a rename, so readers never see half a file."""
    n = 0
    with atomic.writing(path, fsync=True) as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            n += 1
    return n


def write_json_atomic(path: str, obj) -> None:
    atomic.write_json(path, obj, fsync=True, indent=2, ensure_ascii=False, default=str)
