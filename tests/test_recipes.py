"""Every shipped recipe parses with the real parser and builds its model class (tiny config, same architecture)
with its LoRA setting; the parser is strict; the accelerate configs are complete."""

import re
import warnings
from pathlib import Path

import pytest
import yaml

from stepcritic.train import archs
from stepcritic.train.config import DATASET_KINDS, RecipeError, parse_recipe
from stepcritic.train.loading import model_source, resolve_model

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
ACCELERATE_DIR = RECIPES_DIR / "accelerate"
RECIPES = sorted(p for p in RECIPES_DIR.rglob("*.yaml") if ACCELERATE_DIR not in p.parents)
ACCELERATE_CONFIGS = sorted(ACCELERATE_DIR.glob("*.yaml"))
TINY_SFT = RECIPES_DIR / "tiny" / "critique-sft.yaml"
REAL_SFT = RECIPES_DIR / "qwen2.5-vl-7b" / "sft-lora.yaml"
# The Qwen3-VL, Gemma 3 and InternVL3 families: each folder ships the four LoRA methods.
NEW_FAMILY_FOLDERS = ("qwen3-vl-4b", "qwen3-vl-8b", "gemma-3-4b", "internvl3-2b", "internvl3-8b")
# Text-only families: the same four LoRA methods, on datasets built from text-only chains.
TEXT_FAMILY_FOLDERS = ("qwen2.5-1.5b", "qwen3-1.7b")
CONFIG_CLASSES = {"sft": "SFTConfig", "prm": "SFTConfig", "dpo": "DPOConfig", "grpo": "GRPOConfig",
                  "reward": "RewardModelConfig"}


def name_of(path):
    return str(path.relative_to(RECIPES_DIR))


pytestmark = pytest.mark.usefixtures("private_tiny_cache")  # conftest.py: this module's own tiny-model cache


def reads_text_only(recipe) -> bool:
    """Whether a shipped recipe trains a text-only model (the tiny text critic, or a text family)."""
    source = model_source(recipe.model_args.model_name_or_path)
    if source is not None:
        return source.text_only
    return archs.model_type_of(recipe.model_args.model_name_or_path) in archs.TEXT_MODEL_TYPES


def write(tmp_path, text, name="recipe.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_expected_recipes_are_shipped():
    expected = {
        *(f"qwen2.5-vl-7b/{m}-lora.yaml" for m in ("sft", "dpo", "prm", "reward", "grpo")),
        *(f"qwen2.5-vl-3b/{m}-lora.yaml" for m in ("sft", "dpo", "prm", "reward")),
        "smolvlm/sft-lora.yaml", "smolvlm/prm-lora.yaml",
        *(f"{folder}/{m}-lora.yaml" for folder in NEW_FAMILY_FOLDERS for m in ("sft", "dpo", "prm", "reward")),
        *(f"tiny/{m}.yaml" for m in ("critique-sft", "prm", "dpo", "reward", "grpo")),
        *(f"{folder}/{m}-lora.yaml" for folder in TEXT_FAMILY_FOLDERS for m in ("sft", "dpo", "prm", "reward")),
        *(f"tiny-text/{m}.yaml" for m in ("critique-sft", "prm", "dpo", "reward", "grpo")),
    }
    assert expected <= {name_of(p) for p in RECIPES}


@pytest.mark.parametrize("path", RECIPES, ids=name_of)
def test_recipe_parses(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # no deprecated keys
        recipe = parse_recipe(path)
    assert type(recipe.training_args).__name__ == CONFIG_CLASSES[recipe.method]
    assert recipe.script_args.dataset_kind in DATASET_KINDS[recipe.method]
    text = reads_text_only(recipe)
    data = f"data/text/{recipe.script_args.dataset_kind}" if text else f"data/{recipe.script_args.dataset_kind}"
    # the README's folders: data from `data build`, models to runs/
    if name_of(path).startswith(("tiny/", "tiny-text/", "tiny-smol/")):
        assert recipe.script_args.dataset_path == data
        assert recipe.training_args.output_dir.startswith("runs/")
        # a rerun resumes instead of training again from the start
        assert recipe.training_args.save_strategy == "steps" and recipe.training_args.save_total_limit <= 2
        assert recipe.training_args.save_steps <= recipe.training_args.max_steps
    else:
        assert recipe.training_args.output_dir.startswith("outputs/")
    if text:  # text-only builds, and no key about a vision side a text model lacks
        assert recipe.script_args.dataset_path == data
        assert not {"max_image_size", "freeze_vision_tower", "lora_on_vision"} & set(yaml.safe_load(path.read_text()))
    if model_source(recipe.model_args.model_name_or_path) is not None:
        assert recipe.training_args.use_cpu and recipe.training_args.report_to in ("none", [])
    else:
        assert recipe.model_args.use_peft and recipe.model_args.dtype == "bfloat16"
        assert recipe.training_args.gradient_checkpointing
        assert not recipe.script_args.lora_on_vision
    if recipe.method in ("sft", "prm"):
        assert recipe.training_args.assistant_only_loss


# SmolLM2's 135M weights take most of a minute to load on a CPU without AVX-512: those recipes in the slow tier
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if name_of(p).startswith("tiny-smol/") else p
                                  for p in RECIPES], ids=name_of)
