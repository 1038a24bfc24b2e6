"""Text-only models, end to end: the tiny text critic builds and caches offline, trains prm, critique-sft and reward
on datasets built from text-only chains (ProcessBench's layout, through `data ingest` and `data build`), and its
trained PRM and reward model score text-only chains through the `prm:` and `reward:` judges. A text model meets
images, or rows ask for images they lack: one line, before any weights load."""

import json
import os

import pytest
from text_chains import ingest_and_build, sums

from stepcritic.cli import main as stepcritic
from stepcritic.train.config import parse_recipe

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT_RECIPES = os.path.join(REPO, "recipes", "tiny-text")
RUN = dict(report_to="none", disable_tqdm=True, logging_steps=1000, save_strategy="no", dataloader_num_workers=0)

# conftest.py: this module's own tiny-model cache, and one torch thread
pytestmark = pytest.mark.usefixtures("private_tiny_cache", "one_torch_thread")


@pytest.fixture(scope="module")
def text_data(tmp_path_factory):
    return ingest_and_build(sums(), tmp_path_factory.mktemp("text"),
                            ("prm-sft", "critique-sft", "outcome-rm", "critique-pref"))


@pytest.fixture(scope="module")
def pictured(tmp_path_factory):
    """A prm-sft dataset whose chains have images (the synthetic generator's)."""
    root = tmp_path_factory.mktemp("pictured")
    assert stepcritic(["data", "synth", "--n", "8", "--seed", "0", "--out", str(root / "chains")]) == 0
    assert stepcritic(["data", "build", "--chains", str(root / "chains"), "--kind", "prm-sft",
                       "--out", str(root / "prm-sft"), "--test-fraction", "0.25"]) == 0
    return str(root / "chains"), str(root / "prm-sft")


def chains_of(path):
    from stepcritic.data_prep.schema import load_chains

    return [dict(chain) for chain in load_chains(path)]


def train_text(recipe: str, data: str, out, **overrides) -> dict:
    from stepcritic.train.run import train

    return train(parse_recipe(os.path.join(TEXT_RECIPES, recipe),
                              dict(dataset_path=data, output_dir=str(out), **RUN, **overrides)))


@pytest.fixture(scope="module")
def trained(text_data, tmp_path_factory):
    """{recipe: output folder} of the tiny text critic trained 3 steps per method."""
    _, built = text_data
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for recipe, kind in (("prm", "prm-sft"), ("critique-sft", "critique-sft"), ("reward", "outcome-rm")):
        metrics = train_text(f"{recipe}.yaml", built[kind], root / recipe, max_steps=3,
                             per_device_train_batch_size=4)
        assert metrics["train_loss"] == metrics["train_loss"]  # not NaN
        out[recipe] = str(root / recipe)
    return out


# ----------------------------------------------------------------------------- the tiny text critic

def test_the_tiny_text_critic_is_the_llava_language_model_alone():
    from stepcritic.train.modality import TextProcessor, config_reads_images
    from stepcritic.train.tiny.model import build_config

    text_config, processor = build_config("text")
    llava_config, llava_processor = build_config("llava")
    assert isinstance(processor, TextProcessor) and not config_reads_images(text_config)
    assert config_reads_images(llava_config)
    sizes = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "vocab_size")
    assert {k: getattr(text_config, k) for k in sizes} == {k: getattr(llava_config.text_config, k) for k in sizes}
    assert processor.tokenizer.get_vocab() == llava_processor.tokenizer.get_vocab()
    assert processor.chat_template == llava_processor.chat_template


def test_the_tiny_text_critic_is_cached_under_its_own_key():
    from transformers import AutoConfig

    from stepcritic.train.tiny.cache import tiny_critic_path

    path = tiny_critic_path(arch="text")
    assert os.path.basename(path).startswith("tiny-text-") and tiny_critic_path(arch="text") == path
    assert AutoConfig.from_pretrained(path).model_type == "qwen2"
    assert not os.path.exists(os.path.join(path, "processor_config.json"))  # a plain causal-LM checkpoint
    with pytest.raises(ValueError, match="no vision tower"):
        parse_recipe(os.path.join(TEXT_RECIPES, "prm.yaml"),
                     {"model_name_or_path": "stepcritic:tiny/text,vision_pretrain_steps=10"})


def test_the_processor_of_a_text_model_joins_parts_and_refuses_images():
    from stepcritic.train.modality import ModalityMismatch
    from stepcritic.train.tiny.model import build_config

    processor = build_config("text")[1]
    parts = [{"role": "user", "content": [{"type": "text", "text": "What is 2 + 3?"}]},
             {"role": "assistant", "content": [{"type": "text", "text": "+"}]}]
    plain = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "+"}]
    assert processor.apply_chat_template(parts, tokenize=False) == processor.apply_chat_template(plain, tokenize=False)
    with pytest.raises(ModalityMismatch, match="reads text only"):
        processor.apply_chat_template([{"role": "user", "content": [{"type": "image"}]}], tokenize=False)
    with pytest.raises(ModalityMismatch, match="1 image"):
        processor(text=["x"], images=[object()])


# ----------------------------------------------------------------------------- training and judging

