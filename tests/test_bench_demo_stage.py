"""The demo-stage benchmark trains exactly the demo's stage, with a variant's settings on top."""

import json

import pytest

from stepcritic import demo
from stepcritic.bench import demo_stage


@pytest.fixture
def demo_dir(tmp_path):
    plan = dict(demo.PLANS["full"], level="standard", base="tiny", seed=3)
    (tmp_path / "timings.json").write_text(json.dumps({"plan": plan}))
    return tmp_path


def options(argv):
    return dict(arg[2:].split("=", 1) for arg in argv if arg.startswith("--") and "=" in arg)


def test_prm_stage_is_the_demos_with_the_variant_on_top(demo_dir, tmp_path):
    argv = demo_stage.stage_command(str(demo_dir), "prm", 7, {"dataloader_num_workers": "0"}, str(tmp_path / "o"))
    assert argv[:3] == ["train", "--config", "tiny/prm"]
    got = options(argv)
    assert got["max_steps"] == "7" and got["dataloader_num_workers"] == "0" and got["seed"] == "3"
    assert got["dataset_path"] == str(demo_dir / "data" / "prm-sft")
    assert got["rehearsal_path"] == str(demo_dir / "data" / "rehearsal")
    assert got["learning_rate"] == str(demo.PLANS["full"]["prm_learning_rate"])


def test_writer_stage_starts_from_the_demos_prm(demo_dir, tmp_path):
    got = options(demo_stage.stage_command(str(demo_dir), "writer", 5, {}, str(tmp_path / "o")))
    assert got["model_name_or_path"] == str(demo_dir / "models" / "prm")
    assert got["dataset_path"] == str(demo_dir / "data" / "critique-sft") and got["max_steps"] == "5"
    (demo_dir / "models" / "prm" / "merged").mkdir(parents=True)
    got = options(demo_stage.stage_command(str(demo_dir), "writer", 5, {}, str(tmp_path / "o")))
    assert got["model_name_or_path"] == str(demo_dir / "models" / "prm" / "merged")


def test_bad_variant_and_unfinished_demo_are_one_line(tmp_path):
    assert demo_stage.parse_variant("a=1,b=x=y") == {"a": "1", "b": "x=y"}
    with pytest.raises(SystemExit, match="expected KEY=VALUE"):
        demo_stage.parse_variant("dataloader_num_workers")
    with pytest.raises(SystemExit, match="no timings.json"):
        demo_stage.stage_command(str(tmp_path), "prm", 5, {}, str(tmp_path / "o"))
