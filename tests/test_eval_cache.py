"""The judgment cache's durability: every record is readable by another process as soon as `append` returns (a
killed process loses nothing appended), and fsync, which only a machine crash needs, runs in groups and at close."""

import os
import subprocess
import sys

from stepcritic.eval import cache
from stepcritic.eval.cache import JsonlLog


def test_every_append_is_visible_at_once_and_fsyncs_are_grouped(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(cache.os, "fsync", lambda fd: synced.append(fd))
    log = JsonlLog(str(tmp_path / "c.jsonl"), key="chain_id")
    for i in range(100):
        log.append([{"chain_id": f"c{i}", "v": i}])
        # another reader sees it before close: it was flushed to the operating system
        assert len(JsonlLog(log.path, key="chain_id").load()) == i + 1
    assert 1 <= len(synced) < 100  # the first append syncs; the rest wait for SYNC_SECONDS or close
    log.close()
    assert len(synced) >= 2  # close syncs what is left


def test_a_slow_writer_is_fsynced_record_by_record(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(cache.os, "fsync", lambda fd: synced.append(fd))
    monkeypatch.setattr(cache, "SYNC_SECONDS", 0.0)  # every append comes after the interval
    log = JsonlLog(str(tmp_path / "c.jsonl"), key="chain_id")
    for i in range(5):
        log.append([{"chain_id": f"c{i}"}])
    assert len(synced) == 5
    log.close()
    assert len(synced) == 5  # nothing left unsynced


def test_a_killed_writer_keeps_every_appended_record(tmp_path):
    path = str(tmp_path / "c.jsonl")
    code = (f"import os, signal\nfrom stepcritic.eval.cache import JsonlLog\nlog = JsonlLog({path!r}, 'chain_id')\n"
            "for i in range(50):\n    log.append([{'chain_id': f'c{i}'}])\nos.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert proc.returncode == -9
    assert sorted(JsonlLog(path, "chain_id").load()) == sorted(f"c{i}" for i in range(50))
    assert os.path.getsize(path) > 0


def test_the_cached_record_of_a_judgment_is_what_to_json_gives():
    from stepcritic.eval.judges.base import Critique
    from stepcritic.eval.judging import cache_record

    for critique in (Critique("c1", [True, False, None], p_incorrect=[0.1, 0.9, None], explanations=[None, "x", None],
                              answer_correct=False, chain_score=0.25, raw="r", extra={"labels": ["a"], "n": 2}),
                     Critique("c2", [None], valid=False, error="unreadable"),
                     Critique("c3", [None], failed=True, error="timeout")):
        assert cache_record(critique, "d1") == dict(critique.to_json(), digest="d1")
        assert list(cache_record(critique, "d1")) == list(dict(critique.to_json(), digest="d1"))
