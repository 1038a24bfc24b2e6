"""The GPU suite's bookkeeping, run with --dry on the CPU: every unit is recorded with a status and sane numbers, a
second call resumes instead of redoing, the markdown tables are written, the sweep keeps the largest micro-batch
before an out-of-memory error, and without a GPU the suite refuses in one line."""

import importlib.util
import json

import pytest
import torch

from stepcritic.bench import gpu_suite

pytestmark = pytest.mark.usefixtures("private_tiny_cache")
# dry-suite lows on a loaded 2-core AMD EPYC with AVX-512: 0.36 samples/s, 23 tokens/s, 8.3 chains/s, 0.2 steps/s
MIN_SAMPLES_PER_S, MIN_TOKENS_PER_S, MIN_CHAINS_PER_S, MIN_STEPS_PER_S = 0.05, 3, 1, 0.03


@pytest.fixture(scope="module")
def dry_suite(private_tiny_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("suite")
    code = gpu_suite.main(["--out", str(out), "--dry"])
    return out, code, json.loads((out / "gpu_suite.json").read_text())


def test_dry_run_records_every_unit_ok_or_skipped_with_sane_fields(dry_suite):
    out, code, state = dry_suite
    assert code == 0
    assert state["dry"] is True and list(state["units"]) == list(gpu_suite.units())
    for name, record in state["units"].items():
        assert record["status"] in ("ok", "skipped"), (name, record)
        assert 0 <= record["seconds"] <= record["budget_s"] and record["finished"] >= record["started"]

    for model in gpu_suite.MODELS:
        lora = state["units"][f"throughput/{model}/lora"]["result"]
        assert [p["per_device_batch_size"] for p in lora["points"]] == list(gpu_suite.DRY.batches)
        assert lora["largest_fitting_batch"] == gpu_suite.DRY.batches[-1] and lora["oom_at_batch"] is None
        assert all(p["samples_per_s"] >= MIN_SAMPLES_PER_S and p["tokens_per_s"] >= MIN_TOKENS_PER_S
                   and p["loss"] == "fused" for p in lora["points"])
        assert "refuses" in lora["padding_free"]  # every Qwen-VL family refuses padding-free batches
        liger = state["units"][f"throughput/{model}/liger"]
        if importlib.util.find_spec("liger_kernel") is None:
            assert liger["status"] == "skipped" and "liger-kernel not installed" in liger["note"]

    deepspeed = importlib.util.find_spec("deepspeed") is not None
    for zero in (2, 3):
        for method in gpu_suite.METHODS:
            record = state["units"][f"launch/zero{zero}/{method}"]
            command = record["result"]["command"]
            assert "accelerate.commands.launch --config_file" in command and "-m stepcritic.train" in command
            assert f"recipes/qwen2.5-vl-3b/{method}-lora.yaml" in command and "--max_steps 1" in command
            assert record["result"]["dry_run"]["exit"] == 0 and record["result"]["dry_run"]["plan"][-1] == "dry run: ok"
            if not deepspeed:
                assert record["status"] == "skipped" and record["note"] == "deepspeed not installed"
                assert f"zero{zero}.yaml" in command

    scoring = state["units"]["prm-scoring"]["result"]
    assert scoring["chains"] == scoring["chains_requested"] == gpu_suite.DRY.scoring_chains
    assert scoring["chains_per_s"] >= MIN_CHAINS_PER_S and scoring["stopped"] is None

    for variant in ("padded", "padding-free"):
        tiny = state["units"][f"tiny-gpu/{variant}"]["result"]
        assert tiny["steps"] == gpu_suite.DRY.tiny_steps and tiny["steps_per_s"] >= MIN_STEPS_PER_S
        assert tiny["padding_free"] is (variant == "padding-free")


def test_markdown_has_a_row_per_recorded_unit(dry_suite):
    out, _, state = dry_suite
    text = (out / "gpu_suite.md").read_text()
    for header in ("| model | variant |", "| launcher | method |", "| PRM | chains |", "| tiny-gpu critic |"):
        assert header in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    assert len(rows) == 4 + len(state["units"])  # four headers, one row per unit
    assert "| qwen3-vl-8b | lora | ok | 2 |" in text and "| padding-free | ok | 2 |" in text  # largest batch, steps


def test_second_call_skips_completed_units_and_redo_runs_one_again(dry_suite, capsys):
    out, _, state = dry_suite
    capsys.readouterr()
    assert gpu_suite.main(["--out", str(out), "--dry"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("earlier, not run again") == len(state["units"])
    assert json.loads((out / "gpu_suite.json").read_text())["units"] == state["units"]

    assert gpu_suite.main(["--out", str(out), "--dry", "--only", "prm-scoring", "--redo"]) == 0
    after = json.loads((out / "gpu_suite.json").read_text())["units"]
    assert after["prm-scoring"]["status"] == "ok"
    assert {k: v for k, v in after.items() if k != "prm-scoring"} == {
        k: v for k, v in state["units"].items() if k != "prm-scoring"}


def test_a_unit_a_killed_call_left_running_is_recorded_interrupted_not_rerun(tmp_path, capsys):
    state = {"suite": "stepcritic.bench.gpu_suite", "dry": True,
             "units": {"prm-scoring": {"status": "running", "started": "2026-01-01T00:00:00+00:00", "budget_s": 300}}}
    (tmp_path / "gpu_suite.json").write_text(json.dumps(state))
    assert gpu_suite.main(["--out", str(tmp_path), "--dry", "--only", "prm-scoring"]) == 1
    record = json.loads((tmp_path / "gpu_suite.json").read_text())["units"]["prm-scoring"]
    assert record["status"] == "error" and record["interrupted"] and record["error"].startswith("interrupted")
    assert "failed: prm-scoring" in capsys.readouterr().out


def test_without_a_gpu_and_without_dry_it_exits_2_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu_suite, "cuda_available", lambda: False)
    assert gpu_suite.main(["--out", str(tmp_path / "suite")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "GPU is needed" in err and "--dry" in err
    assert not (tmp_path / "suite").exists()


def test_only_names_units_by_name_prefix_or_glob():
    assert gpu_suite.select(["launch/zero3"]) == [f"launch/zero3/{m}" for m in gpu_suite.METHODS]
    assert gpu_suite.select(["*/liger", "prm-scoring"]) == [
        *(f"throughput/{m}/liger" for m in gpu_suite.MODELS), "prm-scoring"]
    with pytest.raises(ValueError, match="no unit matches launch/zero4"):
        gpu_suite.select(["launch/zero4"])


def test_budget_overrides_a_family_and_a_bad_one_is_one_line_exit_2(capsys):
    assert gpu_suite.parse_budgets(["throughput=120", "tiny-gpu=90.5"]) == dict(
        gpu_suite.BUDGETS, throughput=120.0, **{"tiny-gpu": 90.5})
    assert gpu_suite.main(["--list", "--only", "throughput/qwen2.5-vl-3b", "--budget", "throughput=120"]) == 0
    assert capsys.readouterr().out.splitlines() == ["throughput/qwen2.5-vl-3b/lora  120 s",
                                                    "throughput/qwen2.5-vl-3b/liger  120 s"]
    for bad, words in (["thruput=1"], "no unit family 'thruput'"), (["launch=soon"], "must be a number"), (
            ["launch=0"], "must be positive"):
        with pytest.raises(SystemExit) as stop:
            gpu_suite.main(["--list", "--budget", *bad])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err


def test_sweep_keeps_the_largest_batch_before_out_of_memory_and_stops_at_the_budget():
    def measure(batch):
        if batch >= 8:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 18.60 GiB")
        return {"per_device_batch_size": batch, "tokens_per_s": 100.0 * batch}

    result = gpu_suite.sweep(measure, (1, 2, 4, 8, 16), left=lambda: 1e9)
    assert result["largest_fitting_batch"] == 4 and result["oom_at_batch"] == 8 and result["best_batch"] == 4
    assert [p["per_device_batch_size"] for p in result["points"]] == [1, 2, 4] and result["stopped"] is None

    ticks = iter(range(0, 1000, 10))  # every measured point takes 10 s on this clock
    result = gpu_suite.sweep(measure, (1, 2, 4), left=lambda: 15, clock=lambda: next(ticks))
    assert result["largest_fitting_batch"] == 1 and result["stopped"].startswith("time budget: batch 2")

    with pytest.raises(RuntimeError, match="micro-batch 8 does not fit"):
        gpu_suite.sweep(measure, (8,), left=lambda: 1e9)


def test_markdown_says_when_a_sweep_stopped_before_finding_the_largest_batch():
    # a sweep cut by its time budget must not read as the memory limit
    def record(**result):
        points = [{"per_device_batch_size": b, "samples_per_s": 1.0, "tokens_per_s": 4096.0, "mfu": 0.2,
                   "peak_memory_gib": 10.0} for b in (1, 2)]
        return {"status": "ok", "result": dict(points=points, largest_fitting_batch=2, best_batch=2, **result)}

    state = {"dry": False, "device": "1 x GPU", "updated": "now", "software": {}, "units": {
        "throughput/qwen2.5-vl-3b/lora": record(oom_at_batch=None, stopped="time budget: batch 4 would need 9 s"),
        "throughput/qwen2.5-vl-7b/lora": record(oom_at_batch=4, stopped=None),
        "throughput/qwen3-vl-4b/lora": record(oom_at_batch=None, stopped=None)}}
    text = gpu_suite.markdown(state)
    assert "| qwen2.5-vl-3b | lora | ok | 2 (larger not tried) |" in text
    assert "| qwen2.5-vl-7b | lora | ok | 2 (OOM at 4) |" in text
    assert "| qwen3-vl-4b | lora | ok | 2 |" in text
