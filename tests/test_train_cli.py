"""`stepcritic train` is safe by default: shipped recipes by name from any folder, recipe values checked for sense, an
output folder never written over without being told, a rerun that resumes the checkpoint's own weights, dry runs
that take seconds and load no model, and a run that ends with one line in words."""

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import chains

from stepcritic import recipes
from stepcritic.cli import main as stepcritic
from stepcritic.errors import missing_extra
from stepcritic.train.config import DATASET_KINDS, RecipeError, parse_recipe
from stepcritic.train.preflight import OutputDirInUse, check_output_dir

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.usefixtures("private_tiny_cache")  # conftest.py: this module's own tiny-model cache


@pytest.fixture(autouse=True)
def quiet_environment(monkeypatch):
    """`stepcritic train` turns progress bars off through the environment when stderr is not a terminal; set here,
    the test's teardown takes the settings back instead of leaving them to later tests."""
    for name in ("HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.setenv(name, "1")


def recipe_kinds() -> set[str]:
    """Every method's default kind and every kind a shipped recipe names."""
    return {kinds[0] for kinds in DATASET_KINDS.values()} | {
        parse_recipe(name).script_args.dataset_kind for name in recipes.names()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """{kind: folder} for every kind a shipped recipe reads, built from 8 hand-made chains."""
    from stepcritic.data_prep.build import build_dataset

    root = tmp_path_factory.mktemp("data")
    kinds = recipe_kinds()
    for kind in kinds:
        build_dataset(chains(8), kind, str(root / kind), test_fraction=0.25, seed=0)
    return {kind: str(root / kind) for kind in kinds}


@pytest.fixture(scope="module")
def built_text(tmp_path_factory):
    """The same kinds built from text-only chains, for the recipes of text-only models."""
    from text_chains import ingest_and_build, sums

    kinds = recipe_kinds()
    return ingest_and_build(sums(), tmp_path_factory.mktemp("text"), sorted(kinds))[1]


def one_error_line(capsys) -> str:
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("stepcritic train: error: ") and "Traceback" not in line
    return line


# ----------------------------------------------------------------------------- recipes by name

def test_a_shipped_recipe_is_found_by_name_from_any_folder(tmp_path, monkeypatch):
    """`--config tiny/prm` (and the README's `recipes/tiny/prm.yaml`) work outside a clone; a real file still wins."""
    monkeypatch.chdir(tmp_path)
    shipped = recipes.resolve("tiny/prm")
    assert Path(shipped) == REPO / "recipes" / "tiny" / "prm.yaml"
    assert recipes.resolve("recipes/tiny/prm.yaml") == recipes.resolve("tiny/prm.yaml") == shipped
    assert parse_recipe("qwen2.5-vl-3b/sft-lora").method == "sft"
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "prm.yaml").write_text("method: prm\n")
    assert recipes.resolve("tiny/prm.yaml") == "tiny/prm.yaml"


def test_list_recipes_names_every_recipe_once_with_its_method_and_model(capsys):
    """`stepcritic train --list-recipes`: one line per shipped recipe (launcher configs are not recipes)."""
    assert stepcritic(["train", "--list-recipes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = recipes.names()
    assert "tiny/prm" in names and "qwen2.5-vl-7b/grpo-lora" in names
    assert not [name for name in names if name.startswith("accelerate/")]
    assert len(lines) == len(names) + 1  # and a header
    for name, line in zip(names, lines[1:]):
        assert line.split()[0] == name
    assert "Qwen/Qwen2.5-VL-3B-Instruct" in next(line for line in lines if line.startswith("qwen2.5-vl-3b/sft-lora "))
    assert " prm " in next(line for line in lines if line.startswith("tiny/prm "))


def test_listing_and_an_unknown_name_answer_without_importing_torch():
    """Both are answered before torch loads, so they take a fraction of a second."""
    code = ("import sys; from stepcritic.cli import main; main(['train', '--list-recipes']); "
            "assert main(['train', '--config', 'tiny/pmr']) == 2; assert 'torch' not in sys.modules, 'torch'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_help_lists_the_common_recipe_keys_with_their_meanings_without_importing_torch():
    """`--max_steps -1` means "the epochs decide": `train --help` says so, with the other keys most runs override,
    and stays as fast as the rest of `--help` (no torch, no transformers)."""
    code = ("import contextlib, io, sys\nfrom stepcritic.cli import main\nout = io.StringIO()\n"
            "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n    main(['train', '--help'])\n"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'loaded'\nprint(out.getvalue())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("  --")}
    for key in ("--dataset_path", "--output_dir", "--max_steps", "--num_train_epochs", "--learning_rate",
                "--per_device_train_batch_size", "--model_name_or_path", "--report_to", "--overwrite_output_dir"):
        assert key in lines and len(lines[key].split()) > 3, (key, sorted(lines))  # a key with its meaning
    assert "-1 (the default) means --num_train_epochs decides" in lines["--max_steps"]


def test_the_common_keys_in_help_are_recipe_keys_with_the_defaults_it_states():
    import dataclasses

    from transformers import TrainingArguments

    from stepcritic.train.cli import COMMON_KEYS

    recipe = parse_recipe("tiny/prm", {"dataset_path": "data/prm-sft"})
    configs = (recipe.script_args, recipe.model_args, recipe.training_args)
    for key, _ in COMMON_KEYS:
        name = key.split()[0].removeprefix("--")
        assert any(hasattr(config, name) for config in configs), name
    defaults = {f.name: f.default for f in dataclasses.fields(TrainingArguments)}
    stated = dict(COMMON_KEYS)
    assert defaults["max_steps"] == -1 and "-1 (the default)" in stated["--max_steps N"]
    assert f"(default {defaults['num_train_epochs']:g})" in stated["--num_train_epochs E"]
    assert f"(default {defaults['seed']})" in stated["--seed S"]


def test_an_unknown_recipe_is_one_line_with_the_nearest_name(capsys):
    """A mistyped name names the recipe it probably meant, and where the list is."""
    assert stepcritic(["train", "--config", "tiny/pmr", "--dry-run"]) == 2
    line = one_error_line(capsys)
    assert "'tiny/pmr'" in line and "did you mean tiny/prm?" in line and "--list-recipes" in line
    assert stepcritic(["train", "--config", "qwen25-vl-3b/sft-lora"]) == 2
    assert "did you mean qwen2.5-vl-3b/sft-lora" in one_error_line(capsys)  # the nearest first
    assert stepcritic(["train", "--dry-run"]) == 2
    assert "--config" in one_error_line(capsys)


# ----------------------------------------------------------------------------- values that cannot train

@pytest.mark.parametrize("key, value", [("learning_rate", "-1"), ("learning_rate", "0"),
                                        ("per_device_train_batch_size", "0"), ("gradient_accumulation_steps", "0"),
                                        ("max_length", "0"), ("max_steps", "0"), ("save_steps", "0"),
                                        ("max_train_samples", "0"), ("max_image_size", "0")])
@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_a_senseless_value_is_one_line_naming_the_key(key, value, dry, built, tmp_path, capsys, monkeypatch):
    """A dry run and a real run refuse the same values, before any data or model is read."""
    from stepcritic.train import common

    monkeypatch.setattr(common, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    argv = ["train", "--config", "tiny/prm", "--dataset_path", built["prm-sft"], "--output_dir",
            str(tmp_path / "run"), f"--{key}", value] + (["--dry-run"] if dry else [])
    assert stepcritic(argv) == 2
    assert f"override: `{key}` must be " in one_error_line(capsys)


def test_a_senseless_value_in_the_file_names_the_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text((REPO / "recipes" / "tiny" / "grpo.yaml").read_text() + "num_generations: 1\n")
    with pytest.raises(RecipeError, match="num_generations"):
        parse_recipe(path)
    path.write_text((REPO / "recipes" / "tiny" / "dpo.yaml").read_text().replace("beta: 0.1", "beta: 0.0"))
    with pytest.raises(RecipeError, match=rf"^{path}: `beta` must be greater than 0, got 0.0"):
        parse_recipe(path)


# ----------------------------------------------------------------------------- the output folder

def fake_run(folder: Path, steps: int, checkpoints=(), finished=True):
    """A folder as a run leaves it: checkpoints (trainer states only) and, when finished, the model files."""
    folder.mkdir(parents=True, exist_ok=True)
    for step in checkpoints:
        (folder / f"checkpoint-{step}").mkdir()
        state = {"global_step": step, "max_steps": steps, "num_train_epochs": 1}
        (folder / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps(state))
    if finished:
        (folder / "model.safetensors").write_bytes(b"")
        (folder / "config.json").write_text("{}")
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": steps}))
    return folder


def output_plan(folder, **overrides):
    return check_output_dir(parse_recipe("tiny/prm", {"output_dir": str(folder), **overrides}))


def test_an_output_folder_is_used_only_when_nothing_in_it_would_be_lost(tmp_path):
    """New, empty or log-only folders start a run; a stopped run's checkpoint is resumed; a finished model with nothing
    left to resume, or files of something else, are refused in one line naming both ways forward."""
    assert output_plan(tmp_path / "new").endswith("(new folder)")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "train.log").write_text("tee'd before the run started")
    assert output_plan(tmp_path / "logs").endswith("(empty folder)")

    stopped = fake_run(tmp_path / "stopped", 150, checkpoints=(50, 100), finished=False)
    assert "resumes from checkpoint-100, step 100 of 150" in output_plan(stopped)

    ways = ("--overwrite_output_dir true", "another --output_dir")
    done = fake_run(tmp_path / "done", 150, checkpoints=(100, 150))
    with pytest.raises(OutputDirInUse) as refused:
        output_plan(done, max_steps=150)
    message = str(refused.value)
    assert str(done) in message and "finished model of 150 steps" in message and "nothing to resume" in message
    assert all(way in message for way in ways) and "\n" not in message
    assert "resumes from checkpoint-150, step 150 of 300" in output_plan(done, max_steps=300)  # trained on further

    no_checkpoint = fake_run(tmp_path / "demo-style", 150)
    with pytest.raises(OutputDirInUse, match="finished model of 150 steps .* no checkpoint to resume from"):
        output_plan(no_checkpoint, max_steps=150)

    other = tmp_path / "data"
    other.mkdir()
    (other / "chains.jsonl").write_text("{}\n")
    with pytest.raises(OutputDirInUse, match=r"not empty and holds no training run \(chains.jsonl\)") as refused:
        output_plan(other)
    assert all(way in str(refused.value) for way in ways)

    (tmp_path / "file").write_text("")
    with pytest.raises(OutputDirInUse, match="is a file, not a folder"):
        output_plan(tmp_path / "file")

    assert "deleting its 2 checkpoint(s) first" in output_plan(done, overwrite_output_dir=True)
    with pytest.raises(OutputDirInUse, match="resume_from_checkpoint .*: no such folder"):
        output_plan(done, resume_from_checkpoint=str(tmp_path / "nowhere"))


def test_a_finished_output_folder_is_refused_before_anything_loads(built, tmp_path, capsys, monkeypatch):
    """At the command line and in the dry run, with the same line."""
    from stepcritic.train import common

    monkeypatch.setattr(common, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    done = fake_run(tmp_path / "done", 150, checkpoints=(150,))
    argv = ["train", "--config", "tiny/prm", "--dataset_path", built["prm-sft"], "--output_dir", str(done)]
    assert stepcritic(argv) == 2
    line = one_error_line(capsys)
    assert str(done) in line and "--overwrite_output_dir true" in line
    assert stepcritic(argv + ["--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == line and "dry run: 1 problem(s) found" in captured.out


# ----------------------------------------------------------------------------- a real run, twice

def safetensors_of(path):
    from safetensors.torch import load_file

    return load_file(str(path))


def test_a_rerun_resumes_the_checkpoint_weights_and_every_run_ends_with_one_line(built, tmp_path, capsys):
    """A run stopped after a checkpoint, run again, carries on from that checkpoint's weights and ends where an
    unbroken run ends (the trainer alone would load none of them for the tiny LLaVA, whose saved names differ from
    its parameters' names); each run ends with a sentence, not the trainer's dict; a finished folder is refused;
    --overwrite_output_dir starts over and drops the old checkpoints."""
    import shutil

    import torch

    out = tmp_path / "run"
    argv = ["train", "--config", "tiny/prm", "--dataset_path", built["prm-sft"], "--output_dir", str(out),
            "--max_steps", "3", "--save_steps", "2", "--per_device_train_batch_size", "2", "--logging_steps", "1"]
    assert stepcritic(argv) == 0
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"saved the prm critic to {out} after 3 steps (") and "final loss " in last
    assert f"evaluate it with: stepcritic eval --chains CHAINS_DIR --judge 'prm:{out}' --out EVAL_DIR" in last
    assert "step 3 of 3: loss " in err and "'train_runtime'" not in err and "{'loss'" not in err
    unbroken = safetensors_of(out / "model.safetensors")

    shutil.rmtree(out / "checkpoint-3")  # stopped after step 2's checkpoint (step 1 has no learning rate yet)
    for name in ("model.safetensors", "trainer_state.json", "config.json"):
        os.remove(out / name)
    assert stepcritic(argv) == 0
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "after 3 steps (resumed at step 2;" in last
    resumed = safetensors_of(out / "model.safetensors")
    assert resumed.keys() == unbroken.keys()
    assert all(torch.allclose(resumed[key], unbroken[key], atol=1e-5) for key in resumed), \
        "the resumed run did not carry on from the checkpoint's weights"

    assert stepcritic(argv) == 2  # finished, nothing to resume
    assert "nothing to resume" in one_error_line(capsys)
    again = ["train", "--config", "tiny/prm", "--dataset_path", built["prm-sft"], "--output_dir", str(out),
             "--max_steps", "1", "--per_device_train_batch_size", "2", "--overwrite_output_dir", "true"]
    assert stepcritic(again) == 0
    assert sorted(path.name for path in out.glob("checkpoint-*")) == ["checkpoint-1"]
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 1


# ----------------------------------------------------------------------------- dry runs

def test_every_shipped_recipe_dry_runs_in_seconds_without_loading_a_model(built, built_text, tmp_path, monkeypatch):
    """No dry run builds the tiny critic (the GPU size pre-trains for many minutes) or loads any weights."""
    import transformers
    from transformers.models.auto.auto_factory import _BaseAutoModelClass

    from stepcritic.train.loading import recipe_reads_text_only
    from stepcritic.train.preflight import dry_run
    from stepcritic.train.tiny import cache, model, shipped

    def loaded(*args, **kwargs):
        raise AssertionError("a dry run built or loaded a model")

    for owner, name in ((model, "build_tiny_critic"), (cache, "tiny_critic_path"), *((base, "path") for base in
                                                                                       shipped.BASES.values())):
        monkeypatch.setattr(owner, name, loaded)
    for owner in (transformers.PreTrainedModel, _BaseAutoModelClass):
        monkeypatch.setattr(owner, "from_pretrained", classmethod(loaded))
    monkeypatch.setattr(_BaseAutoModelClass, "from_config", classmethod(loaded))

    from stepcritic.train.tiny.cache import scaffold_processor_path
    from stepcritic.train.tiny.model import smollm2_available

    if smollm2_available():  # SmolLM2's processor is cached on first use (its tokenizer is read out of the GGUF file)
        scaffold_processor_path()
    slow = {}
    for name in recipes.names():
        recipe = parse_recipe(name)
        data = built_text if recipe_reads_text_only(recipe) else built
        # the GPU recipes log to TensorBoard: where it is not installed a dry run rightly says so (test_missing_extras)
        loggers = ["--report_to", "none"] if missing_extra("tensorboard", "") else []
        recipe = parse_recipe(name, ["--dataset_path", data[recipe.script_args.dataset_kind],
                                     "--output_dir", str(tmp_path / name), *loggers])
        out, err = io.StringIO(), io.StringIO()
        started = time.monotonic()
        code = dry_run(recipe, out, err)
        seconds = time.monotonic() - started
        assert code == 0, (name, err.getvalue())
        assert "dry run: ok" in out.getvalue()
        if seconds > 20:
            slow[name] = round(seconds, 1)
    assert not slow, f"dry runs that took more than 20 s: {slow}"
