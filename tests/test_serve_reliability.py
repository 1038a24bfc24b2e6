"""`stepcritic serve` under load and mishaps: thousands of concurrent requests with malformed ones among them, clients
that die mid-request, a queue that fills, a chain the judge cannot take, and SIGTERM while requests are in flight.
Every good request gets exactly the scores it would get alone; every bad one a 4xx naming its problem; nothing is
lost or answered twice. The judge is `HashJudge` (cheap, content-determined scores), so the load is the server's."""

import concurrent.futures
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from serve_kit import HASH_JUDGE, HashJudge, Server, canonical, data_url, metric, request, wire_chain

from stepcritic.rewards.core import score_chains

JUDGE = HashJudge(HASH_JUDGE)


def expected(body: dict) -> list:
    aggregate = body.get("aggregate", "min")
    return [{"id": wire["id"], "step_scores": alone.step_scores, "score": alone.score}
            for wire in body["chains"] for alone in score_chains(JUDGE, [canonical(wire)], aggregate)]


def good_body(n: int) -> dict:
    return {"chains": [wire_chain(3 * n + k) for k in range(1 + n % 3)], "aggregate": ("min", "mean", "last")[n % 3]}


# one in ten requests is malformed, each in its own way: (body, status, the start of the error)
MALFORMED = [
    (b'{"chains": [', 400, "body: malformed JSON"),
    (b"{\"chains\": \"\xff\"}", 400, "body: not UTF-8"),
    ({"chains": [{"steps": ["a"]}]}, 400, "chains[0].question: expected a string"),
    ({"chains": [wire_chain(1), {"question": "q", "steps": "a"}]}, 400, "chains[1].steps: expected a list"),
    ({"chains": [wire_chain(1) | {"images": [data_url(b"GIF89a broken")]}]}, 400,
     "chains[0].images[0]: image cannot be decoded"),
    ({"chains": [{"question": "q", "steps": ["s"] * 9}]}, 400, "chains[0].steps: 9 items"),
    ({"chains": [wire_chain(2), wire_chain(3, images=3)]}, 400, "chains[1].images: 3 items"),
    ({"chains": [wire_chain(1) | {"images": ["../../etc/passwd"]}]}, 400, "chains[0].images[0]: image paths are "
                                                                          "refused"),
    ({"chains": [], "aggregate": 3}, 400, "aggregate: expected one of"),
    ({"chains": [wire_chain(1) | {"question": "x" * 70_000}]}, 413, "body: "),
]
LOAD_ARGS = ["--max-batch", "16", "--max-wait-ms", "5", "--max-steps", "8", "--max-images", "2",
             "--max-body-bytes", "65536"]


