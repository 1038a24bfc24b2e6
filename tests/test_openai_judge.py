"""The OpenAI-compatible judge against a local fake server: parsing, retries, failures, secrecy, concurrency."""

import base64
import io
import json
import logging
import socket
import time

import pytest
from helpers import chains
from PIL import Image

from stepcritic.eval.judges.openai_judge import EndpointUnavailable
from stepcritic.eval.judges.registry import make_judge
from stepcritic.testing.fake_openai_server import FakeOpenAIServer


def judge_for(server, **overrides):
    return make_judge({"kind": "openai", "target": "fake-model", "base_url": server.base_url, "concurrency": 4,
                       "max_retries": 3, "backoff": 0.01, **overrides})


def test_valid_answers_parse_and_images_arrive_as_data_urls():
    with FakeOpenAIServer() as server:
        critiques = judge_for(server).judge_batch(chains(4))
    assert [c.verdicts for c in critiques] == [[True, False, True]] * 4
    assert all(c.valid and c.answer_correct is False for c in critiques)
    assert critiques[0].explanations[1] == "The colour is wrong."
    assert len(server.requests) == 4
    body = server.requests[0]["body"]
    assert body["model"] == "fake-model" and body["temperature"] == 0.0
    image_part = body["messages"][0]["content"][0]
    assert image_part["type"] == "image_url"
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size == (64, 64)


@pytest.mark.parametrize("status", [429, 500, 503])
def test_throttling_and_server_errors_are_retried(status):
    with FakeOpenAIServer(fail_first=2, fail_status=status) as server:
        critiques = judge_for(server).judge_batch(chains(2))
    assert all(c.valid for c in critiques)
    assert len(server.requests) == 2 * 3  # two failures, then success, for each chain


def test_client_errors_are_not_retried_and_exhausted_retries_make_the_chain_invalid():
    with FakeOpenAIServer() as server:
        judge = judge_for(server)
        assert all(c.valid for c in judge.judge_batch(chains(2)))
        server.fail_first, server.fail_status = 100, 500
        failed = judge.judge_batch([dict(c, chain_id=c["chain_id"] + "-again") for c in chains(2)])
        assert len(server.requests) == 2 + 2 * 4  # 1 try + 3 retries each
        server.fail_status = 400
        rejected = judge.judge_batch([dict(chains(2)[0], chain_id="bad-request", question="other?")])
        assert len(server.requests) == 10 + 1
    assert all(not c.valid and "HTTP 500" in c.error for c in failed)
    assert [c.verdicts for c in failed] == [[None] * 3] * 2
    assert "HTTP 400" in rejected[0].error


def test_garbage_output_is_invalid_with_the_raw_text_kept():
    with FakeOpenAIServer(garbage="Looks fine to me!") as server:
        (critique,) = judge_for(server).judge_batch(chains(2)[:1])
    assert critique.valid is False
    assert critique.raw == "Looks fine to me!"
    assert critique.error == "no JSON critique found"


def test_unreachable_endpoint_is_a_clear_error():
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    judge = make_judge(f"openai:m,base_url=http://127.0.0.1:{port}/v1,max_retries=1,backoff=0.01,concurrency=2")
    with pytest.raises(EndpointUnavailable, match=rf"none of 2 requests to http://127.0.0.1:{port}/v1"):
        judge.judge_batch(chains(2))


def test_timeouts_count_as_failures():
    with FakeOpenAIServer(hang=True) as server:
        judge = judge_for(server, timeout=0.3, max_retries=0, concurrency=1)
        with pytest.raises(EndpointUnavailable, match="timed out"):
            judge.judge_batch(chains(2)[:1])


def test_api_key_never_leaks(monkeypatch, caplog, capsys):
    key = "sk-test-DO-NOT-LEAK-1234567890"
    monkeypatch.setenv("STEPCRITIC_TEST_KEY", key)
    caplog.set_level(logging.DEBUG)
    produced = []
    with FakeOpenAIServer(echo_auth=True) as server:
        judge = judge_for(server, api_key_env="STEPCRITIC_TEST_KEY")
        produced += [c.to_json() for c in judge.judge_batch(chains(2))]
        server.fail_first, server.fail_status = 100, 401  # every error body now quotes the key back
        produced += [c.to_json() for c in judge.judge_batch([dict(chains(2)[0], chain_id="x", question="q2?")])]
        fresh = judge_for(server, api_key_env="STEPCRITIC_TEST_KEY", concurrency=1)
        with pytest.raises(EndpointUnavailable) as failure:
            fresh.judge_batch([dict(chains(2)[0], chain_id="y", question="q3?")])
    assert server.requests[0]["headers"]["Authorization"] == f"Bearer {key}"  # the key is really used
    assert "bad key" in produced[-1]["error"]  # and the server did echo it
    out = capsys.readouterr()
    everything = [json.dumps(produced), repr(judge), str(vars(judge)), judge.fingerprint(), judge.spec,
                  json.dumps(judge.options), str(failure.value), repr(failure.value), caplog.text, out.out, out.err]
    assert not any(key in text for text in everything)


