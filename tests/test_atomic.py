"""Crash-safe writes: the previous file or folder stays whole until the new one is complete, and a write that fails
leaves neither a part of the new one nor its temporary copy behind."""

import json
import os
from pathlib import Path

import pytest

from stepcritic import atomic


def test_write_text_and_json_replace_the_whole_file(tmp_path):
    path = tmp_path / "a.json"
    atomic.write_text(path, "old\n")
    atomic.write_json(path, {"x": "é"}, indent=2, ensure_ascii=False)
    assert path.read_bytes() == '{\n  "x": "é"\n}'.encode()
    assert os.listdir(tmp_path) == ["a.json"]


def test_the_file_stays_the_previous_one_until_the_block_ends(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    with atomic.writing(path) as f:
        f.write("new")
        f.flush()
        assert path.read_text() == "old"
    assert path.read_text() == "new"


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_write_that_raises_midway_leaves_the_previous_file_and_no_temporary_one(tmp_path, error):
    path = tmp_path / "a.txt"
    path.write_text("old")
    with pytest.raises(error):
        with atomic.writing(path) as f:
            f.write("half of the new")
            raise error("killed")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["a.txt"]


def test_an_object_that_does_not_serialise_writes_nothing(tmp_path):
    path = tmp_path / "a.json"
    path.write_text("{}")
    with pytest.raises(TypeError):
        atomic.write_json(path, {"x": object()})
    assert path.read_text() == "{}" and os.listdir(tmp_path) == ["a.json"]


def test_fsync_reaches_the_disk_before_the_rename(tmp_path, monkeypatch):
    path = tmp_path / "a.txt"
    path.write_text("old")
    seen = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (seen.append(path.read_text()), real(fd)))
    atomic.write_text(path, "new")
    assert seen == []
    atomic.write_text(path, "newer", fsync=True)
    assert seen == ["new"] and path.read_text() == "newer"


def test_replacing_gives_a_folder_path_and_removes_a_half_built_folder(tmp_path):
    target = tmp_path / "model"
    stale = tmp_path / ("model" + atomic.TMP)
    stale.mkdir()
    (stale / "left-by-a-killed-run").write_text("x")
    with pytest.raises(OSError):
        with atomic.replacing(target) as tmp:
            assert not os.path.exists(tmp)  # what a killed run left there is gone
            os.makedirs(tmp)
            (Path(tmp) / "config.json").write_text("{}")
            raise OSError("disk full")
    assert os.listdir(tmp_path) == []
    with atomic.replacing(target) as tmp:
        os.makedirs(tmp)
        (Path(tmp) / "config.json").write_text("{}")
    assert os.listdir(tmp_path) == ["model"] and json.loads((target / "config.json").read_text()) == {}


def test_replacing_leaves_the_previous_file_when_the_rename_fails(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "kept").write_text("x")
    with pytest.raises(OSError):  # a folder does not replace a folder that holds something
        with atomic.replacing(target) as tmp:
            os.makedirs(tmp)
    assert os.listdir(tmp_path) == ["out"] and os.listdir(target) == ["kept"]


def test_build_dir_once_builds_once_and_leaves_no_staging(tmp_path):
    calls = []

    def build(folder):
        calls.append(folder)
        assert folder.is_dir() and folder.parent == tmp_path / "cache" and folder.name.startswith(".tiny-")
        (folder / "config.json").write_text("{}")

    target = tmp_path / "cache" / "tiny"
    assert atomic.build_dir_once(target, build) == str(target)
    assert atomic.build_dir_once(target, build) == str(target)
    assert len(calls) == 1 and os.listdir(tmp_path / "cache") == ["tiny"]


def test_build_dir_once_removes_a_failed_build_and_raises_its_error(tmp_path):
    def build(folder):
        (folder / "half").write_text("x")
        raise ValueError("bad build")

    with pytest.raises(ValueError, match="bad build"):
        atomic.build_dir_once(tmp_path / "tiny", build)
    assert os.listdir(tmp_path) == []


def test_build_dir_once_loses_the_race_to_another_process_without_error(tmp_path):
    target = tmp_path / "tiny"

    def build(folder):
        (folder / "mine").write_text("x")
        target.mkdir()  # another process renamed its build into place first
        (target / "theirs").write_text("x")

    assert atomic.build_dir_once(target, build) == str(target)
    assert os.listdir(tmp_path) == ["tiny"] and os.listdir(target) == ["theirs"]
