"""The `vllm:` code path of `generate`, `data label` and `search` on CPU: a stand-in engine (tests/fake_vllm) takes
the messages StepCritic sends vLLM and has the tiny checkpoint write with transformers, so that everything StepCritic
does around the engine (images as data URLs, continued turns, batching, options, fingerprints, token counts) runs."""

import importlib.util
import json
import os
import sys

import pytest
from helpers import chain

from stepcritic.cli import main as stepcritic
from stepcritic.data_prep import schema

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="the real vllm is installed")]
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def engine(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(HERE, "fake_vllm"))
    import vllm

    yield vllm.CALLS
    del sys.modules["vllm"]  # the tests after this one see no vllm, as the machine has none


def test_generate_label_and_search_through_the_vllm_judge(engine, tmp_path, capsys):
    from stepcritic.train.tiny.cache import tiny_critic_path

    questions = str(tmp_path / "questions")
    records = [chain(f"q{g}", group_id=f"g{g}", question=f"Question {g}: what colour is the shape?") for g in range(2)]
    schema.save_chains([schema.validate_chain(c, c["chain_id"]) for c in records], questions)
    policy = f"vllm:{tiny_critic_path()},max_model_len=4096"

    out = str(tmp_path / "chains")
    assert stepcritic(["generate", "--policy", policy, "--template", "policy_brief", "--chains", questions,
                       "--samples", "3", "--max-new-tokens", "10", "--out", out]) == 0
    assert "questions=2, samples=6" in capsys.readouterr().out
    # one engine, with the spec's options; the six prompts asked as new assistant turns
    assert engine[0][:2] == ("engine", tiny_critic_path()) and engine[0][2]["max_model_len"] == 4096, engine
    chats = engine[1:]
    assert {c[0] for c in chats} == {"chat"} and sum(c[1] for c in chats) == 6 and not any(c[2] for c in chats), engine
    assert json.load(open(f"{out}/stats.json"))["sampling"]["max_new_tokens"] == 10

    engine.clear()  # the questions' own chains have several steps: every prefix but the whole chain is rolled out
    labelled = str(tmp_path / "labelled")
    assert stepcritic(["data", "label", "--chains", questions, "--completer", policy, "--template", "policy_brief",
                       "--rollouts", "1", "--max-new-tokens", "6", "--out", labelled]) == 0
    chats = [c for c in engine if c[0] == "chat"]
    assert chats and all(continued for _, _, continued in chats), engine  # each rollout continues a begun turn
    assert json.load(open(f"{labelled}/stats.json"))["rollouts"]["total"] == sum(n for _, n, _ in chats) > 0

    engine.clear()
    searched = str(tmp_path / "search")
    assert stepcritic(["search", "--policy", policy, "--template", "policy_brief", "--critic", "always-correct",
                       "--chains", questions, "--method", "majority", "best-of-n", "--n", "2",
                       "--max-new-tokens", "8", "--out", searched, "--quiet"]) == 0
    metrics = json.load(open(f"{searched}/metrics.json"))
    assert metrics["asked"]["samples"] == 4 and set(metrics["methods"]) == {"majority", "best-of-n"}
    # compute in the policy's own tokens, as for hf: a model folder's tokenizer counts them
    assert 0 < metrics["methods"]["majority"]["2"]["tokens_per_question"] <= 2 * 8 * 1.5