def test_requests_run_concurrently():
    n, latency = 16, 0.2
    with FakeOpenAIServer(latency=latency) as server:
        judge = make_judge(f"openai:m,base_url={server.base_url},concurrency=8")
        start = time.perf_counter()
        critiques = judge.judge_batch([dict(c, chain_id=f"c{i}") for i, c in enumerate(chains(2) * (n // 2))])
        elapsed = time.perf_counter() - start
    assert all(c.valid for c in critiques)
    assert server.max_in_flight >= 6
    assert elapsed < n * latency / 3


def test_fingerprint_ignores_speed_settings_but_not_the_model():
    base = make_judge("openai:m,base_url=http://127.0.0.1:1/v1")
    faster = make_judge("openai:m,base_url=http://127.0.0.1:1/v1,concurrency=64,timeout=5")
    other = make_judge("openai:m2,base_url=http://127.0.0.1:1/v1")
    assert base.fingerprint() == faster.fingerprint() != other.fingerprint()


def test_stream_keeps_the_pool_full_without_running_ahead_of_what_was_handed_over():
    n, concurrency, latency = 24, 4, 0.1
    many = [dict(c, chain_id=f"c{i}") for i, c in enumerate(chains(2) * (n // 2))]
    with FakeOpenAIServer(latency=latency) as server:
        judge = judge_for(server, concurrency=concurrency)
        assert judge.batch_size == 4 * concurrency  # what the old batch boundary was, and LookBack still uses
        stream = judge.judge_stream(iter(many))
        first_index, _ = next(stream)
        # one critique handed over: only its slot was refilled, so nothing beyond `concurrency` was sent
        assert len(server.requests) <= concurrency
        rest = list(stream)
    indices = [first_index] + [i for i, _ in rest]
    assert sorted(indices) == list(range(n))
    assert all(c.chain_id == f"c{i}" and c.valid for i, c in rest)
    assert len(server.requests) == n and server.max_in_flight == concurrency


def test_stream_on_an_unreachable_endpoint_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    judge = make_judge(f"openai:m,base_url=http://127.0.0.1:{port}/v1,max_retries=0,concurrency=2")
    with pytest.raises(EndpointUnavailable, match=rf"none of 2 requests to http://127.0.0.1:{port}/v1"):
        list(judge.judge_stream(chains(2) * 3))


def test_text_only_wrapper_streams_through_the_inner_judge_with_blank_images():
    with FakeOpenAIServer() as server:
        judge = make_judge(f"text-only:openai:m,base_url={server.base_url},concurrency=2")
        streamed = sorted(judge.judge_stream(chains(4)), key=lambda item: item[0])
    assert [c.chain_id for _, c in streamed] == [c["chain_id"] for c in chains(4)]
    assert all(c.valid for _, c in streamed)
    for request in server.requests:
        url = request["body"]["messages"][0]["content"][0]["image_url"]["url"]
        image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")
        assert image.getextrema() == ((255, 255), (255, 255), (255, 255))  # all white


@pytest.mark.parametrize("concurrency", [2, 4])
def test_stream_of_several_prompts_per_chain_sends_no_more_than_concurrency_unsaved(concurrency):
    """Three prompts a chain (a verifier task asked of every step): a chain is handed over once all three are
    answered, and the requests of chains not yet handed over never exceed `concurrency`, or the one chain's three
    where that is more (it then goes alone). The pool is still kept full."""
    n, per_chain = 8, 3
    many = [dict(c, chain_id=f"c{i}") for i, c in enumerate(chains(2) * (n // 2))]
    handed = []
    with FakeOpenAIServer(latency=0.05) as server:
        judge = judge_for(server, concurrency=concurrency, mode="verifier", task="step_type")
        for index, critique in judge.judge_stream(iter(many)):
            assert len(server.requests) - per_chain * len(handed) <= max(concurrency, per_chain)
            assert critique.chain_id == f"c{index}" and critique.extra["n_outputs"] == per_chain
            handed.append(index)
    assert sorted(handed) == list(range(n))
    assert len(server.requests) == per_chain * n and server.max_in_flight == concurrency


def test_stream_hands_over_chains_with_nothing_to_ask():
    """A verifier task that applies to no step of a chain (description errors, in a chain without any) sends
    nothing for it, and its critique is handed over all the same, between the others."""
    many = chains(6)
    with FakeOpenAIServer() as server:
        judge = judge_for(server, concurrency=1, mode="verifier", task="description_error")
        streamed = dict(judge.judge_stream(iter(many)))
    assert sorted(streamed) == list(range(6))
    assert len(server.requests) == 3  # the wrong step of each incorrect chain
    for index in (0, 2, 4):  # the correct chains
        assert streamed[index].to_json() == judge.read_replies(many[index], []).to_json()
    assert all(streamed[index].extra["n_outputs"] == 1 for index in (1, 3, 5))


def test_fewer_requests_than_concurrency_that_all_fail_are_failures_not_an_unusable_endpoint():
    """With nothing left to ask, a few failed requests say nothing about the endpoint: they come back as failed
    chains (not judgments), so that a rerun of the few chains a server keeps failing on can still be reported
    without them."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    judge = make_judge(f"openai:m,base_url=http://127.0.0.1:{port}/v1,max_retries=0,concurrency=8")
    streamed = [critique for _, critique in judge.judge_stream(chains(2)[:1] * 3)]
    assert len(streamed) == 3 and all(c.failed and not c.valid and "Connection refused" in c.error for c in streamed)
    prompts = [judge.critique_prompt(c) for c in chains(2)]
    assert all(reply.error for _, reply in judge.generate_stream(iter(prompts)))
    fresh = make_judge(f"openai:m,base_url=http://127.0.0.1:{port}/v1,max_retries=0,concurrency=8")
    with pytest.raises(EndpointUnavailable, match="none of 8 requests"):  # eight failures, with more to ask
        list(fresh.judge_stream(chains(2) * 10))


def test_a_failed_request_marks_its_chain_failed_and_an_unreadable_answer_does_not():
    with FakeOpenAIServer(fail_first=100, fail_matching="Final answer: blue") as server:
        critiques = judge_for(server, max_retries=0).judge_batch(chains(2))
        server.fail_first, server.garbage = 0, "Looks fine to me!"
        unreadable = judge_for(server).judge_batch(chains(2)[:1])
    assert [c.failed for c in critiques] == [False, True]
    assert critiques[1].valid is False and "HTTP 500" in critiques[1].error
    assert unreadable[0].failed is False and unreadable[0].valid is False
    assert "failed" not in critiques[0].to_json() and critiques[1].to_json()["failed"] is True


@pytest.mark.parametrize("mode", ["step-score", "verifier"])
def test_one_unanswered_prompt_of_several_leaves_the_chain_failed(mode):
    with FakeOpenAIServer(fail_first=100, fail_matching="Step 2: The circle is red.\n") as server:
        judge = judge_for(server, max_retries=0, mode=mode, task="step_type")
        (critique,) = judge.judge_batch(chains(2)[:1])
    assert critique.failed and "HTTP 500" in critique.error


def test_no_api_key_for_openais_own_api_stops_before_any_request(monkeypatch, tmp_path, capsys):
    """`env -u OPENAI_API_KEY stepcritic eval --judge openai:gpt-4o` is one line naming the variable, exit 2, and
    no request at all (it used to retry every chain against the network, then report DNS)."""
    import urllib.request

    from stepcritic import cli
    from stepcritic.data_prep.schema import save_chains, validate_chain

    sent = []

    def no_network(request, *args, **kwargs):
        sent.append(request.full_url)
        raise OSError("no network in this test")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    chains_dir = str(tmp_path / "chains")
    save_chains([validate_chain(c) for c in chains(4)], chains_dir)
    out = tmp_path / "e2"
    code = cli.main(["eval", "--chains", chains_dir, "--limit", "5", "--judge", "openai:gpt-4o", "--tasks", "critique",
                     "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("stepcritic eval: error: ") and "$OPENAI_API_KEY is not set" in err[0], err
    assert sent == [] and not (out / "report.md").exists()

    monkeypatch.setenv("OPENAI_API_KEY", "")  # an empty key sends no Authorization header either
    with pytest.raises(ValueError, match=r"\$OPENAI_API_KEY is not set"):
        make_judge("openai:gpt-4o")
    with pytest.raises(ValueError, match=r"\$MY_OPENAI_KEY is not set"):
        make_judge("openai:gpt-4o,api_key_env=MY_OPENAI_KEY,base_url=https://api.openai.com/v1/")
    # a local OpenAI-compatible server (vLLM, SGLang) may need no key: only OpenAI's own API is refused
    make_judge({"kind": "openai", "target": "m", "base_url": "http://127.0.0.1:9/v1"}).close()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    make_judge("openai:gpt-4o").close()
    assert sent == []
