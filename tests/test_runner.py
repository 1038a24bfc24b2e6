"""The evaluation runner: baseline results, the judgment cache, and resuming after a crash or a kill."""

import json
import os
import signal
import subprocess
import sys
import time

import helpers
import pytest
from helpers import CountingJudge

from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval.cache import JsonlLog
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.runner import EvalError, build_judge, evaluate
from stepcritic.eval.shiftcheck import shiftcheck_questions
from stepcritic.testing.fake_openai_server import FakeOpenAIServer

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS_DIR)
SLOW_JUDGE_LOG = "STEPCRITIC_TEST_SLOW_JUDGE_LOG"


class SlowJudge(Judge):
    """Used through `py:test_runner.SlowJudge` by a separate process: sleeps per chain and logs what it judged."""

    kind = "test-slow"
    needs_images = False
    batch_size = 1

    def judge_batch(self, chains):
        time.sleep(self.options.get("delay", 0.05) * len(chains))
        with open(os.environ[SLOW_JUDGE_LOG], "a") as log:
            log.write("".join(c["chain_id"] + "\n" for c in chains))
        return [Critique(c["chain_id"], [True] * len(c["steps"]), chain_score=0.5) for c in chains]


@pytest.fixture
def chains_dir(tmp_path):
    path = str(tmp_path / "chains")
    save_chains([validate_chain(c) for c in helpers.chains(12)], path)
    return path


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_baseline_judges_give_one_prediction_per_chain_and_expected_scores(chains_dir, tmp_path):
    out = str(tmp_path / "out")
    judges = [build_judge("always-correct"), build_judge("random,rate=0.3,seed=0")]
    metrics = evaluate(chains_dir, judges, out, progress=False, log=lambda line: None)

    preds = read_jsonl(os.path.join(out, "predictions.jsonl"))
    assert len(preds) == 2 * 12
    for name in ("always-correct", "random,rate=0.3,seed=0"):
        assert sorted(p["chain_id"] for p in preds if p["judge"] == name) == sorted(
            c["chain_id"] for c in helpers.chains(12))
    always = metrics["judges"]["always-correct"]["overall"]
    assert always["critique"]["step"]["recall"] == 0.0  # it never flags anything
    assert always["critique"]["step"]["tp"] == 0 and always["critique"]["step"]["fn"] == 12  # 6 bad chains x 2
    assert always["critique"]["invalid_rate"] == 0.0
    assert always["choice"]["n_groups"] == 6 and always["choice"]["accuracy"] == 0.5  # all tied -> chance
    # ties go to the first option, so the pick moves with the shift: never right under every shift
    assert always["shiftcheck"]["circular_accuracy"] == 0.0
    assert always["shiftcheck"]["position_distribution_by_n_options"][2] == {"A": 100.0, "B": 0.0}
    random_run = metrics["judges"]["random,rate=0.3,seed=0"]["overall"]
    assert random_run["critique"]["step"]["n"] == 36
    assert metrics["judges"]["always-correct"]["run"]["critiques"] == {"cached": 0, "judged": 12, "invalid": 0,
                                                                       "failed": 0}


def test_resume_after_a_crash_judges_only_the_missing_chains(chains_dir, tmp_path):
    out = str(tmp_path / "out")
    crashing = CountingJudge("counting")
    crashing.fail_after = 5
    with pytest.raises(EvalError, match="endpoint went away"):
        evaluate(chains_dir, [crashing], out, tasks=("critique", "choice"), progress=False)
    assert len(crashing.judged) == 4  # two batches of two finished before the crash

    again = CountingJudge("counting")
    evaluate(chains_dir, [again], out, tasks=("critique", "choice"), progress=False, log=lambda line: None)
    all_ids = {c["chain_id"] for c in helpers.chains(12)}
    assert sorted(again.judged) == sorted(all_ids - set(crashing.judged))
    preds = read_jsonl(os.path.join(out, "predictions.jsonl"))
    assert sorted(p["chain_id"] for p in preds) == sorted(all_ids)

    third = CountingJudge("counting")
    evaluate(chains_dir, [third], out, progress=False, log=lambda line: None)
    assert third.judged == [] and third.picks == 12  # ShiftCheck is new: 6 groups x 2 shifts
    fourth = CountingJudge("counting")
    evaluate(chains_dir, [fourth], out, progress=False, log=lambda line: None)
    assert fourth.judged == [] and fourth.picks == 0


