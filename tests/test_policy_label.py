"""`stepcritic data label`: Monte-Carlo and binary-search step labels with exact expected values (a completer that
reaches the gold answer iff the prefix has no wrong step), resuming after a kill, consensus filtering, bad input, true
labels kept from the labeller, and the tiny model as completer."""

import json

import policy_fakes
import pytest
from datasets import load_from_disk
from helpers import chain, step
from policy_fakes import fresh_fakes  # noqa: F401  (autouse: every test starts with no prompts counted)

from stepcritic.cli import main as stepcritic
from stepcritic.data_prep import schema

OK = ["The image shows one circle.", "The circle is red.", "So the answer is red."]
BAD = ["The image shows one circle.", "The circle is blue (wrong).", "So the answer is blue."]
MID = ["A wrong first claim.", "The circle is red.", "So the answer is red."]


def records(flip: bool = False) -> list[dict]:
    """Three chains whose own labels say nothing of where the completer goes wrong (all correct, or all flipped, with
    explanations the labeller must never show)."""
    def steps(texts):
        return [step(t, correct=flip, explanations=["SECRET explanation"]) for t in texts]

    return [chain("c-ok", group_id="g0", steps=steps(OK), answer="red"),
            chain("c-bad", group_id="g1", steps=steps(BAD), answer="blue", answer_correct=False),
            chain("c-mid", group_id="g2", steps=steps(MID), answer="red")]


@pytest.fixture
def chains_dir(tmp_path):
    path = str(tmp_path / "chains")
    schema.save_chains([schema.validate_chain(c, c["chain_id"]) for c in records()], path)
    return path


def label(chains_dir, out, *extra, completer="py:policy_fakes.ReachesGold") -> int:
    return stepcritic(["data", "label", "--chains", chains_dir, "--completer", completer, "--out", str(out), *extra])


def labelled(out) -> dict:
    return {c["chain_id"]: c for c in schema.load_chains(str(out))}


def soft(c) -> list:
    return [s["soft_label"] for s in c["steps"]]


def hard(c) -> list:
    return [s["correct"] for s in c["steps"]]


def test_mc_labels_are_the_share_of_rollouts_reaching_the_gold_answer(chains_dir, tmp_path, capsys):
    out = tmp_path / "mc"
    assert label(chains_dir, out, "--method", "mc", "--rollouts", "4") == 0
    got = labelled(out)
    # the last prefix is the whole chain: its own answer says, with no rollout
    assert soft(got["c-ok"]) == [1.0, 1.0, 1.0] and hard(got["c-ok"]) == [True, True, True]
    assert soft(got["c-bad"]) == [1.0, 0.0, 0.0] and hard(got["c-bad"]) == [True, False, False]
    assert soft(got["c-mid"]) == [0.0, 0.0, 1.0] and hard(got["c-mid"]) == [False, False, True]
    assert got["c-bad"]["chain_correct"] is False and got["c-ok"]["chain_correct"] is True
    meta = json.loads(got["c-bad"]["meta"])
    assert meta["rollout_labels"]["rollouts"] == [4, 4, 0] and meta["rollout_labels"]["first_error"] == 1
    # the chains' own labels moved where no build reads them
    assert meta["true_labels"]["correct"] == [False, False, False]
    assert meta["true_labels"]["explanations"] == [["SECRET explanation"]] * 3
    assert all(s["explanations"] == [] for c in got.values() for s in c["steps"])
    stats = json.load(open(out / "stats.json"))
    # c-ok and c-bad share their first prefix (same image, question and step): its rollouts are asked once
    assert stats["rollouts"]["total"] == 24 and stats["rollouts"]["asked"] == 20 == len(policy_fakes.ASKED)
    assert stats["rollouts"]["per_chain"] == 8 and stats["rollouts"]["per_step"] == round(24 / 9, 3)
    assert stats["method"] == "mc" and stats["settings"]["rollouts"] == 4 and stats["completer_fingerprint"]
    assert stats["true_labels_moved"] == 3 and "wall_seconds" in stats
    card = (out / "README.md").read_text()
    assert stats["completer_fingerprint"] in card and "Math-Shepherd" in card
    assert "labelled chains=3 of 3, steps=9 (4 incorrect), rollouts=24" in capsys.readouterr().out


