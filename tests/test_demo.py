"""`stepcritic demo --quick`: the whole offline job (synth -> build -> train -> eval -> report) runs end to end."""

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_quick_demo_writes_a_report_with_trained_critics_and_baselines(tmp_path):
    out = tmp_path / "demo"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    run = subprocess.run([sys.executable, "-m", "stepcritic", "demo", "--quick", "--out", str(out)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = (out / "report.md").read_text()
    assert f"report: {out / 'report.md'}" in run.stdout

    # every stage ran and was timed
    timings = json.loads((out / "timings.json").read_text())
    assert set(timings["timings_s"]) >= {"synthesise chains", "build datasets", "evaluate on held-out chains"}
    assert any(stage.startswith("train PRM") for stage in timings["timings_s"])
    assert timings["total_s"] == sum(timings["timings_s"].values())

    # the leaderboard holds the trained critics, the blank-image ablation and every baseline
    for judge in ("`prm:", "`hf:", "`text-only:prm:", "`always-correct`", "`random", "`majority`"):
        assert judge in report, judge
    assert "## Targets" in report and ("met" in report)
    metrics = json.loads((out / "eval" / "metrics.json").read_text())
    always = next(v for k, v in metrics["judges"].items() if k == "always-correct")
    assert always["overall"]["critique"]["step"]["recall"] == 0.0  # a judge that never flags finds nothing
    for name in ("prm", "critique-sft", "critique-dpo"):  # DPO may save a LoRA adapter over the SFT critic
        saved = os.listdir(out / "models" / name)
        assert "model.safetensors" in saved or "adapter_model.safetensors" in saved, (name, saved)
