"""A base pre-trained in several runs (`base_pretrain --init-from RUN1/checkpoint.pt`) gets a card that gives every
run's command, in order, and names no path of the machine that made it."""

import json

from stepcritic.train.tiny import card


def _run(folder, steps, seconds, learning_rate, init_from=None, weights="", probe_at=()):
    folder.mkdir()
    settings = {"out": str(folder), "steps": steps, "batch_size": 8, "vision_steps": 400, "seed": 0, "threads": 1,
                "learning_rate": learning_rate, "lm": "smollm2", "lora_rank": 16, "bf16": True,
                "init_from": init_from, "question_weights": weights}
    history = [{"step": s, "loss": 0.1, "probe": {"colour": 0.5 + s / 10_000, "bigger": 0.5}} for s in probe_at]
    record = {"settings": settings, "steps": steps, "planned_steps": steps, "seconds": seconds, "history": history,
              "probe": {"colour": 1.0, "bigger": 0.91}}
    (folder / "pretraining.json").write_text(json.dumps(record))
    return record


def test_a_continued_run_is_carded_with_both_commands_and_no_machine_path(tmp_path):
    import torch
    from safetensors.torch import save_file

    _run(tmp_path / "first", 1200, 3600.0, 5e-4, probe_at=(600, 1200))
    record = _run(tmp_path / "second", 900, 1800.0, 3e-4, init_from=str(tmp_path / "first" / "checkpoint.pt"),
                  weights="relation=4,bigger=4", probe_at=(450, 900))
    runs = card.stages(tmp_path / "second")
    assert [r["steps"] for r in runs] == [1200, 900]
    assert runs[1]["settings"]["init_from"] == "RUN1/checkpoint.pt"
    assert str(tmp_path) not in json.dumps(runs)

    folder = tmp_path / "shipped"
    folder.mkdir()
    save_file({"w": torch.zeros(3, 2)}, str(folder / "model.safetensors"))
    meta = {"fingerprint": "f", "commit": "abc", "hardware": "x86_64 CPU"}
    text = card.write_card(folder, record, meta, runs=runs).read_text()
    assert "--out RUN1 --steps 1200" in text and "&& python -m stepcritic.train.tiny.base_pretrain --out RUN2" in text
    assert "--init-from RUN1/checkpoint.pt --question-weights relation=4,bigger=4" in text
    assert "--from RUN2" in text and "1200 + 900 steps" in text and "1.50 h" in text
    assert "| 2100 |" in text and "| 1650 |" in text  # the second run's curve continues the first one's steps
    assert "| 0.910 | met" in text and str(tmp_path) not in text


def test_a_single_run_keeps_its_plain_card(tmp_path):
    import torch
    from safetensors.torch import save_file

    record = _run(tmp_path / "only", 1200, 7200.0, 5e-4, probe_at=(1200,))
    folder = tmp_path / "shipped"
    folder.mkdir()
    save_file({"w": torch.zeros(3, 2)}, str(folder / "model.safetensors"))
    text = card.write_card(folder, record, {"fingerprint": "f", "hardware": "x86_64 CPU"},
                           runs=card.stages(tmp_path / "only")).read_text()
    assert "--out RUN --steps 1200" in text and "--init-from" not in text and "--from RUN`" in text
    assert "then 1200 of vision-language pre-training" in text and "lr 0.0005" in text and "2.00 h" in text


def test_a_run_continuing_an_installed_base_is_carded_after_its_runs(tmp_path):
    # base_pretrain --init-from stepcritic/train/tiny/base_smollm2: the installed base's record lists the runs that
    # made it; the new card gives all of them, in order, the new one continuing RUN<n>/model
    import torch
    from safetensors.torch import save_file

    installed = tmp_path / "base_smollm2"
    installed.mkdir()
    older = [{"settings": {"steps": s, "batch_size": 8, "vision_steps": 400, "seed": 0, "threads": 1,
                           "learning_rate": lr, "lm": "smollm2", "lora_rank": 16, "bf16": True,
                           "init_from": init}, "steps": s, "seconds": 3600.0}
             for s, lr, init in ((1200, 5e-4, None), (900, 3e-4, "RUN1/checkpoint.pt"))]
    (installed / "stepcritic_base.json").write_text(json.dumps({"runs": older}))
    (installed / "adapter_config.json").write_text("{}")
    record = _run(tmp_path / "third", 400, 1800.0, 2e-4, init_from=str(installed), weights="count_colour=4",
                  probe_at=(100, 400))
    record["settings"].update(synth_scenes=0.7, balance_counts=True)
    (tmp_path / "third" / "pretraining.json").write_text(json.dumps(record))
    runs = card.stages(tmp_path / "third")
    assert [r["steps"] for r in runs] == [1200, 900, 400]
    assert runs[2]["settings"]["init_from"] == "RUN2/model" and str(tmp_path) not in json.dumps(runs)

    folder = tmp_path / "shipped"
    folder.mkdir()
    save_file({"w": torch.zeros(3, 2)}, str(folder / "adapter_model.safetensors"))
    text = card.write_card(folder, record, {"fingerprint": "f", "hardware": "x86_64 CPU"},
                           weights="adapter_model.safetensors", runs=runs).read_text()
    assert "--out RUN3 --steps 400" in text and "--init-from RUN2/model" in text
    assert "--synth-scenes 0.7 --balance-counts" in text and "1200 + 900 + 400 steps" in text
    assert "| 2500 |" in text and "Run 1, 2: no curve" in text  # the third run's curve after the first two's steps


def test_a_run_resumed_with_other_weights_is_carded_phase_by_phase_with_its_stages_and_said_first_probe(tmp_path):
    # base_pretrain resumed in its own folder with heavier question weights: the card gives both commands, the steps
    # each ran and the weights from the step they began; a --say-first base's probe command says --say-first
    import torch
    from safetensors.torch import save_file

    record = _run(tmp_path / "only", 16000, 7200.0, 1e-3, probe_at=(8000, 16000))
    first = dict(record["settings"], lm="tiny", say_first=True, induction_steps=300, align_steps=200,
                 align_weight=1.0, patch_size=32, question_weights="")
    record["settings"] = dict(first, question_weights="relation=3,bigger=3")
    record["phases"] = [{"from_step": 0, "settings": first}, {"from_step": 9250, "settings": record["settings"]}]
    (tmp_path / "only" / "pretraining.json").write_text(json.dumps(record))
    runs = card.stages(tmp_path / "only")
    folder = tmp_path / "shipped"
    folder.mkdir()
    save_file({"w": torch.zeros(3, 2)}, str(folder / "model.safetensors"))
    text = card.write_card(folder, record, {"fingerprint": "f", "hardware": "x86_64 CPU"}, runs=runs).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("- command:"))
    assert line.count("--out RUN --steps 16000") == 2 and "(steps 0-9250), then resumed in the same folder as" in line
    assert line.index("--question-weights relation=3,bigger=3") > line.index("(steps 0-9250)")
    assert "--induction-steps 300 --align-steps 200 --align-weight 1.0 --say-first` (steps 9250-16000)" in line
    assert "run 1 from step 9250: relation=3,bigger=3" in text and "(the first 300 on word lists said twice" in text
    assert "--per-question 96 --say-first`" in text and str(tmp_path) not in text
