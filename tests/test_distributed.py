"""`stepcritic eval` under torchrun and accelerate launch: ranks share whole questions, each saves its own cache
shard, rank 0 merges them and writes what one process writes; a rank that fails or is killed stops the others, and
a rerun with any number of ranks asks only what no shard saved. Two processes on CPU with gloo."""

import json
import os
import signal
import subprocess
import sys
import time

import helpers
import pytest

from stepcritic import distributed
from stepcritic.data_prep.schema import load_chains, save_chains, validate_chain
from stepcritic.eval.cache import JsonlLog, merge_shards, shard_path
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.judges.generative import GenerativeJudge
from stepcritic.eval.judges.prompting import Reply
from stepcritic.testing.fake_openai_server import FakeOpenAIServer

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS_DIR)
# FAIL: "RANK:AFTER:raise|kill"; DELAY: seconds per chain
LOG, FAIL, DELAY = "STEPCRITIC_TEST_RANK_LOG", "STEPCRITIC_TEST_RANK_FAILS", "STEPCRITIC_TEST_RANK_DELAY"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "stepcritic"]
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--main_process_port", "0", "-m", "stepcritic"]
ONE = [sys.executable, "-m", "stepcritic"]


class RankJudge(Judge):
    """Used as `py:test_distributed.RankJudge` by the ranks: logs what its rank judged, sleeps $DELAY per chain, and on
    the rank that $FAIL names raises (or kills its own process) after so many chains. Those are environment
    variables, not options: the fingerprint stays the judge's, as for a real crash."""

    kind = "test-rank"
    needs_images = False
    batch_size = 1

    def judge_batch(self, chains):
        rank = os.environ.get("RANK", "0")
        fail_rank, after, how = (os.environ.get(FAIL) or "-:0:-").split(":")
        log = f"{os.environ[LOG]}.{rank}"
        done = sum(1 for _ in open(log)) if os.path.exists(log) else 0
        if rank == fail_rank and done >= int(after):
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise ConnectionError("endpoint went away")
        time.sleep(float(os.environ.get(DELAY, 0)) * len(chains))
        with open(log, "a") as f:
            f.write("".join(c["chain_id"] + "\n" for c in chains))
        return [Critique(c["chain_id"], [True] * (len(c["steps"]) - 1) + [False], chain_score=len(c["chain_id"]))
                for c in chains]


class PromptPolicy(GenerativeJudge):
    """`py:test_distributed.PromptPolicy`: a reply that only its prompt decides, right or wrong, so that any rank
    writes what one process writes."""

    kind = "py"

    def generate(self, prompts):
        texts = [json.dumps(p.messages, sort_keys=True, default=str) for p in prompts]
        if os.environ.get(LOG):  # counted, and made to fail, as `RankJudge` is
            rank = os.environ.get("RANK", "0")
            log = f"{os.environ[LOG]}.{rank}"
            done = sum(1 for _ in open(log)) if os.path.exists(log) else 0
            fail_rank, after, _ = (os.environ.get(FAIL) or "-:0:-").split(":")
            if rank == fail_rank and done >= int(after):
                raise ConnectionError("endpoint went away")
            with open(log, "a") as f:
                f.write("".join(f"{sum(map(ord, t))}\n" for t in texts))
        return [Reply(text=f"The circle is {colour}.\nSo the answer is {colour}.")
                for colour in ("red" if sum(map(ord, t)) % 3 else "blue" for t in texts)]


def write_chains(path, n):
    # groups of two and one scattered over the data, and steps of differing counts, so that shards are not equal by
    # count alone and a question's chains fall in several of one process's batches
    chains = helpers.chains(n)
    for i, chain in enumerate(chains):
        if i % 5 == 0:
            chain["group_id"] = "g0"
        chain["steps"] = chain["steps"][:2 + i % 2]
    save_chains([validate_chain(c) for c in chains], path)
    return {c["chain_id"] for c in chains}


