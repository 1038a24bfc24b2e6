"""Every shipped recipe trains on data made by `stepcritic data build`, so no recipe can drift from the data contract.

The README's path, offline: `stepcritic data synth` -> `stepcritic data build` of every dataset kind -> every recipe
under recipes/ for one optimiser step (text-only models on text-only chains ingested from ProcessBench's layout;
the real-model recipes with a tiny random checkpoint of the same architecture from
`offline_models.build_random_checkpoint`, their LoRA setting kept), including an evaluation step where the recipe
evaluates; `--dry-run` of every recipe on the built data; and the user mistakes that must fail fast with one line:
a PRM recipe on critique data, a missing dataset_path.

Time: the dry runs cover every recipe in the default suite (a fraction of a second each). Training runs there for
one recipe per (architecture, method); the others, which differ from it only in sizes (the 7B twins of the 3B
recipes) or train in tests/test_train_*.py already (the tiny recipes), train under `-m slow`.
"""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from text_chains import ingest_and_build, sums

from stepcritic.cli import main as stepcritic
from stepcritic.data_prep import build, contract
from stepcritic.train import archs
from stepcritic.train.config import DATASET_KINDS, parse_recipe
from stepcritic.train.loading import model_source

REPO = Path(__file__).resolve().parent.parent
RECIPES_DIR = REPO / "recipes"
RECIPES = sorted(p for p in RECIPES_DIR.rglob("*.yaml") if p.parent.name != "accelerate")
GENERATION = ["--num_generations", "2", "--max_completion_length", "8"]  # GRPO: two short samples per prompt


def name_of(path):
    return str(path.relative_to(RECIPES_DIR))


def training_params():
    """Every recipe; all but the first of each (architecture, method) real-model pair marked slow."""
    seen, params = set(), []
    for path in RECIPES:
        values = yaml.safe_load(path.read_text())
        name = values["model_name_or_path"]
        key = None if model_source(name) else (archs.model_type_of(name), values["method"])
        fast = key is not None and key not in seen
        seen.add(key)
        params.append(pytest.param(path, id=name_of(path), marks=() if fast else pytest.mark.slow))
    return params


pytestmark = pytest.mark.usefixtures("private_tiny_cache")  # conftest.py: this module's own tiny-model cache


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """{kind: folder}: every kind, built by the commands the README shows, from 36 synthetic chains."""
    root = tmp_path_factory.mktemp("data")
    assert stepcritic(["data", "synth", "--n", "36", "--seed", "0", "--out", str(root / "chains")]) == 0
    for kind in contract.KIND_NAMES:
        assert stepcritic(["data", "build", "--chains", str(root / "chains"), "--kind", kind,
                           "--out", str(root / kind), "--test-fraction", "0.2"]) == 0
    return {kind: str(root / kind) for kind in contract.KIND_NAMES}


@pytest.fixture(scope="module")
def built_text(tmp_path_factory):
    """{kind: folder}: every kind, built from text-only chains (`data ingest --format processbench`)."""
    return ingest_and_build(sums(), tmp_path_factory.mktemp("text"), contract.KIND_NAMES, test_fraction=0.2)[1]


def reads_text_only(recipe) -> bool:
    source = model_source(recipe.model_args.model_name_or_path)
    if source is not None:
        return source.text_only
    return archs.model_type_of(recipe.model_args.model_name_or_path) in archs.TEXT_MODEL_TYPES


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """model_type -> a tiny random checkpoint of that architecture, built on first use."""
    from stepcritic.train.tiny.offline_models import build_random_checkpoint

    root, made = tmp_path_factory.mktemp("checkpoints"), {}

    def get(model_type):
        if model_type not in made:
            made[model_type] = build_random_checkpoint(model_type, root / model_type, size="tiny")
        return made[model_type]

    return get