def test_recipe_model_builds_with_its_lora_on_the_language_model(path):
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    recipe = parse_recipe(path)
    auto = AutoModelForCausalLM if reads_text_only(recipe) else AutoModelForImageTextToText
    source = model_source(recipe.model_args.model_name_or_path)
    if source is not None:
        # the recipe's architecture and size, without its pre-training stages (minutes on a CPU, not under test)
        size = "" if source.size == "small" else f"-{source.size}"
        name = f"stepcritic:tiny/{source.arch}{size}" if source.kind == "built" else source.name
        model = auto.from_pretrained(resolve_model(name))
    else:
        model_type = archs.model_type_of(recipe.model_args.model_name_or_path)
        model = auto.from_config(archs.tiny_config(model_type))
        assert model.config.model_type == model_type
    peft_config = archs.lora_config(recipe.model_args, recipe.script_args.lora_on_vision)
    if peft_config is None:
        assert not recipe.model_args.use_peft
        return
    decoder = model.get_decoder()
    (decoder_name,) = [name for name, module in model.named_modules() if module is decoder]
    layers = decoder.config.num_hidden_layers
    adapted = get_peft_model(model, peft_config)
    adapted_modules = [name.removesuffix(".lora_A") for name, _ in adapted.named_modules() if name.endswith(".lora_A")]
    assert adapted_modules, "LoRA targets match no module"
    assert not [name for name in adapted_modules if archs.is_vision_tower(name) or "merger" in name]
    # all of them inside the language model (projectors included in what stays out) ...
    outside = [name for name in adapted_modules if not name.startswith(f"base_model.model.{decoder_name}.")]
    assert not outside, outside
    targets = recipe.model_args.lora_target_modules
    if isinstance(targets, list):  # ... and every listed projection of every decoder layer adapted
        assert sorted(adapted_modules) == sorted(
            f"base_model.model.{decoder_name}.{name}" for name, _ in decoder.named_modules()
            if name.rsplit(".", 1)[-1] in targets), "a target projection of the language model was left out"
        assert len(adapted_modules) == layers * len(targets)


def test_unknown_key_is_named_with_the_file_and_a_suggestion(tmp_path):
    path = write(tmp_path, REAL_SFT.read_text() + "learning_rat: 1.0e-4\n")
    with pytest.raises(RecipeError, match=r"recipe\.yaml: unknown key `learning_rat`; did you mean `learning_rate`"):
        parse_recipe(path)


def test_stale_key_points_to_its_replacement(tmp_path):
    path = write(tmp_path, REAL_SFT.read_text().replace("dtype: bfloat16", "torch_dtype: bfloat16"))
    with pytest.raises(RecipeError, match="unknown key `torch_dtype`; it was renamed to `dtype`"):
        parse_recipe(path)


@pytest.mark.parametrize("line, key", [
    ("learning_rate: fast", "learning_rate"),
    ("lora_r: [8, 16]", "lora_r"),
    ("max_steps: null", "max_steps"),
    ("use_peft: maybe", "use_peft"),
    ("lr_scheduler_type: {a: 1}", "lr_scheduler_type"),
])
def test_wrong_type_names_the_key(tmp_path, line, key):
    path = write(tmp_path, f"{TINY_SFT.read_text()}\n{line}\n")
    with pytest.raises(RecipeError, match=key):
        parse_recipe(path)