def run(launcher, args, tmp_path, env=None, timeout=180):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", **(env or {}))
    env.pop("WORLD_SIZE", None)
    return subprocess.run(launcher + args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def judged(log):
    """The chain ids the `RankJudge` of every rank judged, in the order each logged them."""
    ids = []
    for rank in range(3):
        if os.path.exists(f"{log}.{rank}"):
            with open(f"{log}.{rank}") as f:
                ids += f.read().split()
    return ids


def saved(out):
    """Every chain id saved in the cache's critique logs, shards included."""
    return {r["chain_id"] for root, _, files in os.walk(os.path.join(out, "cache")) for name in files
            if name.startswith("critiques") for r in JsonlLog(os.path.join(root, name), "chain_id").records()}


# ----------------------------------------------------------------------------- sharding and merging

def test_questions_are_dealt_out_whole_by_their_work_the_same_way_every_time():
    work = {"big": 10, "a": 3, "b": 3, "c": 2, "d": 2, "e": 1}
    shares = distributed.split(work, 2)
    assert shares == distributed.split(dict(reversed(work.items())), 2)  # the order given does not matter
    assert set().union(*shares) == set(work) and not shares[0] & shares[1]
    assert sorted(sum(work[k] for k in share) for share in shares) == [10, 11]  # by count it would be 3 and 3
    assert distributed.split(work, 8)[7] == set()  # more ranks than questions: some have none


def test_ranks_ask_the_batches_one_process_asks_and_whole_questions():
    from stepcritic.eval.runner import rank_share

    groups = [0, 0, 1, 1, 1, 2, 3, 3, 4, 5, 5, 5, 6, 7, 7, 8, 9]  # in the data's order, as a chains folder holds them
    gold = [{"group_id": f"g{g}", "steps": [None] * (1 + i % 4)} for i, g in enumerate(groups)]
    questions = [{"group_id": f"g{g}"} for g in range(10)]
    shares = [rank_share(gold, questions, distributed.World(r, 3), batch_size=4) for r in range(3)]
    assert sorted(i for positions, _ in shares for i in positions) == list(range(len(gold)))
    for positions, asked in shares:
        batches = [positions[k:k + 4] for k in range(0, len(positions), 4)]
        assert all(b[0] % 4 == 0 and b == list(range(b[0], b[0] + len(b))) for b in batches)  # one process's batches
        assert {q["group_id"] for q in asked} == {gold[i]["group_id"] for i in positions}  # and whole questions
    assert shares == [rank_share(gold, questions, distributed.World(r, 3), batch_size=4) for r in range(3)]


def test_merging_shards_keeps_every_record_once_and_removes_the_shards(tmp_path):
    base = str(tmp_path / "judge" / "critiques.jsonl")
    os.makedirs(os.path.dirname(base))
    with open(base, "w") as f:
        f.write('{"chain_id": "a", "v": 1}\n{"chain_id": "b", "v"')  # a run of one process killed mid-write
    rank1 = JsonlLog(base, "chain_id", shard="rank1")
    assert set(rank1.load()) == {"a"}  # a rank reads the merged log and its own shard
    rank1.append([{"chain_id": "b", "v": 2}, {"chain_id": "a", "v": 1}])
    rank1.close()
    with open(shard_path(base, "rank0"), "w") as f:
        f.write('{"chain_id": "c", "v": 3}\n{"chain_id": "d"')  # a rank killed mid-write
    assert merge_shards(str(tmp_path)) == 2
    assert os.listdir(os.path.dirname(base)) == ["critiques.jsonl"]
    with open(base) as f:
        assert [json.loads(line) for line in f] == [{"chain_id": "a", "v": 1}, {"chain_id": "c", "v": 3},
                                                    {"chain_id": "b", "v": 2}]
    assert merge_shards(str(tmp_path)) == 0


def test_the_world_comes_from_the_launchers_variables():
    assert distributed.detect({}) == distributed.World(0, 1, 0)
    world = distributed.detect({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "node0"})
    assert (world.rank, world.size, world.local_rank, world.shard, world.main) == (3, 4, 1, "rank3", False)
    with pytest.raises(distributed.UserError, match="MASTER_ADDR"):
        distributed.detect({"RANK": "0", "WORLD_SIZE": "2"})
    with pytest.raises(distributed.UserError, match="not a rank"):
        distributed.detect({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "x"})


def test_each_rank_takes_the_gpu_of_its_local_rank(monkeypatch):
    import torch

    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    distributed._place(distributed.World(rank=11, size=16, local_rank=3))
    assert chosen == [3]  # "cuda" means this GPU from here on; no device_map, no tensor parallelism


# ----------------------------------------------------------------------------- launched

def test_two_ranks_write_the_metrics_and_report_of_one_process(tmp_path, tiny_prm):
    # the PRM in batches of 3: a padded batch's scores move in the 7th digit with the chains beside it, so the ranks
    # must ask the batches one process asks
    write_chains(str(tmp_path / "chains"), 20)
    args = ["eval", "--chains", "chains", "--judge", f"prm:{tiny_prm},batch_size=3", "--judge",
            "random,rate=0.3,seed=0", "--no-progress", "--tasks", "critique", "choice", "shiftcheck", "rpts",
            "best-of-n", "pairwise", "--out"]
    one = run(ONE, args + ["one"], tmp_path)
    assert one.returncode == 0, one.stderr[-3000:]
    two = run(TORCHRUN, args + ["two"], tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    for name in ("metrics.json", "report.md", "predictions.jsonl"):
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    left = [name for _, _, files in os.walk(tmp_path / "two" / "cache") for name in files if ".rank" in name]
    assert left == []  # every shard merged
    assert two.stdout.count("wrote") == 1  # rank 0 alone writes and says so


def test_accelerate_launch_runs_it_unchanged(tmp_path):
    write_chains(str(tmp_path / "chains"), 12)
    args = ["eval", "--chains", "chains", "--judge", "py:test_distributed.RankJudge", "--no-progress", "--out"]
    env = {LOG: str(tmp_path / "log")}
    one = run(ONE, args + ["one"], tmp_path, env=env)
    assert one.returncode == 0, one.stderr[-3000:]
    os.remove(tmp_path / "log.0")
    two = run(ACCELERATE, args + ["two"], tmp_path, env=env)
    assert two.returncode == 0, two.stderr[-3000:]
    assert (tmp_path / "two" / "metrics.json").read_bytes() == (tmp_path / "one" / "metrics.json").read_bytes()
    assert os.path.exists(tmp_path / "log.1")  # the second rank judged its share


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_failed_rank_stops_every_rank_and_a_rerun_asks_only_what_no_shard_saved(tmp_path, how):
    """Rank 1 fails after 3 chains while rank 0 still has seconds of work; every rank stops at once. The rerun, with
    one process after a raise and with two after a kill, judges exactly the chains no shard saved."""
    all_ids = write_chains(str(tmp_path / "chains"), 30)
    args = ["eval", "--chains", "chains", "--judge", "py:test_distributed.RankJudge", "--no-progress",
            "--tasks", "critique", "choice", "--out", "out"]
    first_log = str(tmp_path / "first")
    started = time.monotonic()
    first = run(TORCHRUN, args, tmp_path, env={LOG: first_log, FAIL: f"1:3:{how}", DELAY: "0.5"},
                timeout=120)
    elapsed = time.monotonic() - started
    assert first.returncode != 0
    assert len(judged(first_log)) < len(all_ids)
    with open(f"{first_log}.0") as f:
        assert len(f.read().split()) < 12, "rank 0 went on judging its share of 15 chains"
    assert elapsed < 60, elapsed
    if how == "raise":
        lines = [line for line in first.stderr.splitlines() if line.startswith("stepcritic eval: error: ")]
        assert all("rank 1 of 2 failed: " in line and "endpoint went away" in line for line in lines)
        assert len(lines) in (1, 2) and "rank 1 of 2 failed" in lines[0]  # rank 0's line, when torchrun let it print
        assert "local_rank: 1" in first.stderr.split("Root Cause")[1]  # torchrun names the rank that failed first
        assert first.stderr.count("Traceback") == first.stderr.count("errors.ChildFailedError")  # torchrun's alone
    kept = saved(tmp_path / "out")
    assert set(judged(first_log)) == kept

    second_log = str(tmp_path / "second")
    rerun = run(ONE if how == "raise" else TORCHRUN, args, tmp_path, env={LOG: second_log})
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert sorted(judged(second_log)) == sorted(all_ids - kept)  # nothing saved is asked again
    [log] = [os.path.join(root, "critiques.jsonl") for root, _, files in os.walk(tmp_path / "out" / "cache")
             if "critiques.jsonl" in files]
    with open(log) as f:
        assert sorted(json.loads(line)["chain_id"] for line in f) == sorted(all_ids)  # nothing lost, nothing twice


def test_a_rank_killed_on_one_node_stops_the_ranks_of_the_other(tmp_path):
    """Two launchers on one host as two nodes of one process each, meeting at a c10d rendezvous: the second
    node's rank dies, and the first node's, which no launcher of its own would stop, stops within seconds. The first
    node hosts the rendezvous store, as a job's first node does: were it the dying node's, the first node's launcher
    would lose the store and kill its rank itself, before the rank could say why."""
    import socket

    all_ids = write_chains(str(tmp_path / "chains"), 30)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    node = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-nodes", "-m",
            "stepcritic", "eval", "--chains", "chains", "--judge", "py:test_distributed.RankJudge", "--no-progress",
            "--tasks", "critique", "--out", "out"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", STEPCRITIC_SILENT_TIMEOUT="3", **{LOG: str(tmp_path / "log"), FAIL: "1:3:kill",
                                                                        DELAY: "1.0"})
    logs = [open(tmp_path / f"node{n}.err", "w") for n in range(2)]
    nodes = [subprocess.Popen(node, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=logs[0])]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and nodes[0].poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    nodes.append(subprocess.Popen(node, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=logs[1]))
    try:
        codes = [p.wait(timeout=90) for p in nodes]
    finally:
        for p, log in zip(nodes, logs):
            p.kill()
            log.close()
    assert all(code != 0 for code in codes)
    errors = "".join((tmp_path / f"node{n}.err").read_text() for n in range(2))
    assert "rank 0 stopped: rank 1 of 2 stopped answering" in errors
    with open(tmp_path / "log.0") as f:
        assert len(f.read().split()) < len(all_ids) // 2 - 3, "rank 0 went on judging its share of 15 chains"


