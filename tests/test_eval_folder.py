"""An output folder's report covers every judge judged into it, and ShiftCheck reuses the
chain scores a score-based judge already gave instead of scoring every shift again."""

import json
import os

import helpers
import pytest
from helpers import CountingJudge

from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.runner import build_judge, evaluate


@pytest.fixture
def chains_dir(tmp_path):
    path = str(tmp_path / "chains")
    chains = helpers.chains(10)
    for c in chains:  # g0 and g1 ask 2-option questions, "big" a 4-option one; g3-ok and g4-ok stand alone
        if c["chain_id"] in ("g2-ok", "g2-bad", "g3-bad", "g4-bad"):
            c["group_id"] = "big"
    save_chains([validate_chain(c) for c in chains], path)
    return path


def judged(out):
    with open(os.path.join(out, "metrics.json")) as f:
        metrics = json.load(f)
    with open(os.path.join(out, "report.md")) as f:
        report = f.read()
    with open(os.path.join(out, "predictions.jsonl")) as f:
        preds = [json.loads(line) for line in f]
    return metrics, report, preds


def quiet(chains_dir, judges, out, **kw):
    return evaluate(chains_dir, judges, out, progress=False, log=lambda line: None, **kw)


def test_the_report_keeps_the_judges_of_earlier_commands(chains_dir, tmp_path):
    out = str(tmp_path / "out")
    quiet(chains_dir, [build_judge("always-correct")], out)
    quiet(chains_dir, [build_judge("random,rate=0.3,seed=0")], out)
    metrics, report, preds = judged(out)
    assert list(metrics["judges"]) == ["random,rate=0.3,seed=0", "always-correct"]
    assert metrics["judges"]["always-correct"]["run"]["earlier_command"] is True
    assert metrics["earlier_judges"] == {"included": ["always-correct"], "left_out": []}
    assert "| `always-correct` |" in report and "From earlier commands into this folder" in report
    assert {p["judge"] for p in preds} == {"always-correct", "random,rate=0.3,seed=0"}
    # the same numbers as when it was judged by the command itself
    alone = quiet(chains_dir, [build_judge("always-correct")], str(tmp_path / "alone"))
    assert metrics["judges"]["always-correct"]["overall"] == json.loads(json.dumps(
        alone["judges"]["always-correct"]["overall"]))


def test_a_runtime_option_or_a_new_fingerprint_supersedes_the_older_cache(chains_dir, tmp_path):
    out = str(tmp_path / "out")
    quiet(chains_dir, [ScoringJudge("scoring", version=1)], out)
    quiet(chains_dir, [build_judge("always-correct")], out)  # another judge: reported beside it
    quiet(chains_dir, [ScoringJudge("scoring", version=2)], out)  # a new fingerprint of the same judge
    metrics = quiet(chains_dir, [ScoringJudge("scoring,batch_size=4", batch_size=4)], out)  # back to no version
    assert sorted(metrics["judges"]) == ["always-correct", "scoring,batch_size=4"]
    assert len(os.listdir(os.path.join(out, "cache"))) == 4  # the scoring caches are kept, but not reported


def test_an_earlier_judge_without_every_chain_is_left_out_and_named(chains_dir, tmp_path):
    out = str(tmp_path / "out")
    quiet(chains_dir, [build_judge("majority")], out, limit=4)
    metrics = quiet(chains_dir, [build_judge("always-correct")], out)
    assert list(metrics["judges"]) == ["always-correct"]
    assert metrics["earlier_judges"]["left_out"] == ["majority"]
    assert "`majority`" in judged(out)[1]
    # the other way round it is complete for the first four chains and is reported
    limited = quiet(chains_dir, [build_judge("random,seed=1")], out, limit=4)
    assert sorted(limited["judges"]) == ["always-correct", "majority", "random,seed=1"]


class ScoringJudge(Judge):
    """A score-based judge that counts the chains it scores."""

    kind = "test-scoring"
    needs_images = False

    def __init__(self, spec, **options):
        super().__init__(spec, **options)
        self.scored = 0

    def judge_batch(self, chains):
        self.scored += len(chains)
        return [Critique(c["chain_id"], [True] * len(c["steps"]),
                         chain_score=(sum(map(ord, c["chain_id"])) % 7) / 7) for c in chains]


def test_shiftcheck_reuses_the_chain_scores_of_a_score_based_judge(chains_dir, tmp_path):
    reused, rescored = ScoringJudge("scoring"), ScoringJudge("scoring")
    with_critiques = quiet(chains_dir, [reused], str(tmp_path / "a"))
    shift_only = quiet(chains_dir, [rescored], str(tmp_path / "b"), tasks=("shiftcheck",))
    assert reused.scored == 10  # each chain once, for its critique; no shift scored again
    assert rescored.scored == 2 * 2 * 2 + 4 * 4  # without critiques: every option of every shift
    assert with_critiques["judges"]["scoring"]["run"]["picks"]["from_chain_scores"] == 2 * 2 + 4
    a, b = (m["judges"]["scoring"]["overall"]["shiftcheck"] for m in (with_critiques, shift_only))
    assert a == b and a["bias_rate"] is not None


def test_a_judge_that_overrides_pick_best_is_still_asked():
    assert not CountingJudge("counting").picks_by_chain_score()
    assert ScoringJudge("scoring").picks_by_chain_score()
    assert build_judge("text-only:always-correct").picks_by_chain_score()