def test_2000_requests_at_concurrency_32_one_in_ten_malformed(tmp_path):
    total, concurrency = 2000, 32
    plan = [("bad", MALFORMED[(i // 10) % len(MALFORMED)]) if i % 10 == 9 else ("good", good_body(i))
            for i in range(total)]
    wanted = {i: expected(body) for i, (kind, body) in enumerate(plan) if kind == "good"}
    local = threading.local()
    health, stop = [], threading.Event()

    def send(i):
        kind, body = plan[i]
        if kind == "bad" and body[1] == 413:  # refused unread, the connection cannot carry another request
            return i, request(server.port, "POST", "/v1/score", body[0])
        if not hasattr(local, "conn"):
            local.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        return i, request(server.port, "POST", "/v1/score", body if kind == "good" else body[0], conn=local.conn)

    def watch():
        while not stop.is_set():
            health.append(request(server.port, "GET", "/health", timeout=10)[0])
            time.sleep(0.05)

    with Server(["--judge", HASH_JUDGE + ",delay=0.002", *LOAD_ARGS], tmp_path) as server:
        watcher = threading.Thread(target=watch)
        watcher.start()
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            answers = dict(pool.map(send, range(total)))
        seconds = time.perf_counter() - start
        stop.set()
        watcher.join()
        text = request(server.port, "GET", "/metrics")[2]
        assert server.stop() == 0
    assert len(answers) == total
    for i, (kind, body) in enumerate(plan):
        status, _, answer = answers[i]
        if kind == "good":
            assert status == 200 and answer["results"] == wanted[i], (i, answer)
        else:
            assert status == body[1] and answer["error"].startswith(body[2]), (i, answer)
    assert len(health) >= 2 and set(health) == {200}
    # each request reached the server once: the counts by status add up to what was sent
    assert metric(text, "stepcritic_requests_total", route="/v1/score") == total
    assert metric(text, "stepcritic_requests_total", route="/v1/score", status="200") == len(wanted)
    assert metric(text, "stepcritic_chains_scored_total") == sum(len(w) for w in wanted.values())
    assert metric(text, "stepcritic_batch_size_count") < metric(text, "stepcritic_chains_scored_total")
    assert re.search(r"drained: (\d+) requests received, \1 answered", server.log())
    print(f"{total} requests at concurrency {concurrency}: {seconds:.1f} s")


CLIENT = """
import socket, sys, time
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
body = sys.argv[2].encode()
head = ("POST /v1/score HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\n"
        f"Content-Length: {len(body)}\\r\\n\\r\\n")
whole = sys.argv[3] == "whole"
sock.sendall(head.encode() + (body if whole else body[: len(body) // 2]))
print("sent", flush=True)
time.sleep(60)
"""


def test_clients_killed_mid_request_do_not_disturb_the_others(tmp_path):
    bodies = [good_body(i) for i in range(24)]
    with Server(["--judge", HASH_JUDGE + ",delay=0.05", "--max-batch", "8", "--max-wait-ms", "20"], tmp_path) as server:
        port = server.port
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = pool.map(lambda body: request(port, "POST", "/v1/score", body), bodies)
            # meanwhile: clients killed halfway through their body, and after their whole request
            killed = []
            for how in ("half", "whole", "half", "whole"):
                client = subprocess.Popen([sys.executable, "-c", CLIENT, str(port), json.dumps(bodies[0]), how],
                                          stdout=subprocess.PIPE, text=True)
                assert client.stdout.readline().strip() == "sent"
                client.send_signal(signal.SIGKILL)
                killed.append(client)
            for sock_bytes in (b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Le", b"GARBAGE\r\n\r\n"):
                with socket.create_connection(("127.0.0.1", port)) as sock:
                    sock.sendall(sock_bytes)
            answers = list(answers)
        for client in killed:
            client.wait()
        for body, (status, _, answer) in zip(bodies, answers):
            assert status == 200 and answer["results"] == expected(body)
        assert request(port, "GET", "/health")[0] == 200
        assert request(port, "POST", "/v1/score", bodies[1])[2]["results"] == expected(bodies[1])
        assert server.stop() == 0
    assert "Traceback" not in server.log()


def test_past_max_queue_is_503_with_retry_after(tmp_path):
    args = ["--judge", HASH_JUDGE + ",delay=0.5", "--max-batch", "1", "--max-wait-ms", "0", "--max-queue", "2"]
    with Server(args, tmp_path) as server:
        bodies = [{"chains": [wire_chain(i)]} for i in range(10)]
        with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
            answers = list(pool.map(lambda body: request(server.port, "POST", "/v1/score", body), bodies))
        busy = [(headers, answer) for status, headers, answer in answers if status == 503]
        assert busy and all(h.get("retry-after") == "1" and "busy" in a["error"] for h, a in busy)
        assert all(a["results"] == expected(b) for b, (s, _, a) in zip(bodies, answers) if s == 200)
        assert sum(status == 200 for status, _, _ in answers) >= 3  # one in the model, two queued
        status, _, answer = request(server.port, "POST", "/v1/score", {"chains": [wire_chain(i) for i in range(3)]})
        assert status == 400 and answer["error"].startswith("chains: 3 items, more than the server's limit of 2")
        assert request(server.port, "POST", "/v1/score", bodies[0])[0] == 200  # the queue drained
        text = request(server.port, "GET", "/metrics")[2]
        assert metric(text, "stepcritic_requests_total", status="503") == len(busy)
        assert metric(text, "stepcritic_queue_depth") == 0


def test_a_chain_the_judge_cannot_take_fails_only_its_own_request(tmp_path):
    bodies = [good_body(i) for i in range(5)]
    bodies[2] = {"chains": [wire_chain(40), {"id": "x", "question": "q", "steps": ["fine", "FAIL"]}]}
    with Server(["--judge", HASH_JUDGE, "--max-batch", "16", "--max-wait-ms", "300"], tmp_path) as server:
        with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
            answers = list(pool.map(lambda body: request(server.port, "POST", "/v1/score", body), bodies))
        for i, (body, (status, _, answer)) in enumerate(zip(bodies, answers)):
            if i == 2:
                assert status == 400 and answer["error"].startswith("chains[1]: the judge cannot score it"), answer
            else:
                assert status == 200 and answer["results"] == expected(body)


def test_sigterm_under_load_answers_every_accepted_request_and_exits_0(tmp_path):
    outcomes, lock = [], threading.Lock()
    signalled = threading.Event()

    def client(n):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        for k in range(10_000):
            body = good_body(100 * n + k)
            try:
                status, _, answer = request(server.port, "POST", "/v1/score", body, conn=conn)
            except (OSError, http.client.HTTPException):
                return  # the server stopped taking requests: this one was never accepted
            with lock:
                outcomes.append((body, status, answer, signalled.is_set()))

    with Server(["--judge", HASH_JUDGE + ",delay=0.03", "--max-batch", "4", "--max-wait-ms", "10"], tmp_path) as server:
        threads = [threading.Thread(target=client, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        time.sleep(0.8)
        server.proc.send_signal(signal.SIGTERM)
        signalled.set()
        returncode = server.proc.wait(30)
        for thread in threads:
            thread.join(30)
    assert returncode == 0
    assert outcomes and all(status == 200 and answer["results"] == expected(body)
                            for body, status, answer, _ in outcomes)
    assert any(after for *_, after in outcomes)  # requests in flight at the signal were answered
    received = re.search(r"drained: (\d+) requests received, (\d+) answered", server.log())
    assert received and int(received.group(1)) == int(received.group(2)) == len(outcomes) + 1  # + wait_ready's
