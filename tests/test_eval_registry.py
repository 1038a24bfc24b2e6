"""The metric registry drives the report, and nothing it advertises is left uncomputed.

One `evaluate` run on synthetic chains with judges that between them can produce every metric (a noisy
oracle that gives verdicts, probabilities, explanations, answer verdicts, chain scores and verifier answers; the
random baseline, whose random chain scores fail 4-option ShiftCheck questions; a corrector for the correction task)
must hold every registered metric of the tasks run, overall and per breakdown, with a value from at least one judge.
"""

import hashlib
import json
import os

import pytest
from helpers import GullibleCorrector, gold_labels

from stepcritic.data_prep.prompts import VERIFIER_TASKS
from stepcritic.data_prep.schema import save_chains
from stepcritic.data_prep.synth import synthesize
from stepcritic.eval import correction, intervals, results, verifier
from stepcritic.eval.judges.base import Critique, Judge, best_index
from stepcritic.eval.runner import TASKS, build_judge, evaluate
from stepcritic.eval.tasks import METRICS, find, has, lookup, metrics_for

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def corrections_of(path: str, gold: list[dict], judge: str) -> dict | None:
    """One judge's corrections as `correction.run` returned them, read back from the OUT/corrections.jsonl it wrote
    (None: no corrector)."""
    with open(path, encoding="utf-8") as f:
        lines = [r for r in map(json.loads, f) if r["judge"] == judge]
    if not lines:
        return None
    out = {"corrector": lines[0]["corrector"]}
    for setting in correction.SETTINGS:
        by_chain = {r["chain_id"]: r for r in lines if r["critique"] == setting}
        missing = {"answered": False, "answer": None, "after": None}  # a chain that was not asked (no reference)
        out[setting] = [{"answered": r["failed"] is None, "answer": r["answer_after"],
                         "after": r["answer_correct_after"]} if r else missing
                        for r in (by_chain.get(g["chain_id"]) for g in gold)] if by_chain else None
    return out


def _coin(*parts) -> float:
    """A fixed pseudo-random number in [0, 1) per key, so the judge's answers do not depend on batching."""
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:8], 16) / 16 ** 8


class NoisyOracle(Judge):
    """Reads the gold labels and gets about one in five wrong: every field a critique can have, imperfect."""

    kind = "test-noisy-oracle"
    needs_images = False

    def judge_batch(self, chains):
        out = []
        for c in chains:
            verdicts, p_incorrect, explanations = [], [], []
            for i, s in enumerate(c["steps"]):
                right = s["correct"] if _coin(c["chain_id"], i) > 0.2 else not s["correct"]
                verdicts.append(right)
                p_incorrect.append(0.15 + 0.6 * (not right) + 0.2 * _coin(c["chain_id"], i, "p"))
                explanations.append(None if right else (s["explanations"] or ["this step is wrong"])[0])
            answer = c["answer_correct"] if _coin(c["chain_id"], "answer") > 0.2 else not c["answer_correct"]
            out.append(Critique(c["chain_id"], verdicts, p_incorrect=p_incorrect, explanations=explanations,
                                answer_correct=answer,
                                chain_score=sum(verdicts) / len(verdicts) + 0.1 * _coin(c["chain_id"], "score")))
        return out

    def verifier(self, task):
        return NoisyVerifier(f"{self.spec} [verifier {task}]", task=task)

    # asked which chain is best, as a generative judge is (the pairwise task then asks it in both orders): it picks
    # by the same chain scores, so ShiftCheck gets the answers it would get from them
    def pick_best(self, chains):
        return best_index([c.chain_score for c in self.judge_batch(chains)])

    def picks_by_chain_score(self):
        return False


class NoisyVerifier(Judge):
    """The noisy oracle's answers to one verifier task: about one in five another label, one in twenty none."""

    kind = "test-noisy-verifier"
    needs_images = False

    def judge_batch(self, chains):
        task = self.options["task"]
        out = []
        for c in chains:
            labels = []
            for i, label in enumerate(gold_labels(task, c)):
                coin, allowed = _coin(c["chain_id"], task, i), VERIFIER_TASKS[task]
                if label is not None and coin < 0.05:
                    label = None
                elif label is not None and coin < 0.25:
                    label = allowed[(allowed.index(label) + 1) % len(allowed)]
                labels.append(label)
            out.append(Critique(c["chain_id"], [None] * len(c["steps"]), extra={"labels": labels}))
        return out


