"""A killed training run resumes from its latest checkpoint when the same command is run again."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from helpers import chains

from stepcritic.data_prep.build import build_dataset

RECIPE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes", "tiny", "prm.yaml")
MAX_STEPS = 12


def command(data, out):
    return [sys.executable, "-m", "stepcritic.train", "--config", RECIPE, "--dataset_path", data,
            "--output_dir", out, "--max_steps", str(MAX_STEPS), "--save_strategy", "steps", "--save_steps", "2",
            "--per_device_train_batch_size", "2", "--logging_steps", "1"]


def wait_for_checkpoint(process, out, timeout=120):
    first = os.path.join(out, "checkpoint-2", "trainer_state.json")
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        if os.path.isfile(first):
            return True
        time.sleep(0.05)
    return False


# two training processes, ~40 s on 2 cores: kept in the default suite because resuming is a promise
@pytest.mark.slow
def test_killed_run_resumes_from_its_last_checkpoint(tmp_path):
    data, out = str(tmp_path / "data"), str(tmp_path / "run")
    build_dataset(chains(8), "prm-sft", data, test_fraction=0.25, seed=0)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")

    log = tmp_path / "first.log"
    with open(log, "w") as sink:
        first = subprocess.Popen(command(data, out), env=env, stdout=sink, stderr=subprocess.STDOUT)
        assert wait_for_checkpoint(first, out), log.read_text()[-3000:]
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert first.returncode == -signal.SIGKILL
    assert not os.path.isfile(os.path.join(out, "model.safetensors"))  # it died before saving the final model

    second = subprocess.run(command(data, out), env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    resumed = re.search(r"resuming from checkpoint \S*checkpoint-(\d+) \(global step (\d+)\)", second.stderr)
    assert resumed and int(resumed.group(1)) == int(resumed.group(2)) >= 2
    assert f"after {MAX_STEPS} steps" in second.stderr
    with open(os.path.join(out, "trainer_state.json")) as f:
        state = json.load(f)
    assert state["global_step"] == MAX_STEPS
    logged = [entry["step"] for entry in state["log_history"] if "loss" in entry]
    assert logged == list(range(1, MAX_STEPS + 1))  # history carried over from the checkpoint, no step twice
