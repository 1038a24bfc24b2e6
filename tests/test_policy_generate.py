"""`stepcritic generate`: a policy's chains as a chains folder, resumed after a kill, on test doubles and on the tiny
model."""

import json

import policy_fakes
import pytest
from helpers import chain, chains
from policy_fakes import fresh_fakes  # noqa: F401  (autouse: every test starts with no prompts counted)

from stepcritic.cli import main as stepcritic
from stepcritic.data_prep import schema
from stepcritic.policy.generate import read_sample


@pytest.fixture
def questions(tmp_path):
    path = str(tmp_path / "chains")
    schema.save_chains([schema.validate_chain(c, c["chain_id"]) for c in chains(6)], path)
    return path


def run(*argv) -> int:
    return stepcritic(["generate", *argv])


def test_read_sample():
    assert read_sample("Step 1: The circle is red.\nStep 2: So the answer is red.") == (
        ["The circle is red.", "So the answer is red."], "red")
    assert read_sample("The circle is red.\nFinal answer: red") == (["The circle is red."], "red")
    assert read_sample("The circle is red.") == (["The circle is red."], None)
    assert read_sample("") == ([], None)


def test_chains_grouped_by_question_with_outcome_labels(questions, tmp_path, capsys):
    out = str(tmp_path / "out")
    assert run("--policy", "py:policy_fakes.FakePolicy", "--chains", questions, "--samples", "4", "--out", out) == 0
    line = capsys.readouterr().out
    assert "questions=3, samples=12, parsed=6, unparsed=6" in line
    got = list(schema.load_chains(out))
    assert len(got) == 9  # the blank samples make no chain
    by_group = {}
    for c in got:
        by_group.setdefault(c["group_id"], []).append(c)
    assert set(by_group) == {"g0", "g1", "g2"} and all(len(g) == 3 for g in by_group.values())
    first = {c["chain_id"]: c for c in by_group["g0"]}
    right, wrong, silent = (first[f"policy-g0-s{k}"] for k in range(3))
    assert [s["text"] for s in right["steps"]] == ["The circle is red.", "So the answer is red."]
    assert (right["final_answer"], right["answer_correct"]) == ("red", True)
    assert (wrong["final_answer"], wrong["answer_correct"]) == ("blue", False)
    assert (silent["final_answer"], silent["answer_correct"]) == (None, False)
    assert all(s["correct"] is None for c in got for s in c["steps"])  # no step label: that is `data label`'s
    meta = json.loads(right["meta"])
    assert meta["sampling"]["samples"] == 4 and meta["sampling"]["temperature"] == 1.0 and meta["policy_fingerprint"]
    assert right["image"] is not None and right["question"] == "What colour is the shape?"
    stats = json.load(open(f"{out}/stats.json"))
    assert (stats["questions"], stats["samples"], stats["parsed"], stats["blank"]) == (3, 12, 6, 3)
    assert "policy_fingerprint" in stats and stats["policy_fingerprint"] in open(f"{out}/README.md").read()


def test_a_killed_run_asks_again_only_for_what_was_not_saved(questions, tmp_path):
    out = str(tmp_path / "out")
    argv = ["--policy", "py:policy_fakes.FakePolicy,batch_size=2", "--chains", questions, "--samples", "4",
            "--out", out]
    policy_fakes.STOP_AFTER.append(5)  # killed while the third batch is asked: two batches (4 samples) saved
    assert run(*argv) == 130  # interrupted
    assert len(policy_fakes.ASKED) == 5
    policy_fakes.STOP_AFTER.clear()
    policy_fakes.ASKED.clear()
    assert run(*argv) == 0
    assert len(policy_fakes.ASKED) == 12 - 4
    # finished: the folder is refused without --overwrite, which asks nothing again
    assert run(*argv) == 2
    policy_fakes.ASKED.clear()
    assert run(*argv, "--overwrite") == 0 and policy_fakes.ASKED == []
    assert len(schema.load_chains(out)) == 9


def test_bad_input_is_one_line(questions, tmp_path, capsys):
    no_gold = str(tmp_path / "no-gold.jsonl")
    records = [chain("a", reference_answer=None)]
    with open(no_gold, "w") as f:
        f.write("".join(json.dumps(dict(r, image=None)) + "\n" for r in records))
    assert run("--policy", "py:policy_fakes.FakePolicy", "--chains", no_gold, "--samples", "1",
               "--out", str(tmp_path / "o1")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{no_gold}:1, field 'reference_answer'" in err
    assert run("--policy", f"hf:{tmp_path}/no-such-model", "--chains", questions, "--samples", "1",
               "--out", str(tmp_path / "o2")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no-such-model" in err
    assert run("--policy", "always-correct", "--chains", questions, "--samples", "1",
               "--out", str(tmp_path / "o3")) == 2
    assert "does not generate text" in capsys.readouterr().err


def test_the_tiny_model_as_policy(questions, tmp_path, capsys):
    from stepcritic.train.tiny.cache import tiny_critic_path

    out = str(tmp_path / "out")
    assert run("--policy", f"hf:{tiny_critic_path()},batch_size=4", "--template", "policy_brief", "--chains", questions,
               "--samples", "2", "--max-new-tokens", "12", "--out", out) == 0
    assert "questions=3, samples=6" in capsys.readouterr().out
    stats = json.load(open(f"{out}/stats.json"))
    assert stats["parsed"] + stats["unparsed"] == 6 and stats["sampling"]["max_new_tokens"] == 12


def test_more_samples_added_later_are_new_draws(questions, tmp_path):
    """--samples raised on a finished folder asks only the new samples, drawn afresh: not the first run's random
    numbers again, which would repeat its samples under new keys."""
    out = tmp_path / "more"
    argv = ["--policy", "py:policy_fakes.Draws", "--chains", questions, "--out", str(out)]
    assert run(*argv, "--samples", "1") == 0
    assert run(*argv, "--samples", "3", "--overwrite") == 0
    texts = [c["meta"]["text"] if isinstance(c["meta"], dict) else json.loads(c["meta"])["text"]
             for c in schema.load_chains(str(out), decode_images=False)]
    assert len(texts) == 3 * 3 and len(set(texts)) == len(texts)