def synthetic_chains():
    """Five chains per question (so ShiftCheck asks 4-option questions), two sources (constant within a
    question) and two generators (varying within one), two categories and all three step types."""
    chains = synthesize(60, seed=11, image_size=32, chains_per_question=5)
    for i, c in enumerate(chains):
        c["source"] = "synthetic" if int(c["chain_id"].split("-g")[1][:6]) % 2 else "other-source"
        c["generator"] = "model-a" if i % 2 else "model-b"
        # every question a pairwise item too: its right chains preferred, two subsets, questions in sets of two
        question = sorted({d["group_id"] for d in chains}).index(c["group_id"])
        c.update(preference_rank=1 if c["chain_correct"] else 2, subset=f"subset-{question % 2}",
                 set_id=f"set-{question // 2}")
    return chains


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("registry")
    save_chains(synthetic_chains(), str(root / "chains"))
    out = str(root / "out")
    judges = [NoisyOracle("noisy-oracle"), build_judge("random,rate=0.3,seed=0"), build_judge("always-correct")]
    GullibleCorrector.REFERENCES = {GullibleCorrector.chain_key(c["question"], [s["text"] for s in c["steps"]],
                                                                c["final_answer"]): c["reference_answer"]
                                    for c in synthetic_chains()}
    metrics = evaluate(str(root / "chains"), judges, out, tasks=TASKS, progress=False, log=lambda line: None,
                       corrector=GullibleCorrector("py:test_eval_correction.GullibleCorrector"))
    with open(os.path.join(out, "metrics.json")) as f:
        assert json.load(f) == json.loads(json.dumps(metrics))
    with open(os.path.join(out, "report.md")) as f:
        report = f.read()
    return {"metrics": metrics, "report": report, "root": root, "out": out}


def test_every_registered_metric_is_in_metrics_json_for_every_judge(run):
    for name, result in run["metrics"]["judges"].items():
        for metric in metrics_for(TASKS):
            assert has(result["overall"], metric), (name, metric.name)
            # a headline metric's interval sits beside it (None where the value is undefined)
            assert find(result["overall"], metric.task, metric.ci_key)[0] == metric.headline, (name, metric.name)


def test_every_registered_metric_has_a_value_from_a_judge_that_can_produce_it(run):
    judges = run["metrics"]["judges"]
    undefined_for_all = [m.name for m in metrics_for(TASKS)
                         if all(lookup(r["overall"], m) is None for r in judges.values())]
    assert undefined_for_all == []
    oracle = judges["noisy-oracle"]["overall"]
    # the oracle gives every field a critique can have: only BiasRate may need a judge that fails
    assert [m.name for m in metrics_for(TASKS) if lookup(oracle, m) is None] in ([], ["bias_rate"])
    for m in (m for m in metrics_for(TASKS) if m.headline):
        low, high = lookup(oracle, m, ci=True)
        assert low <= lookup(oracle, m) <= high or m.name == "invalid_rate", m.name


def test_undefined_metrics_are_none_where_the_registry_says_they_can_be(run):
    always = run["metrics"]["judges"]["always-correct"]["overall"]
    # no explanations: explanation F1, and VISCore with it, are undefined, as registered; never 0
    assert lookup(always, METRICS["explanation_f1"]) is None and lookup(always, METRICS["viscore"]) is None
    assert lookup(always, METRICS["viscore"], ci=True) is None
    assert "explanations" in METRICS["explanation_f1"].undefined