def test_soft_labels_and_prm_rows_read_them_unchanged(chains_dir, tmp_path):
    out = tmp_path / "half"
    assert label(chains_dir, out, "--rollouts", "4", completer="py:policy_fakes.HalfTheTime") == 0
    got = labelled(out)
    assert soft(got["c-ok"]) == [0.5, 0.5, 1.0] and soft(got["c-mid"]) == [0.0, 0.0, 1.0]
    built = tmp_path / "prm"
    assert stepcritic(["data", "build", "--chains", str(out), "--kind", "prm-sft", "--step-targets", "soft",
                       "--out", str(built), "--test-fraction", "0.3"]) == 0
    rows = {r["chain_id"]: r for split in load_from_disk(str(built)).values() for r in split}
    assert rows["c-ok"]["step_targets"] == [0.5, 0.5, 1.0]
    assert rows["c-bad"]["step_targets"] == [0.5, 0.0, 0.0]


def test_stop_after_zero_and_max_steps(chains_dir, tmp_path):
    out = tmp_path / "stop"
    assert label(chains_dir, out, "--rollouts", "2", "--stop-after-zero") == 0
    got = labelled(out)
    assert soft(got["c-mid"]) == [0.0, None, None] and hard(got["c-mid"]) == [False, False, False]
    assert json.loads(got["c-mid"]["meta"])["rollout_labels"]["rollouts"] == [2, 0, 0]
    merged = tmp_path / "merged"
    assert label(chains_dir, merged, "--rollouts", "2", "--max-steps", "2") == 0
    got = labelled(merged)
    assert [s["text"] for s in got["c-bad"]["steps"]] == [BAD[0], " ".join(BAD[1:])]
    assert hard(got["c-bad"]) == [True, False] and json.load(open(merged / "stats.json"))["steps_merged"] == 3


def test_binary_search_finds_the_first_wrong_step_within_its_budget(chains_dir, tmp_path):
    out = tmp_path / "binary"
    assert label(chains_dir, out, "--method", "binary", "--rollouts", "4") == 0
    got = labelled(out)
    assert hard(got["c-bad"]) == [True, False, False] and soft(got["c-bad"]) == [1.0, 0.0, None]
    assert hard(got["c-ok"]) == [True, True, True] and soft(got["c-ok"]) == [None, 1.0, 1.0]
    assert hard(got["c-mid"]) == [False, False, False]
    assert json.loads(got["c-ok"]["meta"])["rollout_labels"]["rollouts"] == [0, 4, 0]
    budget = tmp_path / "budget"
    assert label(chains_dir, budget, "--method", "binary", "--rollouts", "4", "--rollout-budget", "4") == 0
    stats = json.load(open(budget / "stats.json"))
    assert set(labelled(budget)) == {"c-ok"} and stats["left_out"]["over_budget"] == 2


def test_consensus_keeps_the_chains_whose_first_error_the_judge_agrees_with(chains_dir, tmp_path):
    out = tmp_path / "consensus"
    assert label(chains_dir, out, "--rollouts", "2", "--consensus", "always-correct") == 0
    stats = json.load(open(out / "stats.json"))
    assert set(labelled(out)) == {"c-ok"} and (stats["consensus"]["kept"], stats["consensus"]["dropped"]) == (1, 2)
    assert "1 kept, 2 dropped" in (out / "README.md").read_text()


def test_the_labeller_never_sees_the_chains_own_labels(tmp_path):
    outputs = []
    for flip in (False, True):
        path = str(tmp_path / f"chains-{flip}")
        schema.save_chains([schema.validate_chain(c, c["chain_id"]) for c in records(flip)], path)
        policy_fakes.ASKED.clear()
        assert label(path, tmp_path / f"out-{flip}", "--method", "binary", "--rollouts", "2") == 0
        asked = [json.dumps(p.messages) for p in policy_fakes.ASKED]
        assert asked and not any("SECRET" in text for text in asked)
        outputs.append((asked, {cid: (soft(c), hard(c)) for cid, c in labelled(tmp_path / f"out-{flip}").items()}))
    assert outputs[0] == outputs[1]