def test_trains_prm_critique_sft_and_reward_on_text_only_data(trained):
    for recipe, folder in trained.items():
        config = json.load(open(os.path.join(folder, "config.json")))
        assert config["model_type"] == "qwen2" and "vision_config" not in config, recipe
        assert os.path.isfile(os.path.join(folder, "tokenizer.json")), recipe
    assert os.path.isfile(os.path.join(trained["reward"], "value_head.safetensors"))


def test_trained_text_critics_score_text_only_chains(trained, text_data):
    from stepcritic.train.scoring import PRMScorer, RewardScorer

    chains = chains_of(text_data[0])[:6]
    p_correct = PRMScorer.from_pretrained(trained["prm"]).score(chains)
    assert [len(row) for row in p_correct] == [len(c["steps"]) for c in chains]
    assert all(0 < p < 1 for row in p_correct for p in row)
    rewards = RewardScorer.from_pretrained(trained["reward"]).score(chains)
    assert len(rewards) == len(chains) and len(set(rewards)) > 1


def test_the_prm_and_reward_judges_evaluate_text_only_chains(trained, text_data, tmp_path):
    chains, _ = text_data
    assert stepcritic(["eval", "--chains", chains, "--judge", f"prm:{trained['prm']}",
                       "--judge", f"reward:{trained['reward']}", "--out", str(tmp_path), "--tasks", "critique",
                       "choice", "--no-progress"]) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert json.dumps(metrics).count("prm:") and json.dumps(metrics).count("reward:")


def test_the_critique_critic_writes_through_the_hf_judge(trained, text_data):
    from stepcritic.eval.judges.registry import make_judge

    chains = chains_of(text_data[0])[:2]
    critiques = make_judge(f"hf:{trained['critique-sft']},mode=critique,max_new_tokens=8").judge_batch(chains)
    assert [c.chain_id for c in critiques] == [c["chain_id"] for c in chains]
    assert not any(c.failed for c in critiques)


# ----------------------------------------------------------------------------- modality errors

def test_a_text_model_refuses_a_dataset_with_images_in_one_line(pictured, monkeypatch, capsys):
    from stepcritic.train import common
    from stepcritic.train.modality import ModalityMismatch
    from stepcritic.train.run import train

    _, data = pictured
    monkeypatch.setattr(common, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(ModalityMismatch, match=rf"dataset_path '{data}' \[train\] holds \d+ rows with images "
                                               r"\(first: row 0; build_stats.json: 8 of 8 chains have an image\), "
                                               r"but the model 'stepcritic:tiny/text' reads text only"):
        train(parse_recipe(os.path.join(TEXT_RECIPES, "prm.yaml"), dict(dataset_path=data)))
    code = stepcritic(["train", "--config", "tiny-text/prm", "--dataset_path", data, "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "reads text only" in err


def test_a_text_judge_refuses_a_chain_with_an_image(trained, pictured):
    from stepcritic.train.modality import ModalityMismatch
    from stepcritic.train.scoring import PRMScorer

    chain = chains_of(pictured[0])[0]
    with pytest.raises(ModalityMismatch) as caught:
        PRMScorer.from_pretrained(trained["prm"]).score([chain])
    assert chain["chain_id"] in str(caught.value) and "reads text only" in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1


def test_rows_whose_image_parts_have_no_image_are_refused(text_data, tmp_path):
    from datasets import load_from_disk

    from stepcritic.train.modality import ModalityMismatch
    from stepcritic.train.preflight import check_modality

    _, built = text_data
    data = load_from_disk(built["prm-sft"])

    def add_placeholder(row):
        first = row["messages"][0]
        first["content"] = [{"type": "image", "text": None}, *first["content"]]
        return row

    data["train"] = data["train"].map(add_placeholder)
    data.save_to_disk(str(tmp_path / "broken"))
    recipe = parse_recipe(os.path.join(REPO, "recipes", "tiny", "prm.yaml"),
                          dict(dataset_path=str(tmp_path / "broken")))
    shown = r"\[train\] row 0: its messages show 1 image\(s\) but the row carries 0"
    with pytest.raises(ModalityMismatch, match=shown):
        check_modality(recipe)


def test_a_vision_language_model_takes_text_only_data(text_data):
    from stepcritic.train.preflight import check_modality

    _, built = text_data
    recipe = parse_recipe(os.path.join(REPO, "recipes", "tiny", "prm.yaml"), dict(dataset_path=built["prm-sft"]))
    assert check_modality(recipe) is False  # reads images, and text-only rows are fine


def test_the_dry_run_of_a_text_recipe_says_text_only(text_data, tmp_path, capsys):
    _, built = text_data
    code = stepcritic(["train", "--config", "tiny-text/reward", "--dataset_path", built["outcome-rm"],
                       "--output_dir", str(tmp_path / "run"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and "text only, no vision tower" in out and "dry run: ok" in out


def test_a_hub_text_recipe_is_known_text_only_offline(pictured, tmp_path, monkeypatch, capsys):
    """Qwen2.5-1.5B not in the local cache: archs knows its family, so the dry run still refuses pictured data."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    code = stepcritic(["train", "--config", "qwen2.5-1.5b/prm-lora", "--dataset_path", pictured[1],
                       "--output_dir", str(tmp_path / "run"), "--report_to", "none", "--dry-run"])  # logger aside
    captured = capsys.readouterr()
    assert code == 2 and "text only, no vision tower" in captured.out
    (line,) = captured.err.strip().splitlines()
    assert "'Qwen/Qwen2.5-1.5B-Instruct' reads text only" in line
