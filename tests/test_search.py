"""`stepcritic search`: each method's pick and accuracy checked exactly on a policy whose samples have known answers and
a critic whose scores are known; resumed after a kill (counted); bad input in one line; the tiny model's path."""

import json
import os
import subprocess
import sys

import pytest
import search_fakes
from helpers import chain

from stepcritic.cli import main as stepcritic
from stepcritic.data_prep import schema
from stepcritic.policy import search, search_cli
from stepcritic.rewards.core import AGGREGATES

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICY = "py:search_fakes.SearchPolicy,batch_size=2"
CRITIC = "py:search_fakes.ColourCritic"
SAMPLED = ["majority", "random", "oracle", "best-of-n", "weighted"]


@pytest.fixture(autouse=True)
def fresh_fakes():
    search_fakes.ASKED.clear()
    search_fakes.SCORED.clear()
    search_fakes.STOP_AFTER.clear()
    yield
    search_fakes.STOP_AFTER.clear()


@pytest.fixture
def questions(tmp_path):
    """Three questions (gold answer red), each worded apart so the fake policy counts its samples per question."""
    path = str(tmp_path / "questions")
    records = [chain(f"q{g}", group_id=f"g{g}", question=f"Question {g}: what colour is the shape?")
               for g in range(3)]
    schema.save_chains([schema.validate_chain(c, c["chain_id"]) for c in records], path)
    return path


def run(questions, out, *extra, methods=SAMPLED, critic=CRITIC, n="4") -> int:
    return stepcritic(["search", "--policy", POLICY, "--critic", critic, "--chains", questions, "--method", *methods,
                       "--n", n, "--out", out, "--quiet", *extra])


def accuracy(out) -> dict:
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    return {m: {int(n): p["accuracy"] for n, p in curve.items()} for m, curve in metrics["methods"].items()}


def test_every_sampled_method_picks_as_computed_by_hand(questions, tmp_path, capsys):
    out = str(tmp_path / "out")
    assert run(questions, out) == 0
    assert "searched questions=3 at N=4" in capsys.readouterr().out
    # each question's samples: blue, blue, red, green; gold red; the critic scores red 0.9, blue 0.2, green 0.3.
    # N=2 has 6 pairs: bb, br, br, bg, bg, rg. Majority of a tie shares it; the oracle is right with any red.
    assert accuracy(out) == {
        "majority": {1: 0.25, 2: 0.25, 4: 0.0}, "random": {1: 0.25, 2: 0.25, 4: 0.25},
        "oracle": {1: 0.25, 2: 0.5, 4: 1.0}, "best-of-n": {1: 0.25, 2: 0.5, 4: 1.0},
        "weighted": {1: 0.25, 2: 0.5, 4: 1.0}}
    metrics = json.load(open(f"{out}/metrics.json"))
    assert metrics["ns"] == [1, 2, 4] and metrics["questions"] == 3 and metrics["aggregate"] == "min"
    assert metrics["samples"] == {"total": 12, "answered": 12, "right": 3, "blank": 0}
    assert metrics["asked"] == {"samples": 12, "continuations": 0, "critic": 9}  # 3 distinct chains a question
    point = metrics["methods"]["weighted"]["4"]
    assert point["interval"] == [1.0, 1.0] and point["words_per_question"] == 36.0  # 4 samples of 9 words
    assert point["tokens_per_question"] is None  # a policy with no tokenizer of its own
    assert metrics["methods"]["majority"]["2"]["words_per_question"] == 18.0
    report = open(f"{out}/report.md").read()
    assert "| weighted | 0.250 [0.25, 0.25] | 0.500 [0.50, 0.50] | 1.000 [1.00, 1.00] |" in report
    assert os.path.getsize(f"{out}/{search.PLOT}") > 1000
    assert len(search_fakes.ASKED) == 12  # the critic never saw a gold answer: it asserts so for every chain


def test_weighted_sums_the_scores_of_an_answer(questions, tmp_path):
    out = str(tmp_path / "out")
    # blue's two samples at 0.5 each outweigh red's one at 0.9; the best single chain is still red
    assert run(questions, out, critic=f"{CRITIC},blue=0.5") == 0
    got = accuracy(out)
    assert got["weighted"] == {1: 0.25, 2: 0.5, 4: 0.0} and got["best-of-n"][4] == 1.0
    assert all(got["oracle"][n] >= got[m][n] for m in got for n in got[m])


