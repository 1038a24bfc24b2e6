"""`stepcritic eval` writes the same metrics.json and report.md, byte for byte, as the snapshots in
tests/snapshots/: moving code between eval's modules must not change a number, a key order or a line of the report.

A deliberate change of the output is recorded with `STEPCRITIC_UPDATE_SNAPSHOTS=1 pytest tests/test_eval_snapshot.py`,
and the snapshot diff is then reviewed like code."""

import os

import pytest
from helpers import GullibleCorrector, two_category_chains

from stepcritic import cli as stepcritic_cli
from stepcritic.eval.runner import TASKS

SNAPSHOTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "snapshots")
UPDATE = os.environ.get("STEPCRITIC_UPDATE_SNAPSHOTS") == "1"
OUTPUTS = ("metrics.json", "report.md")
SNAPSHOT_TASKS = ("critique", "choice", "shiftcheck", "verifier", "rpts", "best-of-n", "correction")
assert set(SNAPSHOT_TASKS) <= set(TASKS)

RUNS = {
    # the default tasks, judged by the baselines
    "default-tasks": ["--judge", "always-correct", "--judge", "random,rate=0.4,seed=3", "--judge", "majority"],
    # every task of the snapshot's time, so verifier questions, corrections, best-of-n and RPTS all reach the results
    # and the report (the tasks registered after it have tests of their own: the snapshot stays as it was); the
    # corrector keeps the spec the snapshots name, test_eval_correction's name for the class in helpers
    "all-tasks": ["--judge", "always-correct", "--judge", "random,rate=0.3,seed=0", "--tasks", *SNAPSHOT_TASKS,
                  "--corrector", "py:test_eval_correction.GullibleCorrector", "--bon-subsets", "5"],
}


@pytest.fixture(scope="module")
def chains(tmp_path_factory):
    from stepcritic.data_prep.schema import save_chains

    path = str(tmp_path_factory.mktemp("snapshot") / "chains")
    save_chains(two_category_chains(), path)
    return path


@pytest.mark.parametrize("name", sorted(RUNS))
def test_eval_outputs_match_their_snapshots(name, chains, tmp_path, monkeypatch):
    monkeypatch.setattr(GullibleCorrector, "REFERENCES", {"What colour is the shape?": "red"})
    monkeypatch.setattr(GullibleCorrector, "asked", [])
    out = str(tmp_path / "out")
    assert stepcritic_cli.main(["eval", "--chains", chains, "--out", out, "--no-progress", *RUNS[name]]) == 0
    for output in OUTPUTS:
        with open(os.path.join(out, output), "rb") as f:
            written = f.read()
        snapshot = os.path.join(SNAPSHOTS, name, output)
        if UPDATE:
            os.makedirs(os.path.dirname(snapshot), exist_ok=True)
            with open(snapshot, "wb") as f:
                f.write(written)
        with open(snapshot, "rb") as f:
            assert written == f.read(), f"{output} of {name!r} differs from {snapshot}"