def overrides_for(path, built, checkpoints, output_dir=None, built_text=None):
    """What the test changes in a recipe: data (text-only for a text model), model (tiny, same architecture), CPU
    precision, run length."""
    recipe = parse_recipe(path)
    kind = recipe.script_args.dataset_kind
    built = built_text if reads_text_only(recipe) else built
    # The rows of one optimiser step at most (2 per device x at most 2 accumulation steps): trainers that
    # tokenise or filter the whole split up front (DPO, reward) then stay fast.
    argv = ["--dataset_path", built[kind], "--report_to", "none", "--max_train_samples", "4"]
    if output_dir:
        argv += ["--output_dir", str(output_dir)]
    source = model_source(recipe.model_args.model_name_or_path)
    if source is not None:
        if source.kind == "built":  # the small random critic: pre-training stages and size are not under test here
            argv += ["--model_name_or_path", f"stepcritic:tiny/{source.arch}"]
        argv += ["--bf16", "false", "--dataloader_num_workers", "0"]
    else:
        model_type = archs.model_type_of(recipe.model_args.model_name_or_path)
        argv += ["--model_name_or_path", checkpoints(model_type), "--bf16", "false", "--dtype", "float32"]
    if recipe.method == "grpo":  # one generation round: 2 completions of one prompt
        argv += GENERATION + ["--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1"]
    else:  # small batches, the recipe's accumulation steps kept
        argv += ["--per_device_train_batch_size", str(min(recipe.training_args.per_device_train_batch_size, 2))]
    if recipe.training_args.eval_strategy != "no":
        argv += ["--eval_steps", "1", "--max_eval_samples", "2", "--per_device_eval_batch_size", "2"]
    return recipe, argv


def test_contract_matches_the_builders_and_the_recipes():
    for kind in contract.KIND_NAMES:
        assert set(build.features(kind)) == set(contract.KINDS[kind].columns), kind
        assert set(contract.KINDS[kind].required) <= set(contract.KINDS[kind].columns), kind
    assert set(DATASET_KINDS) == set(contract.METHOD_KINDS)
    for path in RECIPES:
        recipe = parse_recipe(path)
        assert recipe.script_args.eval_split in (None, *contract.SPLITS), name_of(path)
        if recipe.training_args.eval_strategy != "no":
            assert recipe.script_args.eval_split == contract.HELD_OUT, name_of(path)


def test_build_records_its_kind_and_the_methods_it_feeds(built):
    for kind, folder in built.items():
        stats = json.loads(Path(folder, contract.STATS_FILE).read_text())
        assert stats["kind"] == kind and stats["methods"] == list(contract.KINDS[kind].methods)
        assert set(stats["rows"]) == set(contract.SPLITS) and all(stats["rows"].values()), (kind, stats["rows"])


@pytest.mark.parametrize("path", training_params())
def test_recipe_trains_one_step_on_built_data(path, built, built_text, checkpoints, tmp_path):
    import torch

    from stepcritic.train.run import train

    recipe, argv = overrides_for(path, built, checkpoints, tmp_path / "run", built_text)
    text = reads_text_only(recipe)
    recipe = parse_recipe(path, argv + ["--max_steps", "1"])
    ran = set()  # classes of the modules that ran: every family's image encoder has "Vision" in its class name
    hook = torch.nn.modules.module.register_module_forward_hook(lambda module, args, out: ran.add(type(module)))
    try:
        metrics = train(recipe)
    finally:
        hook.remove()
    # the images reached the model (a processor that dropped them would still train, on text alone); a text model
    # has no image encoder to run
    vision = [cls for cls in ran if "Vision" in cls.__name__]
    assert bool(vision) != text, sorted(cls.__name__ for cls in ran)

    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    train_logs = [entry for entry in state["log_history"] if "train_loss" in entry]
    assert train_logs and train_logs[-1]["train_loss"] == train_logs[-1]["train_loss"]  # not NaN
    if recipe.training_args.eval_strategy != "no":  # evaluated during training, at step 1, on the held-out split
        # a policy's evaluation is its held-out answers' accuracy
        key = "eval_accuracy" if recipe.script_args.dataset_kind == "policy-sft" else "eval_loss"
        assert any(key in entry and entry["step"] == 1 for entry in state["log_history"])
        assert key in metrics
    card = (tmp_path / "run" / "README.md").read_text()
    assert f"(kind `{recipe.script_args.dataset_kind}`)" in card
    assert [kind for kind in contract.KIND_NAMES if f"`{kind}`" in card] == [recipe.script_args.dataset_kind]