class ImageTypeJudge(CountingJudge):
    """Records the type of image each chain arrives with."""

    def judge_batch(self, chains):
        self.image_types = getattr(self, "image_types", set()) | {type(c["image"]).__name__ for c in chains}
        return super().judge_batch(chains)


def test_images_are_decoded_only_for_judges_that_need_them(chains_dir, tmp_path):
    text_judge, image_judge = ImageTypeJudge("text"), ImageTypeJudge("image")
    image_judge.needs_images = True
    evaluate(chains_dir, [text_judge, image_judge], str(tmp_path / "out"), tasks=("critique",), progress=False,
             log=lambda line: None)
    assert text_judge.image_types == {"dict"}  # raw {"bytes", "path"}, never decoded
    assert image_judge.image_types == {"PngImageFile"}


def test_changing_a_judge_spec_invalidates_only_that_judge(chains_dir, tmp_path):
    out = str(tmp_path / "out")
    first = [CountingJudge("keep"), CountingJudge("change", version=1)]
    evaluate(chains_dir, first, out, progress=False, log=lambda line: None)
    second = [CountingJudge("keep"), CountingJudge("change", version=2)]
    metrics = evaluate(chains_dir, second, out, progress=False, log=lambda line: None)

    assert second[0].judged == [] and second[0].picks == 0
    assert len(second[1].judged) == 12 and second[1].picks == 12
    assert metrics["judges"]["change"]["fingerprint"] == second[1].fingerprint() != first[1].fingerprint()
    preds = read_jsonl(os.path.join(out, "predictions.jsonl"))
    assert {p["fingerprint"] for p in preds if p["judge"] == "change"} == {second[1].fingerprint()}


def test_cache_drops_a_torn_last_line_and_appends_cleanly(tmp_path):
    path = str(tmp_path / "log.jsonl")
    with open(path, "w") as f:
        f.write('{"chain_id": "a", "v": 1}\n{"chain_id": "b", "v"')  # killed mid-write
    log = JsonlLog(path, key="chain_id")
    assert list(log.load()) == ["a"]
    log.append([{"chain_id": "b", "v": 2}])
    log.close()
    assert log.load() == {"a": {"chain_id": "a", "v": 1}, "b": {"chain_id": "b", "v": 2}}


def test_shiftcheck_questions_keep_one_correct_chain_and_at_most_four():
    gold = [{"chain_id": f"c{i}", "group_id": "g", "category": None, "chain_correct": i in (1, 3)}
            for i in range(7)] + [{"chain_id": "lonely", "group_id": "h", "category": None, "chain_correct": True}]
    [question] = shiftcheck_questions(gold)
    assert question["gold"] == "c1"
    assert question["options"] == ["c0", "c1", "c2", "c4"]  # c3 (a second correct chain) left out