def test_key_of_another_method_is_rejected(tmp_path):
    path = write(tmp_path, TINY_SFT.read_text() + "beta: 0.1\n")
    with pytest.raises(RecipeError, match="unknown key `beta`"):
        parse_recipe(path)


def test_overrides_win_over_the_yaml():
    recipe = parse_recipe(TINY_SFT, ["--learning_rate", "3e-5", "--max_steps=7", "--assistant_only_loss", "false",
                                     "--no_model_card"])
    assert (recipe.training_args.learning_rate, recipe.training_args.max_steps) == (3e-5, 7)
    assert recipe.training_args.assistant_only_loss is False and recipe.script_args.model_card is False
    recipe = parse_recipe(TINY_SFT, {"dataset_path": "elsewhere", "lora_target_modules": ["q_proj", "v_proj"],
                                     "max_length": None})
    assert recipe.script_args.dataset_path == "elsewhere" and recipe.training_args.max_length is None
    assert recipe.model_args.lora_target_modules == ["q_proj", "v_proj"]


@pytest.mark.parametrize("override", [["--learnin_rate", "1"], ["--learning", "1"], {"bogus": 1}])
def test_unknown_override_is_named(override):
    key = next(iter(override)) if isinstance(override, dict) else override[0].lstrip("-")
    with pytest.raises(RecipeError, match=f"override: unknown key `{key}`"):
        parse_recipe(TINY_SFT, override)


def test_method_override_picks_the_method_config_and_dataset_kind():
    recipe = parse_recipe(TINY_SFT, ["--method", "prm"])
    assert recipe.method == "prm" and recipe.script_args.dataset_kind == "prm-sft"
    with pytest.raises(RecipeError, match="unknown key `assistant_only_loss`"):
        parse_recipe(TINY_SFT, ["--method=dpo"])


def test_dataset_kind_must_suit_the_method():
    with pytest.raises(RecipeError, match="dataset_kind 'critique-pref' cannot train method 'sft'"):
        parse_recipe(TINY_SFT, {"dataset_kind": "critique-pref"})


def test_model_is_required():
    with pytest.raises(RecipeError, match="`model_name_or_path` is required"):
        parse_recipe(TINY_SFT, {"model_name_or_path": None})


def test_a_stepcritic_model_name_is_checked_when_the_recipe_is_read():
    with pytest.raises(RecipeError, match="override: `model_name_or_path`: unknown model source 'stepcritic:tiny/gp"):
        parse_recipe(TINY_SFT, {"model_name_or_path": "stepcritic:tiny/gpt"})
    with pytest.raises(RecipeError, match="no vision tower"):
        parse_recipe(TINY_SFT, {"model_name_or_path": "stepcritic:tiny/text,vision_pretrain_steps=10"})
    with pytest.raises(RecipeError, match="'steps=3' is not an option"):
        parse_recipe(TINY_SFT, ["--model_name_or_path", "stepcritic:tiny/llava,steps=3"])
    recipe = parse_recipe(TINY_SFT, ["--model_name_or_path", "stepcritic:tiny/llava-medium,base_pretrain_steps=6"])
    source = model_source(recipe.model_args.model_name_or_path)
    assert (source.arch, source.size, source.vision_pretrain_steps, source.base_pretrain_steps) == (
        "llava", "medium", 0, 6)


@pytest.mark.parametrize(("key", "hint"), [
    ("tiny_model", "stepcritic:tiny/base"), ("tiny_model_lm", "stepcritic:tiny/base-smollm2"),
    ("tiny_vision_pretrain_steps", "stepcritic:tiny/ARCH,vision_pretrain_steps=N")])
def test_the_tiny_critic_keys_point_at_its_model_name(tmp_path, key, hint):
    with pytest.raises(RecipeError, match=f"unknown key `{key}`; did you mean `model_name_or_path: {hint}"):
        parse_recipe(write(tmp_path, f"method: prm\ndataset_path: data/x\n{key}: true\n"))


def test_missing_or_unknown_method_is_named(tmp_path):
    with pytest.raises(RecipeError, match="recipe.yaml: `method` must be one of"):
        parse_recipe(write(tmp_path, "dataset_path: data/x\n"))
    with pytest.raises(RecipeError, match="got 'ppo'"):
        parse_recipe(TINY_SFT, ["--method", "ppo"])


