"""Requests that get no answer are not judgments: never cached, asked again by the next run, and the run stops with
exit 2 unless `--allow-failures`, which leaves them out of every metric and names them in the report."""

import json
import os
import socket

import helpers
import pytest

from stepcritic import cli as stepcritic_cli
from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval.cache import is_judgment
from stepcritic.eval.judges.registry import parse_spec
from stepcritic.testing.fake_openai_server import FakeOpenAIServer

TARGET = "shape 2?"  # the question of the third chain, g1-ok: the one the server fails
TARGET_ID = "g1-ok"


@pytest.fixture
def chains_dir(tmp_path):
    path = str(tmp_path / "chains")
    chains = [dict(c, question=f"What colour is shape {i}?") for i, c in enumerate(helpers.chains(4))]
    save_chains([validate_chain(c) for c in chains], path)
    return path


def judge_spec(server, **options):
    # one request at a time, so the first chain has answered before the failing one is asked
    settings = {"concurrency": 1, "max_retries": 1, "backoff": 0.01, "timeout": 5, **options}
    return f"openai:fake-model,base_url={server.base_url}," + ",".join(f"{k}={v}" for k, v in settings.items())


def name_of(spec: str) -> str:
    """The judge's name in the output: its canonical spec."""
    return str(parse_spec(spec))


def run(chains_dir, out, spec, *extra, tasks=("critique",)):
    return stepcritic_cli.main(["eval", "--chains", chains_dir, "--judge", spec, "--out", str(out), "--no-progress",
                                "--tasks", *tasks, *extra])



def test_a_failure_retried_within_the_run_is_an_ordinary_judgment(chains_dir, tmp_path, capsys):
    out = tmp_path / "out"
    with FakeOpenAIServer(fail_first=1, fail_matching=TARGET) as server:
        assert run(chains_dir, out, judge_spec(server)) == 0
        assert len(server.requests) == 4 + 1  # the failing chain's one retry
        assert run(chains_dir, out, judge_spec(server)) == 0
        assert len(server.requests) == 5  # all cached
    assert all(record["valid"] for record in helpers.cached_critiques(out).values())
    assert "0 chains judged, 4 from cache, 0 invalid, 0 failed;" in capsys.readouterr().out


def test_a_failure_that_outlasts_the_retries_stops_the_run_and_is_asked_again(chains_dir, tmp_path, capsys):
    out = tmp_path / "out"
    with FakeOpenAIServer(fail_first=2, fail_matching=TARGET) as server:
        spec = judge_spec(server)
        assert run(chains_dir, out, spec) == 2
        assert len(server.requests) == 3 + 2  # one try and one retry for the failing chain
        captured = capsys.readouterr()
        err = captured.err.splitlines()
        assert len(err) == 1 and err[0].startswith("stepcritic eval: error: "), err
        assert f"1 of 4 chains failed ({TARGET_ID})" in err[0] and "HTTP 500" in err[0]
        assert "(after 2 attempts)" in err[0] and "--allow-failures" in err[0]
        assert "3 chains judged, 0 from cache, 0 invalid, 1 failed;" in captured.out
        # the failure is not a judgment
        assert sorted(helpers.cached_critiques(out)) == sorted({"g0-ok", "g0-bad", "g1-bad"})
        assert not os.path.exists(out / "report.md")

        assert run(chains_dir, out, spec) == 0  # the third attempt succeeds
        assert len(server.requests) == 5 + 1  # only the failed chain is asked again
    assert "1 chains judged, 3 from cache, 0 invalid, 0 failed;" in capsys.readouterr().out
    assert helpers.cached_critiques(out)[TARGET_ID]["valid"] is True


def test_allow_failures_leaves_failed_chains_out_of_every_metric_and_names_them(chains_dir, tmp_path, capsys):
    out = tmp_path / "out"
    with FakeOpenAIServer(fail_first=100, fail_matching=TARGET) as server:
        spec = judge_spec(server)
        assert run(chains_dir, out, spec, "--judge", "always-correct", "--allow-failures") == 0
        assert len(server.requests) == 3 + 2
        assert f"{name_of(spec)}: 3 chains judged, 0 from cache, 0 invalid, 1 failed;" in capsys.readouterr().out
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["n_chains"] == 3
        assert metrics["failed"]["left_out_chains"] == [TARGET_ID]
        assert metrics["failed"]["judges"][name_of(spec)]["chains"] == [TARGET_ID]
        assert "HTTP 500" in metrics["failed"]["judges"][name_of(spec)]["last_error"]
        # the baseline is scored on the same three chains, not on the one only it judged
        assert metrics["judges"]["always-correct"]["overall"]["critique"]["step"]["n"] == 9
        predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
        assert {p["chain_id"] for p in predictions} == {"g0-ok", "g0-bad", "g1-bad"}
        report = (out / "report.md").read_text()
        assert "## Failed requests" in report and f"`{TARGET_ID}`" in report

        assert run(chains_dir, out, spec, "--allow-failures") == 0
        assert len(server.requests) == 5 + 2  # the failed chain, and only it, asked again


def test_dropped_connections_are_failures_not_judgments(chains_dir, tmp_path, capsys):
    out = tmp_path / "out"
    with FakeOpenAIServer(drop_first=2, fail_matching=TARGET) as server:
        spec = judge_spec(server)
        assert run(chains_dir, out, spec) == 2
        assert len(server.requests) == 3 + 2
        err = capsys.readouterr().err
        assert "1 of 4 chains failed" in err and "RemoteDisconnected" in err
        assert TARGET_ID not in helpers.cached_critiques(out)
        assert run(chains_dir, out, spec) == 0
        assert len(server.requests) == 5 + 1


