"""`make install`: torch from pip's own sources, or from the index TORCH_INDEX names (its CPU build, say)."""

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def install_lines(tmp_path, *assignments) -> list[str]:
    out = subprocess.run(["make", "-n", "install", f"VENV={tmp_path / 'venv'}", *assignments], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "pip install" in line and "torch==" in line]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_torch_comes_from_the_named_index_only_when_one_is_named(tmp_path):
    (plain,) = install_lines(tmp_path)
    assert "--index-url" not in plain
    (cpu,) = install_lines(tmp_path, "TORCH_INDEX=https://download.pytorch.org/whl/cpu")
    assert cpu.split()[-2:] == ["--index-url", "https://download.pytorch.org/whl/cpu"]
