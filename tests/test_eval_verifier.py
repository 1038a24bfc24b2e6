"""`stepcritic eval --tasks verifier`, MiCEval's nine verifier tasks (Sec. 6.1, App. C).

A scripted generative judge that answers from the human labels, in MiCEval's own wording (App. C.2), must score
100 on every task through the whole path (prompts, label parsing in strict mode, the cache, the section, the
report); an unreadable reply is one invalid output and a wrong answer; judges that cannot answer verifier prompts
get "–"; answers are saved per chain and reused, and an earlier command's answers reach the report.
"""

import json
import os

import helpers
import pytest
from helpers import gold_labels

from stepcritic.data_prep.prompts import CHAIN_LEVEL_TASKS, VERIFIER_TASKS
from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval import verifier as V
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.judges.generative import GenerativeJudge, Reply
from stepcritic.eval.judges.registry import make_judge
from stepcritic.eval.report import render
from stepcritic.eval.runner import EvalError, build_judge, evaluate
from stepcritic.eval.tasks import METRICS, lookup, metrics_for


def miceval_wording(task: str, label: str) -> str:
    """A label as MiCEval's prompt templates spell it (App. C.2)."""
    if task == "chain_correctness":
        return {"correct": "Yes", "incorrect": "No"}[label]
    if task == "description_correctness":
        return {"correct": "Fully Correct", "partial": "Partially Correct", "unsupported": "Unsupported"}[label]
    return {"image": "Image Relevant", "logic": "Logic Relevant", "entity": "Entity False",
            "attribute": "Attribute False", "spatial": "Spatial Relationship False",
            "non_spatial": "Non-spatial Relationship False", "inter": "Inter-step Incorrect",
            "intra": "Intra-step Incorrect"}.get(label, label.capitalize())


class GoldVerifier(Judge):
    """What a `py:` judge answers verifier tasks with: a judge per task whose critiques carry the labels."""

    kind = "test-gold-verifier"
    needs_images = False

    def __init__(self, spec, task):
        super().__init__(spec, task=task)
        self.task = task

    def judge_batch(self, chains):
        return [Critique(c["chain_id"], [None] * len(c["steps"]), extra={"labels": gold_labels(self.task, c)})
                for c in chains]


class GoldOracle(Judge):
    """Critiques from the gold verdicts, and verifier answers from the gold labels."""

    kind = "test-gold-oracle"
    needs_images = False

    def judge_batch(self, chains):
        return [Critique(c["chain_id"], [s["correct"] for s in c["steps"]], answer_correct=c["answer_correct"])
                for c in chains]

    def verifier(self, task):
        return GoldVerifier(f"{self.spec} [verifier {task}]", task)


class ScriptedOracle(GenerativeJudge):
    """A generative judge that reads which step a verifier prompt is about (its text, quoted) and answers that
    step's human label in MiCEval's wording; `silent` tasks get a reply that names no label. Every prompt is
    counted in `sent` (shared by the task copies)."""

    kind = "test-scripted-oracle"
    needs_images = False
    OPTIONS = {**GenerativeJudge.OPTIONS, "silent": str}

    def __init__(self, spec, silent: str = "", **options):
        super().__init__(spec, **({"silent": silent} if silent else {}), **options)
        self.silent, self.sent, self.chains = set(filter(None, silent.split("+"))), [], []

    def generate(self, prompts):
        replies = []
        for prompt in prompts:
            text = prompt.messages[0]["content"][1]["text"]
            self.sent.append((self.task, text))
            replies.append(Reply("I would rather not say." if self.task in self.silent else self._answer(text)))
        return replies

    def _answer(self, text: str) -> str:
        for chain in self.chains:
            labels = gold_labels(self.task, chain)
            if self.task in CHAIN_LEVEL_TASKS and chain["question"] in text:
                return miceval_wording(self.task, labels[0])
            for step, label in zip(chain["steps"], labels):
                if f'"{step["text"]}"' in text and label is not None:
                    return miceval_wording(self.task, label)
        raise AssertionError(f"no step of the test chains in the {self.task} prompt")