@pytest.mark.parametrize("path", RECIPES, ids=name_of)
def test_dry_run_passes_on_built_data(path, built, built_text, checkpoints, tmp_path):
    from stepcritic.train.preflight import dry_run

    # a folder of its own: the recipe's output_dir may hold a finished model
    recipe, argv = overrides_for(path, built, checkpoints, tmp_path / "run", built_text)
    built = built_text if reads_text_only(recipe) else built
    out, err = io.StringIO(), io.StringIO()
    assert dry_run(parse_recipe(path, argv), out, err) == 0, err.getvalue()
    report = out.getvalue()
    assert "dry run: ok" in report and err.getvalue() == ""
    rows = json.loads(Path(built[recipe.script_args.dataset_kind], contract.STATS_FILE).read_text())["rows"]
    assert f"train {min(rows['train'], 4):,}, test " in report  # max_train_samples 4
    assert " tokens" in report and "skipped" not in report  # the length check ran on the local processor
    assert "global " in report and "steps" in report


def test_dry_run_on_a_hub_model_skips_only_the_length_check(built):
    from stepcritic.train.preflight import dry_run

    path = RECIPES_DIR / "qwen2.5-vl-7b" / "sft-lora.yaml"
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("HF_HOME", str(Path(built["critique-sft"]).parent / "empty-hf-home"))
        # its TensorBoard logger aside: a missing extra is a problem of its own (test_missing_extras)
        code = dry_run(parse_recipe(path, ["--dataset_path", built["critique-sft"], "--report_to", "none"]), out, err)
    assert code == 0, err.getvalue()
    (skipped,) = [line for line in out.getvalue().splitlines() if "lengths" in line]
    assert "skipped" in skipped and "Qwen/Qwen2.5-VL-7B-Instruct" in skipped and "HF_HUB_OFFLINE" in skipped


def test_dry_run_reports_each_problem_on_one_line(built, tmp_path):
    from stepcritic.train.preflight import dry_run

    path = RECIPES_DIR / "tiny" / "prm.yaml"
    out, err = io.StringIO(), io.StringIO()
    recipe = parse_recipe(path, ["--dataset_path", built["prm-sft"],
                                 "--max_length", "20", "--eval_strategy", "steps", "--eval_split", "validation"])
    assert dry_run(recipe, out, err) == 2
    problems = err.getvalue().splitlines()
    assert len(problems) == 1 and "no split 'validation'" in problems[0], problems
    recipe = parse_recipe(path, ["--dataset_path", built["prm-sft"], "--max_length", "20"])
    out, err = io.StringIO(), io.StringIO()
    assert dry_run(recipe, out, err) == 2
    (problem,) = err.getvalue().splitlines()
    assert problem.startswith("stepcritic train: error: ") and "longer than max_length 20" in problem


def test_the_plan_counts_like_the_trainer():
    from stepcritic.train.preflight import plan

    recipe = parse_recipe(RECIPES_DIR / "qwen2.5-vl-3b" / "sft-lora.yaml")  # 4 per device x 2, 2 epochs
    batch, steps = plan(recipe, train_rows=1000, processes=8)
    assert batch.startswith("64 = 4 per device x 2 accumulation steps x 8 processes")
    assert steps.startswith("32 = 2 epoch(s) x 16 steps per epoch")  # ceil(ceil(1000 / 32) / 2) = 16
    batch, steps = plan(parse_recipe(RECIPES_DIR / "qwen2.5-vl-7b" / "grpo-lora.yaml"), 1000, 8)
    assert batch.startswith("128 completions (16 prompts x 8 generations) = 8 per device x 2 accumulation steps")
    assert steps == "500 (max_steps)"


def test_dry_run_reads_the_launcher_from_accelerate_launch(monkeypatch):
    import importlib.util

    from stepcritic.train.preflight import launcher

    for key in [k for k in os.environ if k.startswith("ACCELERATE_") or k == "WORLD_SIZE"]:
        monkeypatch.delenv(key)
    description, processes, problems = launcher()
    assert description.startswith("none") and processes == 1 and problems == []
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # what `accelerate launch --config_file zero3.yaml` sets
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "cpu")
    monkeypatch.setenv("WORLD_SIZE", "8")
    description, processes, problems = launcher()
    assert description.startswith("accelerate launch, DeepSpeed ZeRO-3 (offload optimizer none, params cpu)")
    assert "mixed precision bf16" in description and processes == 8
    assert bool(problems) == (importlib.util.find_spec("deepspeed") is None)  # asked for, not installed: a problem