def test_timeouts_are_failures_not_judgments(chains_dir, tmp_path, capsys):
    out = tmp_path / "out"
    with FakeOpenAIServer(hang=True, fail_matching=TARGET) as server:
        spec = judge_spec(server, timeout=0.3, max_retries=0)
        assert run(chains_dir, out, spec) == 2
        assert len(server.requests) == 4
        assert "timed out" in capsys.readouterr().err
        server.hang = False
        assert run(chains_dir, out, spec) == 0
        assert len(server.requests) == 4 + 1


def test_failures_an_older_version_cached_are_asked_again(chains_dir, tmp_path):
    out = tmp_path / "out"
    with FakeOpenAIServer() as server:
        spec = judge_spec(server)
        assert run(chains_dir, out, spec) == 0
        assert len(server.requests) == 4
        [path] = [os.path.join(root, "critiques.jsonl") for root, _, files in os.walk(out / "cache")
                  if "critiques.jsonl" in files]
        record = dict(helpers.cached_critiques(out)[TARGET_ID], verdicts=[None] * 3, valid=False, raw=None,
                      explanations=None, error="HTTP 500: try again later (after 6 attempts)")
        with open(path, "a") as f:  # what older versions appended for a request that got no answer
            f.write(json.dumps(record) + "\n")
        assert not is_judgment(helpers.cached_critiques(out)[TARGET_ID])
        assert run(chains_dir, out, spec) == 0
        assert len(server.requests) == 4 + 1
    assert helpers.cached_critiques(out)[TARGET_ID]["valid"] is True


def test_unreadable_answers_are_judgments_counted_invalid_and_kept(chains_dir, tmp_path, capsys):
    out = tmp_path / "out"
    with FakeOpenAIServer(garbage="Looks fine to me!") as server:
        spec = judge_spec(server)
        assert run(chains_dir, out, spec) == 0
        assert "4 chains judged, 0 from cache, 4 invalid, 0 failed;" in capsys.readouterr().out
        assert run(chains_dir, out, spec) == 0
        assert len(server.requests) == 4
    assert "0 chains judged, 4 from cache, 4 invalid, 0 failed;" in capsys.readouterr().out
    assert json.loads((out / "metrics.json").read_text())["failed"] is None


def test_an_unreachable_endpoint_gives_true_counts_and_no_resume_hint(chains_dir, tmp_path, capsys):
    """With nothing answered, nothing is counted as judged or saved: three chains under eight requests at once all
    fail (and are failures); four chains two at a time stop after the first two, with more left to ask."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = f"openai:m,base_url=http://127.0.0.1:{port}/v1,max_retries=0"
    out = tmp_path / "out"
    assert run(chains_dir, out, spec, "--limit", "3") == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "3 of 3 chains failed" in err[0] and "Connection refused" in err[0], err
    assert run(chains_dir, out, spec + ",concurrency=2") == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "(0 of 4 judged and saved, 1 failed)" in err[0] and "none of 2 requests" in err[0], err
    assert "resume" not in err[0]
    assert not any(files for _, _, files in os.walk(out / "cache") if "critiques.jsonl" in files)


def test_failed_shiftcheck_questions_are_not_cached_and_their_group_is_left_out(chains_dir, tmp_path, capsys):
    """A listwise question shows the first option's question text: only group g1's second shift (g1-ok first)
    fails, and the group is left out whole, since ShiftCheck scores a group over all its shifts."""
    out = tmp_path / "out"
    with FakeOpenAIServer(fail_first=100, fail_matching=TARGET) as server:
        # two failures before any answer would mean the endpoint is down; one, on the rerun, is a failure
        spec = judge_spec(server, max_retries=0, concurrency=2)
        assert run(chains_dir, out, spec, tasks=("shiftcheck",)) == 2
        assert len(server.requests) == 4  # two groups, two shifts each
        assert "1 of 4 ShiftCheck questions failed" in capsys.readouterr().err
        assert run(chains_dir, out, spec, "--allow-failures", tasks=("shiftcheck",)) == 0
        assert len(server.requests) == 4 + 1  # only the failed shift asked again
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["failed"]["judges"][name_of(spec)]["questions"] == ["g1#1"]
    assert metrics["failed"]["left_out_questions"] == ["g1#0", "g1#1"]
    assert metrics["judges"][name_of(spec)]["overall"]["shiftcheck"]["n_groups"] == 1


def test_unanswered_verifier_questions_fail_their_chain_and_only_they_are_asked_again(chains_dir, tmp_path, capsys):
    out = tmp_path / "out"
    with FakeOpenAIServer(fail_first=100, fail_matching=TARGET) as server:
        spec = judge_spec(server, max_retries=0)
        assert run(chains_dir, out, spec, tasks=("verifier",)) == 2
        failed_prompts = sum(TARGET in text for text in server.prompt_texts())
        assert failed_prompts >= 2  # several of the nine tasks apply to the failing chain
        err = capsys.readouterr().err
        assert f"1 of 4 chains failed ({TARGET_ID})" in err and "last error: verifier " in err
        asked = len(server.requests)
        server.fail_first = 0
        assert run(chains_dir, out, spec, tasks=("verifier",)) == 0
        assert len(server.requests) == asked + failed_prompts
        assert all(TARGET in text for text in server.prompt_texts()[asked:])