def test_cpu_host_defaults_to_cpu_training(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("the CPU defaults apply only without CUDA")
    text = "".join(line + "\n" for line in TINY_SFT.read_text().splitlines()
                   if not line.startswith(("use_cpu:", "bf16:")))
    recipe = parse_recipe(write(tmp_path, text))
    assert recipe.training_args.use_cpu and not recipe.training_args.bf16
    assert len(recipe.adjustments) == 2
    kept = parse_recipe(REAL_SFT)  # an explicit bf16 stays; only use_cpu is filled in
    assert kept.training_args.bf16 and kept.training_args.use_cpu and len(kept.adjustments) == 1


def _launch_lines(readme: str) -> str:
    """The README's ```bash blocks, continuation lines joined."""
    return "\n".join(re.findall(r"^```bash\n(.*?)^```", readme, flags=re.S | re.M)).replace("\\\n", " ")


@pytest.mark.parametrize("folder", sorted({p.parent for p in RECIPES}), ids=lambda p: p.name)
def test_every_folder_shows_how_to_launch_each_recipe(folder):
    """Each recipe of the folder is the --config of a command in its README, and every recipe and launcher config
    a command names exists."""
    launches = _launch_lines((folder / "README.md").read_text())
    configs = {c if c.endswith(".yaml") else f"recipes/{c}.yaml" for c in re.findall(r"--config[ =](\S+)", launches)}
    root = RECIPES_DIR.parent
    assert {f"recipes/{folder.name}/{r.name}" for r in folder.glob("*.yaml")} <= configs, folder.name
    for path in configs | set(re.findall(r"--config_file[ =](\S+)", launches)):
        assert (root / path).is_file(), f"{folder.name}/README.md launches {path}, which does not exist"


def test_the_launcher_readme_describes_every_config():
    readme = (ACCELERATE_DIR / "README.md").read_text()
    described = set(re.findall(r"^\| `([\w.-]+\.yaml)` \|", readme, flags=re.M))
    assert described == {p.name for p in ACCELERATE_CONFIGS}
    for path in re.findall(r"--config_file[ =](\S+)", _launch_lines(readme)):
        assert (RECIPES_DIR.parent / path).is_file(), path


@pytest.mark.parametrize("path", ACCELERATE_CONFIGS, ids=lambda p: p.name)
def test_accelerate_config_is_complete(path):
    from accelerate.commands.config.config_args import load_config_from_file

    raw = yaml.safe_load(path.read_text())
    for key in ("compute_environment", "distributed_type", "num_machines", "num_processes", "machine_rank",
                "mixed_precision", "use_cpu"):
        assert key in raw, f"{path.name} lacks {key}"
    if raw["distributed_type"] == "DEEPSPEED":
        assert raw["deepspeed_config"]["zero_stage"] in (2, 3)
    config = load_config_from_file(str(path))  # accelerate's own reader accepts it
    assert config.num_processes == raw["num_processes"]


def test_accelerate_configs_match_their_names():
    load = {p.stem: yaml.safe_load(p.read_text()) for p in ACCELERATE_CONFIGS}
    assert set(load) >= {"single_gpu", "multi_gpu", "zero2", "zero3", "zero3_offload", "multi_node", "cpu_zero2"}
    assert load["multi_gpu"]["distributed_type"] == "MULTI_GPU" and load["multi_gpu"]["num_processes"] == 8
    assert load["zero3_offload"]["deepspeed_config"]["offload_param_device"] == "cpu"
    assert load["zero3_offload"]["deepspeed_config"]["offload_optimizer_device"] == "cpu"
    node = load["multi_node"]
    assert (node["num_machines"], node["num_processes"], node["deepspeed_config"]["zero_stage"]) == (2, 16, 3)
    assert "main_process_ip" in node
    cpu = load["cpu_zero2"]
    assert cpu["use_cpu"] is True and cpu["deepspeed_config"]["zero_stage"] == 2


def test_a_deepspeed_launch_overrides_use_cpu():
    """`use_cpu: true` under a DeepSpeed launch would make the Trainer drop DeepSpeed silently."""
    from stepcritic.train.config import _launcher_overrides

    argv, notes = _launcher_overrides({"ACCELERATE_USE_DEEPSPEED": "true"})
    assert argv == ["--use_cpu=false"] and "DeepSpeed" in notes[0]
    assert _launcher_overrides({}) == ([], [])
    assert _launcher_overrides({"ACCELERATE_USE_DEEPSPEED": "false"}) == ([], [])