def test_training_refuses_the_wrong_kind_before_loading_the_model(built, monkeypatch):
    from stepcritic.train import common
    from stepcritic.train.run import train

    monkeypatch.setattr(common, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    recipe = parse_recipe(RECIPES_DIR / "tiny" / "prm.yaml", ["--dataset_path", built["critique-sft"]])
    with pytest.raises(contract.DataContractError,
                       match=rf"{built['critique-sft']}' holds kind 'critique-sft'.*method 'prm' expects 'prm-sft'"):
        train(recipe)
    # a kind the method takes is adopted from build_stats.json (and the model card then names it) ...
    recipe = parse_recipe(RECIPES_DIR / "tiny" / "critique-sft.yaml", ["--dataset_path", built["verifier-sft"]])
    with pytest.raises(pytest.fail.Exception, match="the model was loaded"):
        train(recipe)
    assert recipe.script_args.dataset_kind == "verifier-sft"
    # ... unless the recipe names another one itself
    recipe = parse_recipe(RECIPES_DIR / "tiny" / "critique-sft.yaml",
                          ["--dataset_path", built["verifier-sft"], "--dataset_kind", "critique-sft"])
    with pytest.raises(contract.DataContractError, match="the recipe sets dataset_kind 'critique-sft'"):
        train(recipe)


def test_own_data_without_build_stats_is_checked_by_its_columns(tmp_path, monkeypatch):
    from datasets import Dataset, DatasetDict

    from stepcritic.train import common
    from stepcritic.train.run import train

    monkeypatch.setattr(common, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    DatasetDict(train=Dataset.from_dict({"prompt": ["a"], "chosen": ["b"]})).save_to_disk(str(tmp_path / "own"))
    recipe = parse_recipe(RECIPES_DIR / "tiny" / "prm.yaml", ["--dataset_path", str(tmp_path / "own")])
    with pytest.raises(contract.DataContractError, match=r"lack \['messages', 'images'\], which kind 'prm-sft' needs"):
        train(recipe)


def _run(args):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)


@pytest.mark.parametrize("case", ["wrong-kind", "missing-path", "missing-model"])
def test_user_errors_end_with_one_line_and_exit_2(case, built, tmp_path, capsys):
    from stepcritic.cli import main

    recipe = str(RECIPES_DIR / "qwen2.5-vl-3b" / "prm-lora.yaml")
    if case == "wrong-kind":  # through `stepcritic train`, in this process (a subprocess would import torch again)
        data = built["critique-sft"]
        code, err = main(["train", "--config", recipe, "--dataset_path", data]), capsys.readouterr().err
        expected = [data, "'critique-sft'", "'prm-sft'"]
    elif case == "missing-model":  # right data, a model folder that is not there: said before anything loads
        model = str(tmp_path / "no-such-model")
        code = main(["train", "--config", recipe, "--dataset_path", built["prm-sft"], "--model_name_or_path", model,
                     "--use_cpu", "true", "--bf16", "false"])
        err, expected = capsys.readouterr().err, [model, "model_name_or_path"]
    else:  # through `python -m stepcritic.train`, what `accelerate launch -m` runs: its own process
        data = str(tmp_path / "no-such-data")
        result = _run(["-m", "stepcritic.train", "--config", recipe, "--dataset_path", data])
        code, err, expected = result.returncode, result.stderr, [data, "does not exist", "'prm-sft'"]
    assert code == 2, err
    assert "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith("stepcritic train: error: ") and all(text in line for text in expected), line


# What each family's processor expands an image into: the token the model swaps image features in for, and the
# tokens that frame it.
IMAGE_TOKENS = {
    "qwen2_5_vl": ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>"),
    "qwen3_vl": ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>"),
    "gemma3": ("<image_soft_token>", "<start_of_image>", "<end_of_image>"),
    "internvl": ("<IMG_CONTEXT>", "<img>", "</img>"),
    "idefics3": ("<image>", "<global-img>", "<fake_token_around_image>"),  # one global view, no tiles (tiny)
    "llava": ("<image>", None, None),
}


@pytest.mark.parametrize("model_type", sorted(IMAGE_TOKENS))
def test_random_checkpoint_matches_its_tokenizer(model_type, checkpoints):
    import torch
    from PIL import Image
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor
    from trl.chat_template_utils import has_generation_markers

    path = checkpoints(model_type)
    config, processor = AutoConfig.from_pretrained(path), AutoProcessor.from_pretrained(path)
    tokenizer = processor.tokenizer
    image_token, start, end = IMAGE_TOKENS[model_type]
    assert config.model_type == model_type and config.image_token_id == tokenizer.convert_tokens_to_ids(image_token)
    assert config.get_text_config().vocab_size >= len(tokenizer)
    assert has_generation_markers(processor.chat_template)
    if model_type in ("qwen2_5_vl", "qwen3_vl"):
        assert (config.vision_start_token_id, config.vision_end_token_id) == tuple(
            tokenizer.convert_tokens_to_ids([start, end]))
    if model_type == "gemma3":
        assert (config.boi_token_index, config.eoi_token_index) == tuple(tokenizer.convert_tokens_to_ids([start, end]))
    conversation = [{"role": "user", "content": [{"type": "image", "image": Image.new("RGB", (96, 96), "red")},
                                                 {"type": "text", "text": "Is the circle red?"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "+"}]}]
    batch = processor.apply_chat_template([conversation], tokenize=True, return_dict=True, return_tensors="pt",
                                          return_assistant_tokens_mask=True)
    mask = batch.pop("assistant_masks")
    assert tokenizer.decode(batch["input_ids"][0][mask[0].bool()]) == "+<|im_end|>"
    tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
    if start is not None:  # the image's tokens sit, in one run, inside its frame
        first, last = tokens.index(image_token), len(tokens) - 1 - tokens[::-1].index(image_token)
        assert tokens[first - 1] == start and tokens[last + 1] == end
        assert set(tokens[first:last + 1]) == {image_token}
    if model_type == "gemma3":  # the image's tokens attend to each other both ways only when the model is told where
        assert batch["token_type_ids"][0].tolist() == [int(token == image_token) for token in tokens]
    model = AutoModelForImageTextToText.from_pretrained(path)
    with torch.no_grad():  # raises when the image tokens and the image features disagree
        logits = model(**batch).logits
    assert logits.shape[-1] == config.get_text_config().vocab_size


@pytest.mark.parametrize("alias, vocab_size", [("qwen2.5-vl-3b", 151936), ("qwen3-vl-4b", 151936),
                                               ("gemma-3-4b", 262208), ("internvl3-2b", 151674)])
def test_real_size_token_ids_fit_the_published_vocabulary(alias, vocab_size, checkpoints):
    from transformers import AutoTokenizer

    from stepcritic.train.tiny.offline_models import match_token_ids, resolve

    model_type, config = resolve(alias, "real")
    tokenizer = AutoTokenizer.from_pretrained(checkpoints(model_type))
    match_token_ids(config, tokenizer, model_type, "real")
    assert config.get_text_config().vocab_size == vocab_size and config.image_token_id < len(tokenizer)
    with pytest.raises(ValueError, match="needs a model name"):
        resolve("qwen2_5_vl", "real")


@pytest.mark.slow
def test_real_path_script_runs_on_a_cpu(tmp_path):
    """scripts/real_path_e2e.sh with a tiny random Qwen2.5-VL: every stage passes and lands in the summary."""
    env = {**os.environ, "PYTHON": sys.executable, "N_TRAIN": "36", "N_EVAL": "6", "EVAL_LIMIT": "6", "STEPS": "1"}
    result = subprocess.run(["bash", str(REPO / "scripts" / "real_path_e2e.sh"), "tiny", str(tmp_path)],
                            capture_output=True, text=True, env=env, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    stage_table, evaluation = (tmp_path / "summary.md").read_text().split("\nEvaluation", 1)
    rows = [line.split("|") for line in stage_table.splitlines() if line.startswith("| ") and "`" in line]
    stages = {row[1].strip(): row[2].strip() for row in rows}
    assert set(stages.values()) == {"0"}
    assert {"checkpoint", "eval", *(f"dry-run-{m}" for m in ("sft", "prm", "dpo", "reward"))} <= set(stages)
    assert sum(name.startswith("train-") for name in stages) in (4, 8)  # without / with DeepSpeed (ZeRO-2 and 3)
    assert all(judge in evaluation for judge in ("`hf:", "`prm:", "`reward:"))