def verifier_chains() -> list[dict]:
    """Three questions, each with a good chain and a bad one; every label of every task occurs, step texts and
    questions are unique (the scripted oracle finds the step a prompt is about by its text)."""
    step = helpers.step
    chains = []
    for g in range(3):
        chains.append(helpers.chain(f"g{g}-ok", group_id=f"g{g}", question=f"What is in picture {g}?", steps=[
            step(f"Picture {g} shows one circle."),
            step(f"Circle {g} is red, so it is a red circle.", type="both"),
            step(f"So picture {g} holds a red circle.", type="reasoning")]))
        chains.append(helpers.chain(f"g{g}-bad", group_id=f"g{g}", question=f"Which shape is in image {g}?",
                                    answer="blue", answer_correct=False, steps=[
            step(f"Image {g} holds a blue square.", correct=False, description_correctness="partial",
                 description_errors=[["entity", "spatial", "non_spatial"][g]]),
            step(f"A tree grows beside image {g}.", correct=False, description_relevance="image",
                 description_correctness="correct", description_errors=[]),
            step(f"Hence shape {g} must be blue.", correct=False, type="reasoning", logic_error="intra"),
            step(f"Again, shape {g} is blue.", correct=False, type="reasoning", logic_correct=True, logic_error=None,
                 informative=False, logic_relevant=False)]))
    return [validate_chain(c) for c in chains]


def n_asked(chains, task=None) -> int:
    return sum(label is not None for t in (V.TABLE_2_ORDER if task is None else [task])
               for c in chains for label in gold_labels(t, c))


@pytest.fixture
def chains_dir(tmp_path):
    save_chains(verifier_chains(), str(tmp_path / "chains"))
    return str(tmp_path / "chains")


def scripted(spec="scripted", **options):
    judge = ScriptedOracle(spec, **options)
    judge.chains = verifier_chains()
    return judge


def run(chains_dir, out, judges, tasks=("verifier",)):
    return evaluate(chains_dir, judges, out, tasks=tasks, progress=False, log=lambda line: None)


def verifier_section(metrics, name):
    return metrics["judges"][name]["overall"]["verifier"]


# ----------------------------------------------------------------------------- the whole path

def test_an_oracle_in_miceval_wording_scores_100_on_every_task(chains_dir, tmp_path):
    oracle = scripted(strict=True)
    metrics = run(chains_dir, str(tmp_path / "out"), [oracle, build_judge("always-correct")])
    sec = verifier_section(metrics, "scripted")
    assert {t: sec[t]["accuracy"] for t in V.TABLE_2_ORDER} == {t: 1.0 for t in V.TABLE_2_ORDER}
    assert sec["avg"] == 1.0 and sec["invalid_rate"] == 0.0 and sec["answers"] is True
    chains = verifier_chains()
    # one prompt per step (or chain) the task applies to, nothing where the labels do not
    assert len(oracle.sent) == sec["n_outputs"] == n_asked(chains)
    for task in V.TABLE_2_ORDER:
        assert sec[task]["n"] == n_asked(chains, task) > 0, task
        labels_seen = {label for c in chains for label in gold_labels(task, c)} - {None}
        assert len(labels_seen) >= 2 or task in ("description_error", "logic_error"), task
    # good chains score 1 on every aspect, bad ones 0 somewhere: the MiCEval chain score ranks them perfectly
    assert sec["miceval_chain"] == {"d": 1.0, "rho": pytest.approx(1.0), "n": 6}
    assert sec["avg_ci"] == [1.0, 1.0]


def test_judges_that_cannot_answer_get_dashes_never_zeros(chains_dir, tmp_path):
    metrics = run(chains_dir, str(tmp_path / "out"), [scripted(), build_judge("always-correct"),
                                                     build_judge("random,seed=0")])
    for name in ("always-correct", "random,seed=0"):
        sec = metrics["judges"][name]["overall"]
        assert sec["verifier"]["answers"] is False
        assert [lookup(sec, m) for m in metrics_for(["verifier"])] == [None] * len(metrics_for(["verifier"]))
    lines = render(metrics).splitlines()
    table = lines.index("## Verifier tasks")
    header = next(line for line in lines[table:] if line.startswith("| Judge |"))
    assert [h.strip() for h in header.split("|")[2:-1]] == [m.display for m in metrics_for(["verifier"])]
    row = next(line for line in lines[table:] if line.startswith("| `always-correct`"))
    assert set(c.strip() for c in row.split("|")[2:-1]) == {"–"}
    scripted_row = next(line for line in lines[table:] if line.startswith("| `scripted`"))
    assert "100.0" in scripted_row and "**" not in row


