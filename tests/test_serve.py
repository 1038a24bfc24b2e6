"""`stepcritic serve`: its scores are `score_chains`' on the tiny trained PRM whatever the batch, OpenRLHF's request
is answered, and the safety rules hold (API keys, image paths, body size, bad input, bad command lines)."""

import concurrent.futures
import os
import socket
import subprocess
import sys

import pytest
from serve_kit import HASH_JUDGE, PNGS, Server, canonical, data_url, metric, request, wire_chain

KEY = "k3y-" + "0123456789abcdef" * 2


def bomb() -> bytes:
    """A few kilobytes of PNG that declare 49 million pixels."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("1", (7000, 7000)).save(buf, format="PNG")
    return buf.getvalue()



@pytest.fixture(scope="module")
def prm_server(tiny_prm, tmp_path_factory):
    # a long wait, so that concurrent requests surely share forward passes
    with Server(["--judge", f"prm:{tiny_prm}", "--max-batch", "8", "--max-wait-ms", "300"],
                tmp_path_factory.mktemp("prm-server")) as server:
        yield server


@pytest.fixture(scope="module")
def direct_prm(tiny_prm, one_torch_thread):
    from stepcritic.eval.judges.registry import build_judge

    judge = build_judge(f"prm:{tiny_prm}")
    yield judge
    judge.close()


@pytest.fixture(scope="module")
def hash_server(tmp_path_factory):
    with Server(["--judge", HASH_JUDGE, "--max-steps", "6", "--max-images", "2", "--max-body-bytes", "200000"],
                tmp_path_factory.mktemp("hash-server")) as server:
        yield server


def test_prm_scores_equal_score_chains_alone_in_mixed_batches(prm_server, direct_prm):
    from stepcritic.rewards.core import score_chains

    # 1-5 steps and 0, 1 or 2 images side by side in the same batches, under two aggregates
    bodies = [{"chains": [wire_chain(2 * i), wire_chain(2 * i + 1)], "aggregate": ("min", "mean")[i % 2]}
              for i in range(6)]
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(lambda body: request(prm_server.port, "POST", "/v1/score", body), bodies))
    for body, (status, _, answer) in zip(bodies, answers):
        assert status == 200, answer
        assert answer["aggregate"] == body["aggregate"] and answer["judge"]["spec"].startswith("prm:")
        for wire, got in zip(body["chains"], answer["results"]):
            alone = score_chains(direct_prm, [canonical(wire)], body["aggregate"])[0]
            assert got["id"] == wire["id"] and len(got["step_scores"]) == len(wire["steps"])
            assert got["step_scores"] == pytest.approx(alone.step_scores, abs=1e-5)
            assert got["score"] == pytest.approx(alone.score, abs=1e-5)
    text = request(prm_server.port, "GET", "/metrics")[2]
    batches = metric(text, "stepcritic_batch_size_count")
    assert metric(text, "stepcritic_chains_scored_total") == 12 and batches < 12  # forward passes were shared


def test_get_reward_answers_openrlhf_request(prm_server, direct_prm):
    from stepcritic.rewards.core import make_chain, score_chains
    from stepcritic.rewards.splitting import split_steps

    prompts = ["What colour is the circle?\n", "How many squares are there?\n", "Add 2 and 3.\n"]
    responses = ["Step 1: I look at the circle.\nStep 2: It is red.", "There are two squares.",
                 "2 + 3 = 5.\n\nSo the answer is 5."]
    body = {"query": [p + r for p, r in zip(prompts, responses)], "prompts": prompts, "labels": ["red", "2", "5"]}
    status, _, answer = request(prm_server.port, "POST", "/get_reward", body)
    assert status == 200, answer
    assert len(answer["rewards"]) == 3 and all(isinstance(r, float) for r in answer["rewards"])
    assert answer["scores"] == answer["rewards"] and answer["extra_logs"]["steps"] == [2.0, 1.0, 2.0]
    for prompt, response, reward in zip(prompts, responses, answer["rewards"]):
        alone = score_chains(direct_prm, [make_chain(prompt, split_steps(response))])[0]
        assert reward == pytest.approx(alone.score, abs=1e-5)
    # without prompts, each query is its own question and response
    status, _, answer = request(prm_server.port, "POST", "/get_reward", {"query": ["Step 1: a.\nStep 2: b."]})
    assert status == 200 and len(answer["rewards"]) == 1


def test_get_reward_gives_a_blank_response_the_empty_reward_and_scores_the_others(prm_server, direct_prm):
    # a policy in RL can answer nothing: that answer gets StepReward's empty reward, never a 400 that stops the run
    from stepcritic.rewards.core import make_chain, score_chains
    from stepcritic.rewards.step_reward import EMPTY_REWARD

    prompts = ["Q1\n", "Q2\n", "Q3\n"]
    body = {"query": ["Q1\n", "Q2\nIt is red.", "Q3\n  \n"], "prompts": prompts}
    status, _, answer = request(prm_server.port, "POST", "/get_reward", body)
    assert status == 200, answer
    alone = score_chains(direct_prm, [make_chain("Q2\n", ["It is red."])])[0].score
    assert answer["rewards"][0] == answer["rewards"][2] == EMPTY_REWARD
    assert answer["rewards"][1] == pytest.approx(alone, abs=1e-5)
    assert answer["extra_logs"]["steps"] == [0.0, 1.0, 0.0]


@pytest.mark.parametrize("body, named", [
    (b"{not json", "body: malformed JSON"),
    (b"[1, 2]", "body: expected a JSON object"),
    ({"chain": []}, "'chain': unknown field"),
    ({}, "chains: missing"),
    ({"chains": {}}, "chains: expected a list"),
    ({"chains": [wire_chain(0), "x"]}, "chains[1]: expected an object"),
    ({"chains": [{"steps": ["a"]}]}, "chains[0].question: expected a string"),
    ({"chains": [{"question": "q", "steps": []}]}, "chains[0].steps: empty"),
    ({"chains": [{"question": "q", "steps": ["a", 3]}]}, "chains[0].steps[1]: expected a string"),
    ({"chains": [{"question": "q", "steps": ["a", " "]}]}, "chains[0].steps[1]: empty"),
    ({"chains": [{"question": "q", "steps": ["a"] * 7}]}, "chains[0].steps: 7 items, more than the server's limit"),
    ({"chains": [wire_chain(0, images=3)]}, "chains[0].images: 3 items, more than the server's limit of 2"),
    ({"chains": [wire_chain(0), wire_chain(1), wire_chain(2, images=1) | {"images": [data_url(b"not a png")]}]},
     "chains[2].images[0]: image cannot be decoded"),
    ({"chains": [wire_chain(0, images=2) | {"images": [data_url(PNGS[0]), "A" * 64]}]},
     "chains[0].images[1]: image cannot be decoded"),
    ({"chains": [wire_chain(0) | {"images": [data_url(bomb())]}]}, "chains[0].images[0]: the image has more pixels"),
    ({"chains": [wire_chain(0) | {"images": ["data:image/png,abc"]}]}, "chains[0].images[0]: a data URL must be"),
    ({"chains": [wire_chain(0) | {"images": [7]}]}, "chains[0].images[0]: expected a data URL"),
    ({"chains": [wire_chain(0) | {"id": [1]}]}, "chains[0].id: expected a non-empty string"),
    ({"chains": [wire_chain(0) | {"image": "x.png"}]}, "chains[0].'image': unknown field"),
    ({"chains": [], "aggregate": "max"}, "aggregate: expected one of min, mean, last, prod"),
    ({"chains": [{"question": "q", "steps": ["FAIL"]}]}, "chains[0]: the judge cannot score it"),
    ({"query": "text"}, "query: expected a list"),
    ({"query": ["a", 3]}, "query[1]: expected a string"),
    ({"query": ["a"], "prompts": ["a", "b"]}, "prompts: 2 prompts for 1 queries"),
])
def test_malformed_requests_are_400_naming_the_field(hash_server, body, named):
    path = "/get_reward" if isinstance(body, dict) and "query" in body else "/v1/score"
    status, _, answer = request(hash_server.port, "POST", path, body)
    assert status == 400 and answer["error"].startswith(named), answer
    assert request(hash_server.port, "POST", "/v1/score", {"chains": [wire_chain(5)]})[0] == 200  # still serving


def test_oversized_body_is_413_by_its_length_and_by_the_bytes_read(hash_server):
    import http.client
    import json

    status, _, answer = request(hash_server.port, "POST", "/v1/score",
                                {"chains": [wire_chain(0) | {"question": "x" * 300_000}]})
    assert status == 413 and answer["error"].startswith("body: ")
    # a Content-Length over the limit is refused before any of the body is sent
    conn = http.client.HTTPConnection("127.0.0.1", hash_server.port, timeout=10)
    conn.putrequest("POST", "/v1/score")
    conn.putheader("Content-Length", str(10**9))
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()
    # a chunked body has no length to trust: the bytes read are counted
    conn = http.client.HTTPConnection("127.0.0.1", hash_server.port, timeout=10)
    chunks = ((json.dumps({"chains": [wire_chain(0)]})[:-1] + " " * 1000).encode() for _ in range(300))
    conn.request("POST", "/v1/score", body=chunks, encode_chunked=True)
    assert conn.getresponse().status == 413
    conn.close()


def test_image_paths_only_under_the_image_root(tmp_path):
    root, outside = tmp_path / "images", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "sub" / "ok.png").write_bytes(PNGS[0])
    (outside / "secret.png").write_bytes(PNGS[1])
    os.symlink(outside / "secret.png", root / "link.png")
    os.symlink(outside, root / "door")
    os.symlink(root / "sub" / "ok.png", root / "inside.png")  # a symlink that stays inside is fine
    refused = {
        "../outside/secret.png": "may not contain '..'",
        "sub/../../outside/secret.png": "may not contain '..'",
        str(outside / "secret.png"): "must be relative",
        "link.png": "leads outside",
        "door/secret.png": "leads outside",
        "sub/missing.png": "no image file",
        "sub": "no image file",
    }
    with Server(["--judge", HASH_JUDGE, "--image-root", str(root)], tmp_path) as server:
        for path, reason in refused.items():
            status, _, answer = request(server.port, "POST", "/v1/score",
                                        {"chains": [wire_chain(0, images=0) | {"images": [path]}]})
            assert status == 400 and answer["error"].startswith("chains[0].images[0]: ") and reason in answer["error"]
        by_path = request(server.port, "POST", "/v1/score",
                          {"chains": [wire_chain(0, images=0) | {"images": ["sub/ok.png", "inside.png"]}]})
        by_value = request(server.port, "POST", "/v1/score",
                           {"chains": [wire_chain(0, images=0) | {"images": [data_url(PNGS[0])] * 2}]})
        assert by_path[0] == 200 and by_path[2]["results"] == by_value[2]["results"]
        assert server.stop() == 0
    with Server(["--judge", HASH_JUDGE], tmp_path, name="no-root") as server:
        status, _, answer = request(server.port, "POST", "/v1/score",
                                    {"chains": [wire_chain(0, images=0) | {"images": ["sub/ok.png"]}]})
        assert status == 400 and "image paths are refused" in answer["error"]


def test_api_key_is_required_and_never_logged(tmp_path):
    key_file = tmp_path / "keys"
    key_file.write_text(KEY + "\n")
    body = {"chains": [wire_chain(1)]}
    with Server(["--judge", HASH_JUDGE, "--api-key-file", str(key_file)], tmp_path) as server:
        port = server.port
        assert request(port, "GET", "/health")[0] == 200
        assert request(port, "POST", "/v1/score", body)[0] == 401
        assert request(port, "POST", "/get_reward", {"query": ["a"]})[0] == 401
        assert request(port, "GET", "/metrics")[0] == 401
        assert request(port, "POST", "/v1/score", body, {"Authorization": "Bearer " + KEY[:-1] + "x"})[0] == 401
        assert request(port, "POST", "/v1/score", body, {"Authorization": KEY})[0] == 401
        for query in (f"?api_key={KEY}", f"?key={KEY}&token={KEY}", f"?authorization=Bearer%20{KEY}"):
            status, headers, answer = request(port, "POST", "/v1/score" + query, body)
            assert status == 401 and headers.get("www-authenticate") == "Bearer" and KEY not in str(answer)
        assert request(port, "GET", f"/{KEY}")[0] == 401
        status, _, answer = request(port, "POST", "/v1/score", body, {"Authorization": f"Bearer {KEY}"})
        assert status == 200 and KEY not in str(answer)
        assert request(port, "GET", "/metrics", headers={"Authorization": f"bearer {KEY}"})[0] == 200
        # a valid header does not make a key in the URL acceptable
        status, _, answer = request(port, "GET", f"/metrics?k={KEY[:8]}%{ord(KEY[8]):02X}{KEY[9:]}",
                                    headers={"Authorization": f"Bearer {KEY}"})
        assert status == 401 and "in the URL" in answer["error"]
        # nor does a request too malformed for the application to see
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(f"GET /metrics?key={KEY} HTTP/1.1 x\r\nHost: x\r\n\r\n".encode())
            assert sock.recv(100).startswith(b"HTTP/1.1 400")
        assert server.stop() == 0
    log = server.log()
    assert "POST /v1/score 401" in log and KEY not in log and KEY[4:20] not in log


def test_bad_command_lines_are_one_line_and_exit_2(tmp_path, hash_server):
    key_file = tmp_path / "short"
    key_file.write_text("abc\n")
    cases = [
        (["--judge", "nonsense-kind"], "unknown judge kind"),
        (["--judge", f"prm:{tmp_path / 'missing'}"], "prm"),
        (["--judge", HASH_JUDGE, "--api-key-file", str(tmp_path / "none")], "--api-key-file"),
        (["--judge", HASH_JUDGE, "--api-key-file", str(key_file)], "shorter than 16"),
        (["--judge", HASH_JUDGE, "--image-root", str(tmp_path / "none")], "--image-root"),
        (["--judge", HASH_JUDGE, "--port", str(hash_server.port)], f"cannot listen on 127.0.0.1:{hash_server.port}"),
    ]
    env_path = os.pathsep.join([os.path.dirname(os.path.abspath(__file__)), os.environ.get("PYTHONPATH", "")])
    for args, named in cases:
        done = subprocess.run([sys.executable, "-m", "stepcritic.cli", "serve", *args], capture_output=True,
                              text=True, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": env_path},
                              timeout=60)
        lines = [line for line in done.stderr.splitlines() if "error" in line]
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert lines[0].startswith("stepcritic serve: error: ") and named in lines[0] and "Traceback" not in done.stderr


def test_a_request_of_no_chains_names_the_judge_and_metrics_are_prometheus_text(hash_server):
    status, _, answer = request(hash_server.port, "POST", "/v1/score", {"chains": []})
    assert status == 200 and answer["results"] == [] and answer["judge"]["spec"] == HASH_JUDGE
    assert len(answer["judge"]["fingerprint"]) == 16
    status, headers, text = request(hash_server.port, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    for name in ("stepcritic_requests_total", "stepcritic_request_seconds", "stepcritic_batch_size",
                 "stepcritic_queue_depth"):
        assert f"# TYPE {name} " in text
    assert metric(text, "stepcritic_request_seconds_count", route="/v1/score") >= 1


def test_a_body_that_stops_arriving_is_408_and_one_too_long_413_unread():
    import asyncio

    from stepcritic.serve.requests import TooLarge, TooSlow, read_body

    class Stalled:
        def __init__(self, length):
            self.headers = {"content-length": str(length)}
            self.read = 0

        async def stream(self):
            yield b"{"
            self.read += 1
            await asyncio.sleep(60)

    with pytest.raises(TooSlow, match="not all received within 0.2 s"):
        asyncio.run(read_body(Stalled(10), 100, seconds=0.2))
    stalled = Stalled(1000)
    with pytest.raises(TooLarge, match="1000 bytes"):
        asyncio.run(read_body(stalled, 100))
    assert stalled.read == 0
