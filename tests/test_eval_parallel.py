"""`stepcritic eval --jobs N` (eval/parallel.py): judges asked side by side in worker processes give the report one
job gives, judges that their spec cannot rebuild stay in the main process, and a worker's error is one line."""

import hashlib
import json
import os

import helpers
import pytest

from stepcritic import cli as stepcritic_cli
from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval.config import EvalConfig
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.runner import build_judge, evaluate

SPECS = ["py:test_eval_parallel.TextHashJudge", "majority", "random,rate=0.5,seed=0"]


class TextHashJudge(Judge):
    """Scores each step by a hash of its text, so every step gets its own probability; refuses a step "FAIL"."""

    kind = "text-hash"
    needs_images = False

    def judge_batch(self, chains):
        out = []
        for chain in chains:
            if any(step["text"] == "FAIL" for step in chain["steps"]):
                raise ValueError("this judge cannot read the step FAIL")
            p = [int(hashlib.sha256((chain["chain_id"] + s["text"]).encode()).hexdigest()[:8], 16) / 2**32
                 for s in chain["steps"]]
            out.append(Critique(chain["chain_id"], [x < 0.5 for x in p], p_incorrect=p, chain_score=1 - max(p)))
        return out


class InCodeJudge(Judge):
    """A judge made in code: its spec names no registered kind, so no worker can rebuild it."""

    kind = "in-code"
    needs_images = False
    pids: list = []

    def judge_batch(self, chains):
        InCodeJudge.pids.append(os.getpid())
        return [Critique(c["chain_id"], [k % 2 == 0 for k in range(len(c["steps"]))]) for c in chains]


@pytest.fixture
def chains_dir(tmp_path):
    path = str(tmp_path / "chains")
    save_chains([validate_chain(c) for c in helpers.chains(6)], path)
    return path


def _report(out: str) -> tuple[dict, list]:
    with open(os.path.join(out, "metrics.json")) as f:
        metrics = json.load(f)
    with open(os.path.join(out, "predictions.jsonl")) as f:
        predictions = sorted(f.read().splitlines())
    return {name: judge["overall"] for name, judge in metrics["judges"].items()}, predictions


def test_jobs_give_the_report_one_job_gives(chains_dir, tmp_path):
    for jobs in (1, 2):
        evaluate(EvalConfig(chains_dir, [build_judge(s) for s in SPECS], str(tmp_path / f"jobs{jobs}"), jobs=jobs,
                            progress=False, log=lambda line: None))
    one, two = _report(str(tmp_path / "jobs1")), _report(str(tmp_path / "jobs2"))
    assert set(one[0]) == set(SPECS)
    assert one == two


def test_a_judge_its_spec_cannot_rebuild_is_asked_in_the_main_process(chains_dir, tmp_path):
    from stepcritic.eval.parallel import rebuilds

    in_code = InCodeJudge("in-code")
    assert not rebuilds(in_code) and rebuilds(build_judge("majority"))
    InCodeJudge.pids = []
    metrics = evaluate(EvalConfig(chains_dir, [in_code, build_judge("majority")], str(tmp_path / "o"), jobs=2,
                                  tasks=("critique",), progress=False, log=lambda line: None))
    assert InCodeJudge.pids and set(InCodeJudge.pids) == {os.getpid()}
    assert metrics["judges"]["in-code"]["run"]["critiques"]["judged"] == 6


def test_a_judge_failing_in_a_worker_stops_with_one_line(tmp_path, capsys):
    chains = helpers.chains(4)
    chains[1]["steps"][0]["text"] = "FAIL"  # TextHashJudge refuses this step
    path = str(tmp_path / "chains")
    save_chains([validate_chain(c) for c in chains], path)
    argv = ["eval", "--chains", path, "--judge", SPECS[0], "--judge", "majority", "--out", str(tmp_path / "o"),
            "--jobs", "2", "--tasks", "critique", "--no-progress"]
    assert stepcritic_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "cannot read the step FAIL" in err and "Traceback" not in err
    assert stepcritic_cli.main(argv[:9] + ["--jobs", "0"]) == 2
    assert "--jobs must be at least 1" in capsys.readouterr().err