def test_an_unreadable_reply_is_one_invalid_output_and_a_wrong_answer(chains_dir, tmp_path):
    metrics = run(chains_dir, str(tmp_path / "out"), [scripted(silent="logic_correctness", strict=True)])
    sec = verifier_section(metrics, "scripted")
    chains = verifier_chains()
    assert sec["logic_correctness"]["accuracy"] == 0.0 and sec["logic_correctness"]["invalid_rate"] == 1.0
    assert sec["n_invalid"] == n_asked(chains, "logic_correctness")
    # per reply (MiCEval Table 5), not per chain: most chains had other replies that read fine
    assert sec["invalid_rate"] == pytest.approx(n_asked(chains, "logic_correctness") / n_asked(chains))
    assert sec["avg"] == pytest.approx(8 / 9)
    assert sec["miceval_chain"]["n"] == 0  # no chain with a reasoning step has every aspect answered


def test_miceval_wordings_read_as_their_labels_in_strict_mode():
    # "Partially Correct" is its own label, never "correct"; strict mode wants the label and nothing else
    judge = scripted(strict=True).verifier("description_correctness")
    chain = verifier_chains()[1]
    (critique,) = judge.judge_batch([chain])
    assert critique.extra["labels"][:2] == ["partial", "correct"]


def test_the_step_type_breakdown_shows_each_task_on_its_step_types(chains_dir, tmp_path):
    metrics = run(chains_dir, str(tmp_path / "out"), [scripted(silent="step_type")])
    by_type = metrics["judges"]["scripted"]["breakdowns"]["step_type"]
    assert set(by_type) == {"description", "reasoning", "both"}
    reasoning = by_type["reasoning"]["verifier"]
    assert reasoning["logic_correctness"]["accuracy"] == 1.0 and reasoning["step_type"]["accuracy"] == 0.0
    assert reasoning["description_correctness"]["accuracy"] is None  # a reasoning step is never asked that
    assert "avg" not in reasoning and "chain_correctness" not in reasoning  # chain-level: not split by step


# ----------------------------------------------------------------------------- cache, resume, earlier commands

def test_answers_are_saved_per_chain_and_a_rerun_asks_only_what_is_missing(chains_dir, tmp_path):
    out = str(tmp_path / "out")
    chains = verifier_chains()

    class Failing(ScriptedOracle):
        kind = ScriptedOracle.kind  # the same judge as far as the cache is concerned

        def generate(self, prompts):
            if self.task == "description_error":
                raise RuntimeError("the server went away")
            return super().generate(prompts)

    failing = Failing("scripted")
    failing.chains = chains
    with pytest.raises(EvalError, match="the server went away"):
        run(chains_dir, out, [failing])
    done = [t for t in V.TABLE_2_ORDER[:V.TABLE_2_ORDER.index("description_error")]]
    assert len(failing.sent) == sum(n_asked(chains, t) for t in done)

    again = scripted()
    first = run(chains_dir, out, [again])
    assert len(again.sent) == n_asked(chains) - len(failing.sent)  # what was answered is not asked again
    third = scripted()
    second = run(chains_dir, out, [third])
    assert third.sent == [] and verifier_section(second, "scripted") == verifier_section(first, "scripted")
    # another verifier template, model or option is another cache: a strict judge asks everything again
    strict = scripted(strict=True)
    run(chains_dir, out, [strict])
    assert len(strict.sent) == n_asked(chains)