def test_a_server_judge_is_asked_from_rank_0_alone_at_its_own_concurrency(tmp_path):
    all_ids = write_chains(str(tmp_path / "chains"), 12)
    with FakeOpenAIServer(latency=0.05) as server:
        two = run(TORCHRUN, ["eval", "--chains", "chains", "--no-progress", "--tasks", "critique", "--out", "out",
                             "--judge", f"openai:fake-model,base_url={server.base_url},concurrency=2"], tmp_path)
        assert two.returncode == 0, two.stderr[-3000:]
        assert len(server.requests) == len(all_ids) and server.max_in_flight <= 2


def test_a_server_policy_is_asked_from_rank_0_alone_at_its_own_concurrency(tmp_path):
    write_chains(str(tmp_path / "chains"), 12)  # 5 groups, of 3 distinct questions (image and text): 6 samples
    with FakeOpenAIServer(latency=0.05) as server:
        two = run(TORCHRUN, ["generate", "--chains", "chains", "--samples", "2", "--quiet", "--out", "out",
                             "--policy", f"openai:fake-model,base_url={server.base_url},concurrency=2"], tmp_path)
        assert two.returncode == 0, two.stderr[-3000:]
        assert len(server.requests) == 3 * 2 and server.max_in_flight <= 2  # each sample asked once, by rank 0


