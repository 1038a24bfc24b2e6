"""The `remote:` judge against a fake `stepcritic serve` (and the real one, when it is there): the wire format, exact
scores, the fingerprint of the served judge, retries, failures that are never judgments, secrecy, concurrency."""

import base64
import importlib.util
import io
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request

import helpers
import pytest
from helpers import chains
from PIL import Image

from stepcritic import cli as stepcritic_cli
from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval.errors import EvalError
from stepcritic.eval.judges import http_client
from stepcritic.eval.judges.http_client import EndpointUnavailable
from stepcritic.eval.judges.registry import KINDS, build_judge, describe_kinds, make_judge
from stepcritic.rewards.core import aggregate_steps, scored
from stepcritic.testing.fake_score_server import FakeScoreServer, fake_chain_score, fake_step_scores


def judge_for(server, url=None, **overrides):
    return make_judge({"kind": "remote", "target": url or server.base_url, "concurrency": 2, "max_retries": 3,
                       "backoff": 0.01, **overrides})


def texts(chain):
    return [s["text"] for s in chain["steps"]]


def many(n):
    """`n` chains, each with its own question (so each request body differs)."""
    return [dict(c, chain_id=f"c{i}", question=f"What colour is shape {i}?")
            for i, c in enumerate(chains(2) * (n // 2))]


def free_port() -> int:
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- the wire format and the scores

@pytest.mark.parametrize("aggregate", ["min", "mean", "prod", "last"])
def test_scores_round_trip_exactly_through_the_critique(aggregate):
    asked = chains(6)
    with FakeScoreServer() as server:
        judge = judge_for(server, batch_size=4, aggregate=aggregate)
        critiques = judge.judge_batch(asked)
    assert len(server.requests) == 2  # six chains, four to a request
    assert [request["body"]["aggregate"] for request in server.requests] == [aggregate] * 2
    for chain, critique in zip(asked, critiques):
        expected = fake_step_scores(chain["question"], texts(chain))
        assert critique.chain_id == chain["chain_id"] and not critique.failed and critique.valid
        assert critique.extra["p_correct"] == expected
        assert critique.chain_score == aggregate_steps(expected, aggregate)
        assert critique.verdicts == [s >= 0.5 for s in expected]
        back = scored(critique, aggregate)
        assert back.step_scores == expected and back.score == aggregate_steps(expected, aggregate)  # bit for bit


def test_every_step_score_of_the_form_one_minus_p_comes_back_bit_for_bit():
    """What the server sends is 1 - P(incorrect) of its own judge (`rewards.core.scored`), and the critique stores
    1 - that: the round trip is exact for every such score, small ones included, and for 0 and 1."""
    import random

    from stepcritic.eval.judges.base import Critique

    rng = random.Random(0)
    qs = [rng.random() for _ in range(20000)] + [rng.random() * 1e-9 for _ in range(1000)] + [0.0, 1.0, 0.5]
    sent = [1.0 - q for q in qs] + [0.0, 1.0]
    critique = Critique("c", [None] * len(sent), p_incorrect=[1.0 - s for s in sent])
    assert scored(critique).step_scores == sent


def test_the_request_carries_question_steps_and_png_images():
    asked = chains(2)
    with FakeScoreServer() as server:
        judge_for(server, batch_size=8).judge_batch(asked)
    (request,) = server.requests
    wire = request["body"]["chains"]
    assert [c["id"] for c in wire] == [c["chain_id"] for c in asked]
    assert [c["question"] for c in wire] == [c["question"] for c in asked]
    assert [c["steps"] for c in wire] == [texts(c) for c in asked]
    url = wire[0]["images"][0]
    assert len(wire[0]["images"]) == 1 and url.startswith("data:image/png;base64,")
    image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert image.format == "PNG" and image.size == (64, 64)
    assert request["headers"]["Content-Type"] == "application/json"


def test_a_text_only_chain_sends_no_images():
    chain = validate_chain(dict(chains(2)[0], image=None))
    with FakeScoreServer() as server:
        (critique,) = judge_for(server).judge_batch([chain])
    assert "images" not in server.requests[0]["body"]["chains"][0]
    assert critique.extra["p_correct"] == fake_step_scores(chain["question"], texts(chain))


def test_a_url_ending_in_the_route_is_the_same_judge():
    with FakeScoreServer() as server:
        plain, routed = judge_for(server), judge_for(server, url=server.base_url + "/v1/score/")
        assert plain.fingerprint() == routed.fingerprint()
        assert [c.to_json() for c in routed.judge_batch(chains(2))] == [
            c.to_json() for c in plain.judge_batch(chains(2))]
    assert len(server.requests) == 2 and server.health_requests == 2


def test_a_judge_of_whole_chains_gives_its_chain_score_and_no_step_score():
    asked = chains(4)
    with FakeScoreServer(outcome=True) as server:
        critiques = judge_for(server).judge_batch(asked)
    for chain, critique in zip(asked, critiques):
        score = fake_chain_score(chain["question"], texts(chain))
        assert critique.verdicts == [None] * 3 and critique.p_incorrect is None and critique.chain_score == score
        back = scored(critique)
        assert back.step_scores == [] and back.score == score


def test_threshold_sets_the_verdicts_only():
    chain = chains(2)[0]
    expected = fake_step_scores(chain["question"], texts(chain))
    with FakeScoreServer() as server:
        (strict,) = judge_for(server, threshold=1.0).judge_batch([chain])
        (lenient,) = judge_for(server, threshold=0.0).judge_batch([chain])
    assert strict.verdicts == [False] * 3 and lenient.verdicts == [True] * 3
    assert strict.p_incorrect == lenient.p_incorrect == [1.0 - s for s in expected]


# ----------------------------------------------------------------------------- the fingerprint

def test_the_fingerprint_is_the_served_judges_and_the_options_that_change_scores():
    with FakeScoreServer() as server:
        base = judge_for(server)
        faster = judge_for(server, concurrency=16, batch_size=32, timeout=5.0, max_retries=0, backoff=2.0,
                           api_key_env="SOME_OTHER_KEY")
        assert base.fingerprint() == faster.fingerprint()
        assert judge_for(server, threshold=0.7).fingerprint() != base.fingerprint()
        assert judge_for(server, aggregate="mean").fingerprint() != base.fingerprint()
        assert base.served() == server.judge
        server.judge = {"spec": "prm:other", "fingerprint": "fake0000000002"}  # another model served at the same URL
        assert judge_for(server).fingerprint() != base.fingerprint()
        assert server.health_requests == 5  # once per judge, however often the fingerprint is asked for
    assert "," not in base.cache_name and base.cache_name == f"remote:{server.base_url}"


def test_the_served_judge_is_read_from_an_empty_request_when_health_does_not_name_it():
    with FakeScoreServer(health_names_judge=False) as server:
        judge = judge_for(server)
        assert judge.served() == server.judge
        assert [r["body"] for r in server.requests] == [{"chains": [], "aggregate": "min"}]
    with FakeScoreServer() as with_health:
        assert judge.fingerprint() == judge_for(with_health).fingerprint()  # one judge, however it was read


def test_a_server_that_does_not_name_its_judge_or_cannot_be_reached_is_a_clear_error():
    with FakeScoreServer(judge={}) as server:
        with pytest.raises(EvalError, match=r"/health nor .*/v1/score names the judge it serves"):
            judge_for(server).fingerprint()
    port = free_port()
    judge = make_judge(f"remote:http://127.0.0.1:{port},max_retries=1,backoff=0.01")
    with pytest.raises(EvalError, match=rf"cannot read the served judge from http://127.0.0.1:{port}/health"):
        judge.judge_batch(chains(2))


def test_an_answer_from_another_judge_than_health_named_fails_its_chains():
    with FakeScoreServer() as server:
        judge = judge_for(server)
        assert not any(c.failed for c in judge.judge_batch(chains(2)))
        server.judge = {"spec": "prm:restarted", "fingerprint": "fake0000000009"}
        later = judge.judge_batch([dict(c, chain_id=c["chain_id"] + "-later") for c in chains(2)])
    assert all(c.failed and c.chain_score is None and c.p_incorrect is None for c in later)
    assert "fake0000000009" in later[0].error and "run it again" in later[0].error


# ----------------------------------------------------------------------------- retries and failures

@pytest.mark.parametrize("knobs, error", [
    ({"fail_first": 2, "fail_status": 500}, None),
    ({"fail_first": 2, "fail_status": 503, "retry_after": 0.05}, None),
    ({"reset_first": 2}, None),
])
def test_failed_attempts_are_retried_then_succeed(knobs, error):
    asked = many(4)
    with FakeScoreServer(**knobs) as server:
        critiques = judge_for(server, batch_size=2).judge_batch(asked)
    assert not any(c.failed for c in critiques)
    assert [c.extra["p_correct"] for c in critiques] == [fake_step_scores(c["question"], texts(c)) for c in asked]
    assert len(server.requests) == 2 * 3  # two requests, each failed twice before its answer


def test_retry_after_is_waited_for():
    with FakeScoreServer(fail_first=1, fail_status=503, retry_after=0.6) as server:
        start = time.perf_counter()
        (critique,) = judge_for(server, backoff=0.0).judge_batch(chains(2)[:1])
        elapsed = time.perf_counter() - start
    assert not critique.failed and len(server.requests) == 2
    assert elapsed >= 0.6


def test_retry_after_is_bounded(monkeypatch):
    monkeypatch.setattr(http_client, "MAX_BACKOFF_S", 0.2)
    with FakeScoreServer(fail_first=2, fail_status=429, retry_after=3600) as server:
        start = time.perf_counter()
        (critique,) = judge_for(server).judge_batch(chains(2)[:1])
        elapsed = time.perf_counter() - start
    assert not critique.failed and len(server.requests) == 3
    assert 0.4 <= elapsed < 5


def test_a_request_that_outlasts_its_retries_fails_its_chains_and_makes_up_no_score():
    asked = many(4)
    with FakeScoreServer(fail_first=100, fail_status=500, fail_matching="shape 1?") as server:
        critiques = judge_for(server, batch_size=2, max_retries=1).judge_batch(asked)
    assert [c.failed for c in critiques] == [True, True, False, False]  # the request with chain c1 failed
    for critique in critiques[:2]:
        assert critique.valid is False and "HTTP 500" in critique.error and "(after 2 attempts)" in critique.error
        assert critique.verdicts == [None] * 3 and critique.p_incorrect is None and critique.chain_score is None
        assert critique.to_json()["failed"] is True
    assert len(server.requests) == 2 + 1


def test_a_batch_refused_as_malformed_is_asked_chain_by_chain_so_only_the_bad_chain_fails():
    asked = many(4)
    with FakeScoreServer(reject_matching="shape 2?") as server:
        critiques = judge_for(server, batch_size=4).judge_batch(asked)
    assert [c.failed for c in critiques] == [False, False, True, False]
    assert "HTTP 422" in critiques[2].error
    assert [len(r["body"]["chains"]) for r in server.requests] == [4, 1, 1, 1, 1]  # 422 is not retried


def test_an_unreachable_server_after_health_is_a_clear_error():
    with FakeScoreServer() as server:
        judge = judge_for(server, max_retries=0, batch_size=1)
        judge.served()
    with pytest.raises(EndpointUnavailable, match=rf"none of 2 requests to {server.base_url}/v1/score"):
        list(judge.judge_stream(many(12)))


# ----------------------------------------------------------------------------- through `stepcritic eval`

TARGET, TARGET_ID = "shape 2?", "g1-ok"  # the question of the third chain, which the server fails


@pytest.fixture
def chains_dir(tmp_path):
    path = str(tmp_path / "chains")
    save_chains([validate_chain(dict(c, question=f"What colour is shape {i}?"))
                 for i, c in enumerate(helpers.chains(4))], path)
    return path


def run_eval(chains_dir, out, spec):
    return stepcritic_cli.main(["eval", "--chains", chains_dir, "--judge", spec, "--out", str(out), "--no-progress",
                                "--tasks", "critique"])



def test_a_permanent_failure_is_not_cached_and_is_asked_again_by_the_next_run(chains_dir, tmp_path, capsys):
    out = tmp_path / "out"
    with FakeScoreServer(fail_first=100, fail_status=500, fail_matching=TARGET) as server:
        spec = f"remote:{server.base_url},concurrency=1,batch_size=1,max_retries=1,backoff=0.01"
        assert run_eval(chains_dir, out, spec) == 2
        assert len(server.requests) == 3 + 2  # one try and one retry for the failing chain
        captured = capsys.readouterr()
        assert f"1 of 4 chains failed ({TARGET_ID})" in captured.err and "HTTP 500" in captured.err
        assert "3 chains judged, 0 from cache, 0 invalid, 1 failed;" in captured.out
        assert sorted(helpers.cached_critiques(out)) == ["g0-bad", "g0-ok", "g1-bad"]  # the failure is no judgment

        server.fail_first = 0
        assert run_eval(chains_dir, out, spec) == 0
        assert server.chains_scored()[5:] == [TARGET_ID]  # only the failed chain is asked again
    assert "1 chains judged, 3 from cache, 0 invalid, 0 failed;" in capsys.readouterr().out
    record = helpers.cached_critiques(out)[TARGET_ID]
    assert [1.0 - p for p in record["p_incorrect"]] == record["extra"]["p_correct"]
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert {p["chain_id"] for p in predictions} == {"g0-ok", "g0-bad", "g1-ok", "g1-bad"}


def test_the_cache_is_kept_while_the_same_judge_is_served_and_left_when_another_is(chains_dir, tmp_path):
    out = tmp_path / "out"
    with FakeScoreServer() as server:
        spec = f"remote:{server.base_url},batch_size=3"
        assert run_eval(chains_dir, out, spec) == 0
        assert run_eval(chains_dir, out, f"remote:{server.base_url},concurrency=4,batch_size=1") == 0
        assert len(server.chains_scored()) == 4  # all from the cache the second time
        server.judge = {"spec": "prm:retrained", "fingerprint": "fake0000000003"}
        assert run_eval(chains_dir, out, spec) == 0
        assert len(server.chains_scored()) == 8  # another judge served: scored again


# ----------------------------------------------------------------------------- the key

def test_the_key_is_sent_as_a_bearer_token_and_never_shown(monkeypatch, caplog, capsys):
    key = "sk-remote-DO-NOT-LEAK-0987654321"
    monkeypatch.setenv("STEPCRITIC_API_KEY", key)
    monkeypatch.setenv("STEPCRITIC_WRONG_KEY", key[::-1])
    caplog.set_level(logging.DEBUG)
    with FakeScoreServer(api_key=key, echo_auth=True) as server:
        judge = judge_for(server)
        produced = [c.to_json() for c in judge.judge_batch(chains(2))]
        wrong = judge_for(server, api_key_env="STEPCRITIC_WRONG_KEY", concurrency=4)
        produced += [c.to_json() for c in wrong.judge_batch(chains(2))]  # 401, quoting the wrong key back
        fresh = judge_for(server, api_key_env="STEPCRITIC_WRONG_KEY", concurrency=1)
        with pytest.raises(EndpointUnavailable) as failure:
            fresh.judge_batch(chains(2))
    assert server.requests[0]["headers"]["Authorization"] == f"Bearer {key}"
    assert not produced[0].get("failed") and produced[-1]["failed"] and "HTTP 401: " in produced[-1]["error"]
    assert "bad key Bearer ***" in produced[-1]["error"]  # the server did quote it, and it was cut out
    assert len([r for r in server.requests if r["headers"]["Authorization"] != f"Bearer {key}"]) == 2  # 401: no retry
    out = capsys.readouterr()
    everything = [json.dumps(produced), str(failure.value), repr(failure.value), caplog.text, out.out, out.err]
    for one in (judge, wrong, fresh):
        everything += [repr(one), str(vars(one)), repr(vars(one)), one.fingerprint(), one.spec,
                       json.dumps(one.options)]
    assert not any(secret in text for text in everything for secret in (key, key[::-1]))


# ----------------------------------------------------------------------------- concurrency

def test_requests_run_concurrently_up_to_the_limit_and_no_further():
    n, concurrency, batch_size, latency = 24, 3, 2, 0.15
    asked = many(n)
    with FakeScoreServer(latency=latency) as server:
        judge = judge_for(server, concurrency=concurrency, batch_size=batch_size)
        start = time.perf_counter()
        stream = judge.judge_stream(iter(asked))
        first_index, first = next(stream)
        # one request's chains handed over: nothing beyond `concurrency` requests was sent before that
        assert len(server.requests) <= concurrency
        rest = list(stream)
        elapsed = time.perf_counter() - start
    handed = [(first_index, first)] + rest
    assert sorted(index for index, _ in handed) == list(range(n))
    assert all(c.chain_id == f"c{index}" and not c.failed for index, c in handed)
    assert len(server.requests) == n // batch_size
    assert server.max_in_flight == concurrency
    assert elapsed < 0.75 * (n // batch_size) * latency  # the requests overlapped (one by one: 1.8 s)


# ----------------------------------------------------------------------------- the registry

def test_the_registry_lists_and_checks_the_remote_kind():
    assert "remote" in KINDS and "remote:http://HOST:PORT" in describe_kinds()
    judge = make_judge("remote:http://127.0.0.1:1,concurrency=4,aggregate=mean")
    assert (judge.kind, judge.root, judge.aggregate, judge._client.concurrency) == (
        "remote", "http://127.0.0.1:1", "mean", 4)
    judge.close()
    for spec, message in [("remote:gpu-box", "needs the URL"), ("remote:http://h:1,aggregate=max", "unknown aggregate"),
                          ("remote:http://h:1,threshold=2", "threshold"),
                          ("remote:http://h:1,model=x", "unknown option")]:
        with pytest.raises(EvalError, match=message):
            build_judge(spec)


# ----------------------------------------------------------------------------- the real server

def serve_is_there() -> bool:
    return "serve" in stepcritic_cli.COMMANDS and all(importlib.util.find_spec(m) for m in ("fastapi", "uvicorn"))


@pytest.mark.skipif(not serve_is_there(), reason="needs `stepcritic serve` and its extra (fastapi, uvicorn)")
def test_the_real_server_gives_the_scores_of_the_local_judge(tiny_prm, one_torch_thread, tmp_path):
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    server = subprocess.Popen([sys.executable, "-m", "stepcritic.cli", "serve", "--judge", f"prm:{tiny_prm}",
                               "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the server did not start: {server.stdout.read().decode(errors='replace')[-2000:]}")
            time.sleep(0.5)
        asked = chains(6)
        local = build_judge(f"prm:{tiny_prm}")
        remote = build_judge(f"remote:{url},batch_size=4,concurrency=2")
        try:
            here = [scored(c) for c in local.judge_batch(asked)]
            there = [scored(c) for _, c in sorted(remote.judge_stream(asked), key=lambda item: item[0])]
            assert remote.served()["fingerprint"] == local.fingerprint()
        finally:
            local.close()
            remote.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    for mine, theirs in zip(here, there):
        assert theirs.step_scores == pytest.approx(mine.step_scores, abs=1e-5)
        assert theirs.score == pytest.approx(mine.score, abs=1e-5)
