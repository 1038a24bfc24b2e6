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

    # the leaderboard holds the trained critics, the blank-image ablation, the prompted base and every baseline
    for judge in ("`prm:", "`hf:", "`text-only:prm:", "`step-check:", "`always-correct`", "`random", "`majority`"):
        assert judge in report, judge
    metrics = json.loads((out / "eval" / "metrics.json").read_text())

    # every target is measured from metrics.json, and its verdict follows from the measurement and the threshold
    from stepcritic.demo import TARGETS

    targets = {t["target"]: t for t in json.loads((out / "targets.json").read_text())}
    assert set(targets) == {"prm_f1", "prm_auroc", "prm_kind_auroc", "margin_over_prompted", "margin_over_trivial",
                            "writer", "blank", "best_of_n"}
    prm = next(k for k in metrics["judges"] if k.startswith("prm:"))
    step = metrics["judges"][prm]["overall"]["critique"]["step"]
    assert targets["prm_f1"]["measured"] == round(step["f1"] or 0.0, 3)
    assert targets["prm_f1"]["met"] == (targets["prm_f1"]["measured"] >= TARGETS["prm_f1"])
    assert targets["prm_auroc"]["measured"] == round(step["auroc"], 3)
    kinds = metrics["judges"][prm]["breakdowns"]["step_kind"]
    assert set(targets["prm_kind_auroc"]["measured"]) == set(kinds) >= {"answer", "count"}
    trivial = targets["margin_over_trivial"]["measured"]
    assert trivial["trivial"] == max(round(metrics["judges"][j]["overall"]["critique"]["step"]["f1"] or 0.0, 3)
                                     for j in ("always-correct", "random,rate=1.0,seed=0", "random,rate=0.5,seed=0",
                                               "majority"))
    assert trivial["margin"] == pytest.approx(targets["prm_f1"]["measured"] - trivial["trivial"], abs=2e-3)
    bon = metrics["judges"][prm]["overall"]["best-of-n"]["full"]
    assert targets["best_of_n"]["measured"] == {"prm": bon["chain"], "majority": bon["majority"]}
    assert targets["best_of_n"]["met"] == (bon["chain"] > bon["majority"])
    for t in targets.values():
        assert f"{t['text']}: measured" in report and ("**met**" if t["met"] else "**not met**") in report
    always = next(v for k, v in metrics["judges"].items() if k == "always-correct")
    assert always["overall"]["critique"]["step"]["recall"] == 0.0  # a judge that never flags finds nothing
    for name in ("prm", "critique-sft", "critique-dpo"):  # DPO may save a LoRA adapter over the SFT critic
        saved = os.listdir(out / "models" / name)
        assert "model.safetensors" in saved or "adapter_model.safetensors" in saved, (name, saved)


@pytest.mark.slow
def test_quick_demo_on_smollm2_trains_and_judges_through_the_tiny_smol_recipes(tmp_path):
    """`--base smollm2`: the critics start from the SmolLM2 base (recipes/tiny-smol, LoRA), the note PRM is judged
    from its merged folder and every SmolLM2 judge scores in bfloat16."""
    from stepcritic.train.tiny.model import SMOLLM2_INSTALL, smollm2_available

    if not smollm2_available():
        pytest.skip(f"SmolLM2 is not installed: {SMOLLM2_INSTALL}")
    out = tmp_path / "demo"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", STEPCRITIC_CACHE=str(tmp_path / "c"))
    run = subprocess.run([sys.executable, "-m", "stepcritic", "demo", "--quick", "--base", "smollm2", "--out",
                          str(out)], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    metrics = json.loads((out / "eval" / "metrics.json").read_text())
    judges = set(metrics["judges"])
    assert f"prm:{out / 'models' / 'prm' / 'merged'},dtype=bfloat16" in judges
    assert sum(j.endswith("dtype=bfloat16") or ",dtype=bfloat16," in j for j in judges) == 5
    assert json.loads((out / "timings.json").read_text())["plan"]["base"] == "smollm2"
    config = json.loads((out / "models" / "prm" / "merged" / "config.json").read_text())
    assert config["stepcritic_prm_notes"] is True  # the demo's notes: the step as the image has it


def test_the_plans_training_error_and_fault_rates_reach_the_training_chains_only(tmp_path):
    # a critic trained on more wrong steps (or on size claims wrong half of the time) must still be judged on the
    # generator's own mix
    from stepcritic.data_prep.schema import chain_meta, load_chains
    from stepcritic.demo import PLANS, SMOL_PLANS, synthesise

    assert all({"train_error_rate", "train_fault_rates"} <= set(p) for plans in (PLANS, SMOL_PLANS)
               for p in plans.values())

    def steps(folder, template=None):
        return [s for chain in load_chains(str(folder), decode_images=False)
                for s, t in zip(chain["steps"], chain_meta(chain)["step_templates"]) if template in (None, t)]

    def wrong_share(folder, template=None):
        return sum(not s["correct"] for s in steps(folder, template)) / len(steps(folder, template))

    plan = {"n_train": 300, "n_test": 150, "level": "standard", "train_fault_rates": None}
    synthesise(dict(plan, train_error_rate=0.6), 0, str(tmp_path / "high"))
    synthesise(dict(plan, train_error_rate=None), 0, str(tmp_path / "own"))
    synthesise(dict(plan, train_error_rate=None, train_fault_rates="bigger=1"), 0, str(tmp_path / "sizes"))
    assert wrong_share(tmp_path / "high" / "train-chains") > wrong_share(tmp_path / "own" / "train-chains") + 0.15
    assert wrong_share(tmp_path / "sizes" / "train-chains", "bigger") > \
        wrong_share(tmp_path / "own" / "train-chains", "bigger") + 0.3
    for other in ("high", "sizes"):
        assert steps(tmp_path / other / "test-chains") == steps(tmp_path / "own" / "test-chains")


def test_bfloat16_only_where_the_cpu_computes_in_it(monkeypatch):
    # emulated bfloat16 is slower than float32: a CPU without the instructions must keep the recipes' float32
    import torch

    from stepcritic.train.common import cpu_has_bf16

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    assert cpu_has_bf16() is False  # torch held to AVX2 computes bfloat16 emulated, whatever the CPU has
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    for avx512_bf16, amx, expected in ((True, False, True), (False, True, True), (False, False, False)):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx512_bf16: v, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda v=amx: v, raising=False)
        assert cpu_has_bf16() is expected
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    assert cpu_has_bf16() is False  # a torch without the probes: float32, as before