def test_a_killed_run_resumes_without_lost_or_duplicated_judgments(tmp_path):
    """SIGKILL `python -m stepcritic.eval` mid-run, rerun it, and check every chain is judged exactly once."""
    chains = str(tmp_path / "chains")
    save_chains([validate_chain(c) for c in helpers.chains(40)], chains)
    out = str(tmp_path / "out")
    command = [sys.executable, "-m", "stepcritic.eval", "--chains", chains, "--out", out, "--no-progress",
               "--judge", "py:test_runner.SlowJudge,delay=0.05", "--tasks", "critique", "choice"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")]))

    first_log, second_log = str(tmp_path / "first.log"), str(tmp_path / "second.log")
    proc = subprocess.Popen(command, env={**env, SLOW_JUDGE_LOG: first_log}, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    cache_file = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        found = [os.path.join(root, "critiques.jsonl") for root, _, files in os.walk(os.path.join(out, "cache"))
                 if "critiques.jsonl" in files]
        if found and sum(1 for _ in open(found[0])) >= 5:
            cache_file = found[0]
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    proc.wait()
    assert cache_file, f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
    assert proc.returncode == -signal.SIGKILL
    cached_after_kill = set(JsonlLog(cache_file, key="chain_id").load())
    assert 5 <= len(cached_after_kill) < 40

    rerun = subprocess.run(command, env={**env, SLOW_JUDGE_LOG: second_log}, cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    all_ids = {c["chain_id"] for c in helpers.chains(40)}
    with open(second_log) as f:
        judged_on_rerun = f.read().split()
    assert sorted(judged_on_rerun) == sorted(all_ids - cached_after_kill)
    cache_ids = [r["chain_id"] for r in read_jsonl(cache_file)]
    assert sorted(cache_ids) == sorted(all_ids)  # nothing lost, nothing twice
    pred_ids = [p["chain_id"] for p in read_jsonl(os.path.join(out, "predictions.jsonl"))]
    assert sorted(pred_ids) == sorted(all_ids)


def test_a_killed_api_run_repeats_at_most_concurrency_requests(tmp_path):
    """SIGKILL an OpenAI-judge run mid-way (between what used to be batch boundaries) and rerun it: only the
    requests in flight at the kill (at most `concurrency`) are sent twice, because every judgment is saved as
    soon as it is answered and the pool never runs ahead of what has been saved."""
    n_chains, concurrency, kill_after = 40, 4, 20
    chains = str(tmp_path / "chains")
    save_chains([validate_chain(c) for c in helpers.chains(n_chains)], chains)
    out = str(tmp_path / "out")
    with FakeOpenAIServer(latency=0.1) as server:
        command = [sys.executable, "-m", "stepcritic.eval", "--chains", chains, "--out", out, "--no-progress",
                   "--judge", f"openai:fake-model,base_url={server.base_url},concurrency={concurrency}",
                   "--tasks", "critique"]
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        answered = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            with server._lock:
                answered = len(server.requests) - server.in_flight
            if answered >= kill_after:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)
        proc.wait()
        assert answered >= kill_after, f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
        assert proc.returncode == -signal.SIGKILL
        sent_before_kill = len(server.requests)
        [cache_file] = [os.path.join(root, "critiques.jsonl") for root, _, files in os.walk(os.path.join(out, "cache"))
                        if "critiques.jsonl" in files]
        saved_at_kill = len(JsonlLog(cache_file, key="chain_id").load())

        rerun = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert rerun.returncode == 0, rerun.stderr[-2000:]
        total = len(server.requests)
    counts = f"{sent_before_kill} requests before the kill, {saved_at_kill} judgments saved, {total} requests in all"
    assert n_chains - saved_at_kill == total - sent_before_kill, counts  # the rerun asked only for unsaved chains
    assert sent_before_kill - saved_at_kill <= concurrency, counts       # those lost were in flight
    assert total <= n_chains + concurrency, counts
    all_ids = sorted(c["chain_id"] for c in helpers.chains(n_chains))
    assert sorted(r["chain_id"] for r in read_jsonl(cache_file)) == all_ids  # nothing lost, nothing twice
    print(counts)


def test_miceval_normal_choice_ranking_groups(miceval_jsonl, tmp_path):
    from stepcritic.data_prep.ingest import ingest

    chains = str(tmp_path / "miceval")
    ingest("miceval", miceval_jsonl, chains, log=lambda *args: None)
    metrics = evaluate(chains, [build_judge("always-correct"), build_judge("random,rate=0.3,seed=0")],
                       str(tmp_path / "out"), progress=False, log=lambda line: None)
    for result in metrics["judges"].values():
        assert (result["overall"]["choice"]["n_groups"], result["overall"]["choice"]["n_chains"]) == (36, 134)
    # a constant judge ties every chain of a group: it scores chance, the mean share of fully correct chains
    from collections import defaultdict

    from stepcritic.data_prep.schema import load_chains

    groups = defaultdict(list)
    for chain in load_chains(chains, decode_images=False).select_columns(["group_id", "chain_correct"]).to_list():
        if chain["chain_correct"] is not None:
            groups[chain["group_id"]].append(chain["chain_correct"])
    mixed = [sum(labels) / len(labels) for labels in groups.values() if len(set(labels)) == 2]
    assert len(mixed) == 36
    assert metrics["judges"]["always-correct"]["overall"]["choice"]["accuracy"] == pytest.approx(sum(mixed) / 36)