def test_an_earlier_commands_answers_are_in_the_report(chains_dir, tmp_path):
    out = str(tmp_path / "out")
    first = run(chains_dir, out, [scripted()])
    later = run(chains_dir, out, [build_judge("always-correct")])
    assert later["earlier_judges"] == {"included": ["scripted"], "left_out": []}
    assert verifier_section(later, "scripted") == verifier_section(first, "scripted")
    # a judge whose earlier command did not ask the verifier questions lacks them: left out, named
    run(chains_dir, out, [build_judge("majority")], tasks=("critique",))
    again = run(chains_dir, out, [build_judge("always-correct")])
    assert again["earlier_judges"] == {"included": ["scripted"], "left_out": ["majority"]}


def test_a_py_judge_answers_through_its_verifier_method(chains_dir, tmp_path):
    metrics = run(chains_dir, str(tmp_path / "out"), [GoldOracle("gold")], tasks=("critique", "verifier"))
    overall = metrics["judges"]["gold"]["overall"]
    assert overall["verifier"]["avg"] == 1.0 and overall["critique"]["step"]["f1"] == 1.0
    assert lookup(overall, METRICS["verifier_invalid_rate"]) == 0.0


# ----------------------------------------------------------------------------- which judges answer

def test_a_generative_judge_asks_each_task_as_a_verifier_copy_of_itself():
    judge = make_judge("openai:some-model,base_url=http://127.0.0.1:9/v1,template=critique")
    copies = {task: judge.verifier(task) for task in VERIFIER_TASKS}
    assert judge.mode == "critique" and judge.options["template"] == "critique"  # the judge itself is unchanged
    for task, copy in copies.items():
        assert (copy.mode, copy.task, copy.strategy, copy.template) == ("verifier", task, "direct", None)
        assert copy._client is judge._client  # one client, and its thread pool, for all
    fingerprints = {judge.fingerprint()} | {c.fingerprint() for c in copies.values()}
    assert len(fingerprints) == 1 + len(VERIFIER_TASKS)
    with pytest.raises(ValueError, match="unknown verifier task"):
        judge.verifier("vibes")
    judge.close()


def test_a_local_model_is_loaded_once_for_every_task_and_wrappers_pass_the_question_on():
    hf = make_judge("hf:/no/such/model,structured=true")
    copy = hf.verifier("logic_correctness")
    assert copy.structured is False and copy._load == hf._load  # the parent's loader: one model in memory
    wrapped = make_judge("text-only:hf:/no/such/model").verifier("step_type")
    assert wrapped.kind == "text-only" and wrapped.inner.task == "step_type"
    for spec in ("always-correct", "random", "majority", "text-only:always-correct"):
        assert make_judge(spec).verifier("step_type") is None


# ----------------------------------------------------------------------------- real MiCEval (skipped without ../shared)

def test_miceval_normal_verifier_tasks_for_an_oracle_and_the_baselines(miceval_jsonl, tmp_path):
    from stepcritic.data_prep.ingest import ingest

    ingest("miceval", miceval_jsonl, str(tmp_path / "mic"))
    metrics = run(str(tmp_path / "mic"), str(tmp_path / "out"), [GoldOracle("gold"), build_judge("always-correct")],
                  tasks=("critique", "verifier"))
    gold = metrics["judges"]["gold"]["overall"]
    assert gold["critique"]["step"]["f1"] == 1.0 and gold["critique"]["viscore"] is None
    assert {t: gold["verifier"][t]["accuracy"] for t in V.TABLE_2_ORDER} == {t: 1.0 for t in V.TABLE_2_ORDER}
    assert gold["verifier"]["avg"] == 1.0 and gold["verifier"]["invalid_rate"] == 0.0
    assert gold["verifier"]["chain_correctness"]["n"] == 446  # MiCEval Table 1: 446 MCoT answers in Normal
    assert gold["verifier"]["step_type"]["n"] == 1144  # and 1,144 steps
    assert metrics["judges"]["always-correct"]["overall"]["verifier"]["avg"] is None
    with open(os.path.join(tmp_path / "out", "report.md")) as f:
        assert "## Verifier tasks" in f.read()
    with open(os.path.join(tmp_path / "out", "metrics.json")) as f:
        assert json.load(f)["judges"]["gold"]["overall"]["verifier"]["avg"] == 1.0
