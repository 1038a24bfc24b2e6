"""A judge spec naming a model folder that cannot serve it fails in one line, before the chains or any model load:
a missing folder, a folder without a model, a checkpoint of another kind than the judge reads."""

import json
import os

import helpers
import pytest

from stepcritic import cli as stepcritic_cli
from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval.judges.artifacts import checkpoint_kind, looks_local, model_folder_problem
from stepcritic.eval.runner import EvalError, build_judge
from stepcritic.train.model_card import eval_command


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working folder with chains and a `runs/` folder of checkpoints as `stepcritic train` leaves them."""
    monkeypatch.chdir(tmp_path)
    save_chains([validate_chain(c) for c in helpers.chains(2)], "chains")
    checkpoint("runs/prm", "prm", "prm-sft")
    checkpoint("runs/critic", "sft", "critique-sft")
    checkpoint("runs/verifier", "sft", "verifier-sft")
    checkpoint("runs/rm", "reward", "outcome-rm")
    return tmp_path


def checkpoint(folder: str, method: str, dataset_kind: str, card: bool = True) -> None:
    os.makedirs(folder)
    config = {"model_type": "llava"} | ({"stepcritic_prm_notes": False} if method == "prm" else {})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    if method == "reward":
        with open(os.path.join(folder, "reward_config.json"), "w") as f:
            json.dump({"kind": "vlm-reward"}, f)
    if card:  # the header and the "Evaluate it" line of `train.model_card`
        with open(os.path.join(folder, "README.md"), "w") as f:
            f.write(f"# StepCritic critic: `{method}`\n\n## Evaluate it\n\n```bash\n"
                    f"{eval_command(method, folder, dataset_kind)}\n```\n")


def eval_error(spec: str, capsys, monkeypatch) -> str:
    def no_chains(*args, **kwargs):
        raise AssertionError("the chains were loaded before the judge spec was checked")

    monkeypatch.setattr("stepcritic.data_prep.schema.load_chains", no_chains)
    code = stepcritic_cli.main(["eval", "--chains", "chains", "--judge", spec, "--out", "out", "--no-progress"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("stepcritic eval: error: "), err
    assert "Traceback" not in err[0] and "huggingface" not in err[0].lower()
    return err[0]


@pytest.mark.parametrize("spec", ["prm:runs/nope", "reward:runs/nope", "hf:runs/nope,mode=critique",
                                  "prm:./nope", "prm:~/no-such-stepcritic-run", "text-only:prm:runs/nope"])
def test_a_missing_local_folder_is_not_found_before_the_chains_load(spec, workdir, capsys, monkeypatch):
    target = spec.split(":")[-1].split(",")[0]
    assert f"model folder {target} not found" in eval_error(spec, capsys, monkeypatch)


def test_a_home_folder_written_with_a_tilde_is_named_with_its_full_path(workdir, monkeypatch):
    monkeypatch.setenv("HOME", str(workdir))
    assert model_folder_problem("prm", "~/runs/prm") == (f"model folder ~/runs/prm not found; write it as "
                                                         f"prm:{workdir}/runs/prm (the shell does not expand ~ "
                                                         "inside a spec)")


def test_reward_on_a_folder_without_reward_config_says_what_it_is(workdir, capsys, monkeypatch):
    err = eval_error("reward:runs/prm", capsys, monkeypatch)
    assert err.endswith("runs/prm holds no reward_config.json: it is a process reward model (PRM) (its model card "
                        "README.md: method prm); judge it with prm:runs/prm")
    os.makedirs("runs/plain")
    with open("runs/plain/config.json", "w") as f:
        f.write("{}")
    assert "not an outcome reward model saved by `stepcritic train`" in eval_error("reward:runs/plain", capsys,
                                                                                   monkeypatch)


@pytest.mark.parametrize("spec, fits", [
    ("prm:runs/critic", "hf:runs/critic,mode=critique"),
    ("prm:runs/verifier", "hf:runs/verifier,mode=verifier"),
    ("prm:runs/rm", "reward:runs/rm"),
    ("hf:runs/prm", "prm:runs/prm"),
    ("hf:runs/rm,mode=critique", "reward:runs/rm"),
])
def test_a_checkpoint_of_another_kind_is_refused_with_the_judge_that_reads_it(spec, fits, workdir, capsys,
                                                                              monkeypatch):
    err = eval_error(spec, capsys, monkeypatch)
    assert "which the " in err and err.endswith(f"judge it with {fits}")


def test_a_prm_without_a_model_card_is_known_by_its_config(workdir):
    checkpoint("runs/bare-prm", "prm", "prm-sft", card=False)
    assert checkpoint_kind("runs/bare-prm") == ("prm", "", "its config.json was saved by PRM training")
    with pytest.raises(EvalError, match="is a process reward model .* judge it with prm:runs/bare-prm"):
        build_judge("hf:runs/bare-prm")


def test_a_run_folder_with_only_checkpoints_names_the_latest(workdir, capsys, monkeypatch):
    for step in (50, 100, 8):
        os.makedirs(f"runs/unfinished/checkpoint-{step}")
    err = eval_error("prm:runs/unfinished", capsys, monkeypatch)
    assert err.endswith("runs/unfinished holds no model (no config.json or adapter_config.json); its latest "
                        "checkpoint is runs/unfinished/checkpoint-100")


def test_matching_checkpoints_and_hub_ids_build(workdir):
    for spec in ("prm:runs/prm", "reward:runs/rm", "hf:runs/critic", "hf:runs/verifier,mode=verifier",
                 "text-only:prm:runs/prm", "hf:SomeOrg/some-model", "prm:some-model"):
        build_judge(spec).close()  # nothing is loaded: a Hub id is only checked when the model loads


def test_what_looks_like_a_local_folder(workdir):
    assert all(looks_local(t) for t in ("runs/nope", "./x", "../x", "~/x", "/abs/x", "a/b/c", "runs"))
    assert not any(looks_local(t) for t in ("SomeOrg/some-model", "gpt2"))


@pytest.mark.parametrize("method, dataset_kind, kind, options", [
    ("prm", "prm-sft", "prm", ""), ("reward", "outcome-rm", "reward", ""),
    ("sft", "critique-sft", "hf", ",mode=critique"), ("sft", "verifier-sft", "hf", ",mode=verifier"),
    ("dpo", "critique-pref", "hf", ",mode=critique"), ("grpo", "critique-sft", "hf", ",mode=critique"),
])
def test_the_model_card_of_every_method_names_the_judge_kind_that_reads_it(method, dataset_kind, kind, options,
                                                                           tmp_path):
    folder = str(tmp_path / "run")
    checkpoint(folder, method, dataset_kind)
    os.remove(os.path.join(folder, "config.json"))  # the card alone tells
    if method == "reward":
        os.remove(os.path.join(folder, "reward_config.json"))
    assert checkpoint_kind(folder)[:2] == (kind, options)
