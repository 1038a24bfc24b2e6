"""The README's walks run, in the order the README shows them, in an empty folder: a command that uses a folder
before the README makes it fails here. What needs a GPU, a Hub model or an API key is left out (test_docs.py parses
those); `stepcritic serve` runs in the background for the commands that follow it in its block."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from helpers import REPO, walk

README = os.path.join(REPO, "README.md")
SHARED = os.environ.get("STEPCRITIC_SHARED", os.path.join(os.path.dirname(REPO), "shared"))
MICEVAL = os.path.join(SHARED, "data", "miceval", "dataset", "MiCEval_Normal.jsonl")
# a command naming any of these needs a GPU, a model from the Hub or an API key, is the demo (tests/test_demo.py), a
# benchmark or an experiment (each measured by its own script, for tens of minutes), or installs
NOT_OFFLINE = ("accelerate", "openai:", "Qwen/", "qwen", "-7b", "-3b", "demo", "stepcritic.bench",
               "stepcritic.experiments", "make", "pip", "git")
LINKED = ("tests", "examples", "recipes")  # the repository's folders the walks read, as a clone has them


def _runs_offline(argv: list[str]) -> bool:
    if argv[0] not in ("stepcritic", "python", "python3") or "--help" in argv:
        return False
    if any(part in word for word in argv for part in NOT_OFFLINE):
        return False
    # MiCEval's walk needs ../shared's release (skipped cleanly without it), and so do the folders made from it
    return os.path.isfile(MICEVAL) or not any(part in word for word in argv for part in ("../shared", "data/miceval"))


def _wait_for_port(port: int, server: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.poll() is None, "stepcritic serve exited before it answered"
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"stepcritic serve did not listen on port {port} in {seconds:.0f} s")


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_the_readme_walks_run_in_order_in_an_empty_folder(tmp_path):
    for name in LINKED:
        (tmp_path / name).symlink_to(os.path.join(REPO, name))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    binaries = os.path.dirname(sys.executable)
    server, ran = None, []
    try:
        for kind, where, step in walk(README):
            if kind == "python":
                if "from stepcritic" in step:
                    subprocess.run([sys.executable, "-c", step], cwd=tmp_path, env=env, check=True, timeout=600)
                    ran.append(where)
                continue
            if not _runs_offline(step):
                continue
            argv = [word.replace("../shared", SHARED) for word in step]
            command = [os.path.join(binaries, "stepcritic")] if argv[0] == "stepcritic" else [sys.executable]
            command += argv[1:]
            if argv[:2] == ["stepcritic", "serve"]:
                server = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True)
                _wait_for_port(int(argv[argv.index("--port") + 1]), server)
            else:
                started = time.monotonic()
                done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
                assert done.returncode == 0, f"{where}: {' '.join(argv)}\n{done.stderr[-3000:]}"
                print(f"{where}: {time.monotonic() - started:.0f} s  {' '.join(argv)[:100]}", flush=True)
            ran.append(where)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    # the CPU walk: synthetic data, the three tiny models, their uses, the served critic and the fixtures' benchmarks
    assert len(ran) >= 15, ran
    assert (tmp_path / "results" / "remote" / "metrics.json").is_file()
    assert (tmp_path / "results" / "processbench" / "report.md").is_file()