def folder(out):
    """A chains folder's chains and stats, but for the time the run took."""
    with open(os.path.join(out, "stats.json")) as f:
        stats = {k: v for k, v in json.load(f).items() if k != "wall_seconds"}
    return list(load_chains(str(out))), stats


@pytest.mark.parametrize("command", [
    ["generate", "--policy", "py:test_distributed.PromptPolicy", "--samples", "3"],
    ["data", "label", "--completer", "py:policy_fakes.ReachesGold", "--method", "binary", "--rollouts", "2"],
], ids=["generate", "label"])
def test_generate_and_label_on_two_ranks_write_the_folder_of_one_process(tmp_path, command):
    chains = [helpers.chain(f"c{i}", group_id=f"g{i % 4}", steps=[
        helpers.step("The image shows one circle."), helpers.step("The circle is wrong." if i % 3 else "It is red."),
        helpers.step("So the answer is red.")]) for i in range(10)]
    save_chains([validate_chain(c) for c in chains], str(tmp_path / "chains"))
    args = [*command, "--chains", "chains", "--quiet", "--out"]
    one = run(ONE, args + ["one"], tmp_path)
    assert one.returncode == 0, one.stderr[-3000:]
    two = run(TORCHRUN, args + ["two"], tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    assert folder(tmp_path / "two") == folder(tmp_path / "one")
    assert len(two.stdout.splitlines()) == 1  # rank 0 alone says what it wrote


def test_the_scaling_benchmark_times_each_process_count_on_the_same_metrics(tmp_path):
    from stepcritic.bench.parallel import scaling

    report = scaling(12, [1, 2], 1, "random,rate=0.3,seed=0", str(tmp_path))  # it fails on differing metrics
    assert set(report["seconds"]) == set(report["cpu_seconds"]) == {1, 2} and report["speedup"][1] == 1.0


def test_generate_stopped_on_two_ranks_resumes_in_one_process_asking_only_what_no_shard_saved(tmp_path):
    chains = [helpers.chain(f"c{i}", group_id=f"g{i}", question=f"How many circles are there in picture {i}?")
              for i in range(8)]
    save_chains([validate_chain(c) for c in chains], str(tmp_path / "chains"))
    args = ["generate", "--policy", "py:test_distributed.PromptPolicy,batch_size=1", "--samples", "2",
            "--chains", "chains", "--quiet", "--out", "out"]
    first = run(TORCHRUN, args, tmp_path, env={LOG: str(tmp_path / "first"), FAIL: "1:3:raise"})
    assert first.returncode != 0 and "rank 1 of 2 failed" in first.stderr
    asked_first = len(judged(str(tmp_path / "first")))
    assert 3 <= asked_first < 16
    again = run(ONE, args, tmp_path, env={LOG: str(tmp_path / "second")})
    assert again.returncode == 0, again.stderr[-3000:]
    assert asked_first + len(judged(str(tmp_path / "second"))) == 16  # each of the 16 samples asked once in all