def test_breakdowns_cover_every_field_with_more_than_one_value(run):
    metrics = run["metrics"]
    plan = metrics["breakdowns"]
    # the fixture has synthetic chains, which say what kind of claim each step makes
    assert set(plan) == {"source", "generator", "category", "step_type", "step_kind"}
    assert plan["source"]["levels"] == ["step", "chain", "group"]
    assert plan["generator"]["levels"] == ["step", "chain"]  # generators differ within a question
    assert plan["step_type"]["values"] == ["both", "description", "reasoning"]
    for result in metrics["judges"].values():
        for field, spec in plan.items():
            for value in spec["values"]:
                sec = result["breakdowns"][field][value]
                for m in metrics_for(TASKS):
                    assert has(sec, m) == (m.level in spec["levels"]), (field, value, m.name)
    report = run["report"]
    assert plan["step_kind"]["levels"] == ["step"] and plan["step_kind"]["unit"] == "steps"
    for title in ("## By source", "## By generator", "## By category", "## By step type", "## By kind of step"):
        assert title in report
    assert "question-level metrics (choice ranking, ShiftCheck) are not split by it" in report


def test_report_columns_come_from_the_registry(run):
    report = run["report"]
    matcher = run["metrics"]["matcher"]
    for m in metrics_for(TASKS):
        assert f" {m.display.format(matcher=matcher)} |" in report, m.name
        assert f"**{m.display.format(matcher=matcher)}** ({m.task})" in report  # the glossary
    row = next(line for line in report.splitlines() if line.startswith("| `noisy-oracle`"))
    assert "[" in row and "]" in row  # headline values come with their interval


def test_each_question_drawn_once_reproduces_every_headline_value(run):
    # the statistics behind the intervals recompute the metrics themselves, not something close to them
    from stepcritic.eval.runner import gold_view, load_dataset

    gold = gold_view(load_dataset(str(run["root"] / "chains"), False, None))
    with open(os.path.join(run["out"], "predictions.jsonl")) as f:
        preds = [json.loads(line) for line in f if json.loads(line)["judge"] == "noisy-oracle"]
    cache = os.path.join(run["out"], "cache")
    [folder] = [d for d in os.listdir(cache) if d.startswith("noisy-oracle-")]
    with open(os.path.join(cache, folder, "picks.jsonl")) as f:
        picks = [json.loads(line) for line in f]
    from stepcritic.eval.matchers import LexicalMatcher

    matcher = LexicalMatcher(0.5)
    corrections = corrections_of(os.path.join(run["out"], "corrections.jsonl"), gold, "noisy-oracle")
    data = results.JudgeData(gold, preds, picks, matcher, results.explanation_matches(gold, preds, matcher),
                             verifier.read(os.path.join(cache, folder), gold), corrections=corrections)
    boot = intervals.GroupBootstrap(sorted({c["group_id"] for c in gold}), n_resamples=1)
    boot.counts[:] = 1.0
    overall = run["metrics"]["judges"]["noisy-oracle"]["overall"]
    for name, statistic in intervals.STATISTICS.items():
        assert statistic(data, boot)[0] == pytest.approx(lookup(overall, METRICS[name])), name


def test_every_task_has_a_section_and_every_headline_metric_a_statistic():
    assert set(results.TASK_SECTIONS) == set(TASKS)
    assert {m.name for m in METRICS.values() if m.headline} == set(intervals.STATISTICS)


def test_a_registered_metric_missing_from_its_section_is_an_error(monkeypatch):
    monkeypatch.setitem(results.TASK_SECTIONS, "choice", lambda data: {"n_groups": 0})
    data = results.JudgeData([], [], [], None, [])
    with pytest.raises(KeyError, match="accuracy"):
        results.section(data, ["choice"])


def test_docs_point_to_the_generated_glossary():
    """The evaluation guide sends readers to docs/metrics.md, and that file holds every registered column."""
    with open(os.path.join(REPO, "docs", "evaluation.md"), encoding="utf-8") as f:
        assert "](metrics.md)" in f.read()  # a link (tests/test_docs.py checks that every link resolves)
    with open(os.path.join(REPO, "docs", "metrics.md"), encoding="utf-8") as f:
        glossary = f.read()
    missing = [m.display for m in METRICS.values()
               if f"- **{m.display.replace('{matcher}', 'MATCHER')}**:" not in glossary]
    assert missing == []