def test_a_killed_run_asks_again_only_for_what_was_not_saved(chains_dir, tmp_path):
    out = tmp_path / "out"
    completer = "py:policy_fakes.ReachesGold,batch_size=3"
    policy_fakes.STOP_AFTER.append(7)  # killed in the third batch of the only round: 6 rollouts saved
    assert label(chains_dir, out, "--rollouts", "4", completer=completer) == 130
    assert len(policy_fakes.ASKED) == 7
    policy_fakes.STOP_AFTER.clear()
    policy_fakes.ASKED.clear()
    assert label(chains_dir, out, "--rollouts", "4", completer=completer) == 0
    assert len(policy_fakes.ASKED) == 20 - 6
    stats = json.load(open(out / "stats.json"))
    assert (stats["rollouts"]["asked"], stats["rollouts"]["cached"]) == (14, 6)
    assert soft(labelled(out)["c-bad"]) == [1.0, 0.0, 0.0]
    policy_fakes.ASKED.clear()
    assert label(chains_dir, out, "--rollouts", "4", "--overwrite", completer=completer) == 0
    assert policy_fakes.ASKED == []


def test_bad_input_is_one_line(chains_dir, tmp_path, capsys):
    no_gold = tmp_path / "no-gold.jsonl"
    no_gold.write_text(json.dumps(dict(chain("a", reference_answer=None), image=None)) + "\n")
    assert label(str(no_gold), tmp_path / "o1") == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{no_gold}:1, field 'reference_answer'" in err
    broken = [dict(schema.validate_chain(c, c["chain_id"])) for c in records()]
    broken[1]["image"] = {"bytes": b"not an image", "path": None}
    schema.save_chains(broken, str(tmp_path / "broken"))
    assert label(str(tmp_path / "broken"), tmp_path / "o2") == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "c-bad, field 'image': image cannot be decoded" in err
    for completer, said in ((f"hf:{tmp_path}/no-such-model", "no-such-model"),
                            ("openai:gpt-4o", "cannot go on writing"), ("random,rate=0.5", "does not generate")):
        assert label(chains_dir, tmp_path / "o3", completer=completer) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and said in err, err
    assert label(chains_dir, tmp_path / "o4", "--method", "binary", "--stop-after-zero") == 2
    assert "--stop-after-zero applies to --method mc" in capsys.readouterr().err


def test_the_tiny_model_as_completer(chains_dir, tmp_path):
    from stepcritic.train.tiny.cache import tiny_critic_path

    out = tmp_path / "tiny"
    assert label(chains_dir, out, "--rollouts", "1", "--max-new-tokens", "6", "--template", "policy_brief",
                 completer=f"hf:{tiny_critic_path()},batch_size=8") == 0
    stats = json.load(open(out / "stats.json"))
    assert stats["rollouts"]["total"] == 6 and stats["settings"]["max_new_tokens"] == 6
    assert all(s["soft_label"] is not None for c in labelled(out).values() for s in c["steps"])


def test_more_rollouts_added_later_are_new_draws(chains_dir, tmp_path):
    """--rollouts raised on a finished folder asks only the new continuations, and they are drawn afresh, not the
    random numbers the first run drew again (which would repeat its continuations under new keys)."""
    out = tmp_path / "more"
    assert label(chains_dir, out, "--rollouts", "1", completer="py:policy_fakes.Draws") == 0
    assert label(chains_dir, out, "--rollouts", "3", "--overwrite", completer="py:policy_fakes.Draws") == 0
    saved = [line for path in out.glob("cache/**/rollouts.jsonl") for line in path.read_text().splitlines()]
    texts = [json.loads(line)["text"] for line in saved]
    assert len(texts) == 5 * 3 and len(set(texts)) == len(texts)


def test_an_openai_compatible_server_that_continues_a_turn_is_a_completer(chains_dir, tmp_path):
    # vLLM's and SGLang's servers write on in a begun assistant turn when the request says so; OpenAI's API cannot,
    # so the spec must say it (`continues=true`), and each rollout's request carries the servers' two parameters
    from stepcritic.testing.fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        spec = f"openai:served,base_url={server.base_url}"
        assert label(chains_dir, tmp_path / "refused", "--rollouts", "1", completer=spec) == 2
        assert label(chains_dir, tmp_path / "out", "--rollouts", "1", completer=f"{spec},continues=true") == 0
    bodies = [r["body"] for r in server.requests]
    stats = json.load(open(tmp_path / "out" / "stats.json"))
    assert bodies and len(bodies) == stats["rollouts"]["asked"]  # a prefix two chains share is rolled out once
    assert all(b["continue_final_message"] is True and b["add_generation_prompt"] is False for b in bodies)
    assert all(b["messages"][-1]["role"] == "assistant" for b in bodies)  # the step prefix, written on