def test_samples_without_an_answer_abstain_from_votes_and_are_wrong(questions, tmp_path):
    out = str(tmp_path / "out")
    assert stepcritic(["search", "--policy", "py:search_fakes.Unfinished", "--critic", CRITIC, "--chains", questions,
                       "--method", *SAMPLED, "--n", "4", "--out", out, "--quiet"]) == 0
    metrics = json.load(open(f"{out}/metrics.json"))
    assert metrics["samples"] == {"total": 12, "answered": 6, "right": 3, "blank": 3}
    got = accuracy(out)
    # blank, red, blue, red without an answer: the vote is red against blue; the critic scores the unanswered red
    # chain as high as the answered one (a tie shared), and a sum of scores goes to answers only
    assert {m: got[m][4] for m in got} == {"majority": 0.5, "random": 0.25, "oracle": 1.0, "best-of-n": 0.5,
                                           "weighted": 1.0}
    assert metrics["asked"]["critic"] == 3 * 3  # the blank sample has no step to score


def test_the_aggregate_decides_the_chain_score(questions, tmp_path):
    out = str(tmp_path / "out")
    # every answer step scores 0.95: `last` sees only it (all samples tie: a random pick), `min` the colour step
    assert run(questions, out, "--aggregate", "last", critic=f"{CRITIC},answer_step=0.95") == 0
    assert accuracy(out)["best-of-n"] == {1: 0.25, 2: 0.25, 4: 0.25}
    by = json.load(open(f"{out}/metrics.json"))["by_aggregate"]
    assert set(by) == set(AGGREGATES) and by["last"]["best-of-n"] == {"1": 0.25, "2": 0.25, "4": 0.25}
    assert by["min"]["best-of-n"] == by["prod"]["best-of-n"] == {"1": 0.25, "2": 0.5, "4": 1.0}
    # weighted under `mean`: blue's two samples at (0.2 + 0.95) / 2 sum to 1.15, red's one is 0.925; under `min`
    # blue sums to 0.4
    assert by["mean"]["weighted"]["4"] == 0.0 and by["min"]["weighted"]["4"] == 1.0
    assert "| min | best-of-n | 0.250 | 0.500 | 1.000 |" in open(f"{out}/report.md").read()
    assert search.AGGREGATES == search_cli.AGGREGATES and set(AGGREGATES) == set(search.AGGREGATES)
    assert search.METHODS == search_cli.METHODS


def test_beam_search_keeps_the_chain_the_critic_scores_high(questions, tmp_path):
    out = str(tmp_path / "out")
    assert run(questions, out, "--expansions", "2", "--beam-width", "2", "--max-steps", "3",
               methods=["best-of-n", "beam", "dvts"]) == 0
    # After the 4 samples, a question's first steps are asked in the order the runs want them, each key once:
    # beam N=4 wants 4 (blue, blue, red, green; N=1 and N=2 share its first ones), DVTS N=4's second subtree 2 more
    # (blue, blue). Beam N=4 keeps red and green and continues each twice: red wins. N=1 and N=2 see blue only.
    got = accuracy(out)
    assert got["beam"] == {1: 0.0, 2: 0.0, 4: 1.0} and got["dvts"] == {1: 0.0, 2: 0.0, 4: 0.0}
    metrics = json.load(open(f"{out}/metrics.json"))
    # beam N=4: 4 first steps of 9 words (each reply is a whole chain; its first step is kept), 4 finishes of 5
    assert metrics["methods"]["beam"]["4"]["words_per_question"] == 4 * 9 + 4 * 5
    assert metrics["asked"]["continuations"] == 3 * (6 + 4 + 4)  # + beam N=1, N=2 and DVTS finishes, shared keys
    assert metrics["search_steps"] == 2


def test_a_killed_search_asks_again_only_for_what_was_not_saved(questions, tmp_path):
    full = str(tmp_path / "full")
    assert run(questions, full, "--expansions", "2", methods=["weighted", "beam"]) == 0
    asked_once = len(search_fakes.ASKED)
    search_fakes.ASKED.clear()
    search_fakes.SCORED.clear()

    # killed at a batch's first prompt: while sampling (3 batches of 2 samples saved), then while beam search asks
    # for its first steps (the 12 samples and 2 continuations saved)
    for kill in (6, 14):
        out = str(tmp_path / f"out-{kill}")
        search_fakes.ASKED.clear()
        search_fakes.STOP_AFTER["policy"] = kill
        assert run(questions, out, "--expansions", "2", methods=["weighted", "beam"]) == 130
        assert os.listdir(out) == ["cache"] and len(search_fakes.ASKED) == kill
        search_fakes.STOP_AFTER.clear()
        assert run(questions, out, "--expansions", "2", methods=["weighted", "beam"]) == 0
        assert len(search_fakes.ASKED) == asked_once  # before the kill and after: none twice
        assert accuracy(out) == accuracy(full)

    # killed while the critic scores: what it scored is saved, the policy is asked nothing again
    out2 = str(tmp_path / "out2")
    search_fakes.ASKED.clear()
    search_fakes.SCORED.clear()
    search_fakes.STOP_AFTER["critic"] = 4
    assert run(questions, out2, methods=["weighted"]) == 130
    search_fakes.STOP_AFTER.clear()
    asked = len(search_fakes.ASKED)
    assert run(questions, out2, methods=["weighted"]) == 0
    assert len(search_fakes.ASKED) == asked and len(search_fakes.SCORED) == 9  # 4 before the kill, 5 after
    metrics = json.load(open(f"{out2}/metrics.json"))
    assert metrics["asked"]["critic"] == 9 - 4 and metrics["cached"]["critic"] == 4

    # a finished folder: refused without --overwrite; with it nothing is asked again, and another critic reuses
    # every sample
    assert run(questions, out2, methods=["weighted"]) == 2
    search_fakes.ASKED.clear()
    search_fakes.SCORED.clear()
    assert run(questions, out2, "--overwrite", methods=["weighted"]) == 0
    assert search_fakes.ASKED == [] and search_fakes.SCORED == []
    assert run(questions, out2, "--overwrite", methods=["weighted"], critic=f"{CRITIC},blue=0.5") == 0
    assert search_fakes.ASKED == [] and len(search_fakes.SCORED) == 9
    assert accuracy(out2)["weighted"][4] == 0.0


@pytest.mark.parametrize("argv, says", [
    (["--method", "majority", "vote"], "--method 'vote' is not a method"),
    (["--method", "majority", "--n", "3"], "--n must be a power of 2"),
    (["--method", "beam", "--expansions", "3"], "--expansions must be a power of 2"),
    (["--method", "best-of-n", "--aggregate", "max"], "--aggregate must be one of min mean last prod"),
    (["--method", "beam", "--critic", "py:search_fakes.ChainOnly"], "gave no step score to any partial chain"),
    (["--method", "beam", "--policy", "openai:m,base_url=http://127.0.0.1:9/v1"], "cannot go on writing a chain"),
    (["--method", "majority", "--policy", "always-correct"], "does not generate text"),
    (["--method", "majority", "--critic", "no-such-kind"], "unknown judge kind"),
])
def test_bad_input_is_one_line(questions, tmp_path, capsys, argv, says):
    flags = {"--policy": POLICY, "--critic": CRITIC, "--n": "4"}
    for flag in list(flags):
        if flag in argv:
            flags.pop(flag)
    extra = [x for kv in flags.items() for x in kv]
    assert stepcritic(["search", "--chains", questions, "--out", str(tmp_path / "o"), "--quiet", *extra, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err, err
    if not any("ChainOnly" in a for a in argv):
        assert search_fakes.ASKED == []  # refused before the policy is asked anything


def test_a_question_without_gold_answer_is_named(tmp_path, capsys):
    path = str(tmp_path / "q.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(dict(chain("a", reference_answer=None), image=None)) + "\n")
    assert run(path, str(tmp_path / "o"), methods=["majority"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{path}:1, field 'reference_answer'" in err


def test_help_is_fast_and_loads_no_heavy_library():
    code = ("import sys; from stepcritic.cli import make_parser; make_parser('search').format_help(); "
            "print(sorted(m for m in ('datasets', 'numpy', 'torch', 'matplotlib') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert loaded.stdout.strip() == "[]"
    # the command module imports the standard library only, as every command module does (test_layering)
    code = ("import sys, json; before = set(sys.modules); import stepcritic.policy.search_cli; "
            "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before} "
            "- set(sys.stdlib_module_names) - {'stepcritic'})))")
    assert json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                                     check=True).stdout) == []
    result = subprocess.run([sys.executable, "-m", "stepcritic", "search", "--help"], capture_output=True, text=True,
                            cwd=REPO, timeout=20)
    assert result.returncode == 0 and "--beam-width" in result.stdout and "dvts" in result.stdout


def test_the_tiny_model_as_policy(questions, tmp_path, capsys):
    from stepcritic.train.tiny.cache import tiny_critic_path

    out = str(tmp_path / "out")
    assert stepcritic(["search", "--policy", f"hf:{tiny_critic_path()},batch_size=4", "--template", "policy_brief",
                       "--critic", CRITIC, "--chains", questions, "--method", "majority", "best-of-n", "beam",
                       "--n", "2", "--expansions", "2", "--max-steps", "2", "--max-new-tokens", "12", "--limit", "1",
                       "--out", out, "--quiet"]) == 0
    metrics = json.load(open(f"{out}/metrics.json"))
    assert metrics["asked"]["samples"] == 2 and set(metrics["methods"]) == {"majority", "best-of-n", "beam"}
    assert all(0 <= p["accuracy"] <= 1 for curve in metrics["methods"].values() for p in curve.values())
    # compute in the policy's own tokens: a sample is at most --max-new-tokens, N=2 two of them (its text tokenized
    # again: a token or two more than generated, where decoding dropped or merged some)
    assert 2 <= metrics["methods"]["majority"]["2"]["tokens_per_question"] <= 2 * 12 * 1.5
    assert metrics["methods"]["beam"]["2"]["tokens_per_question"] > 0
    assert "Tokens written by the policy" in open(f"{out}/report.md").read()
