"""`--tasks correction`, VISCO's correction stage (Sec. 3.1.2) with PCR, NCR and gain as VISCO defines
them, a corrector given the gold critique and the judge's own, every answer cached; offline, with `py:` judges and the
fake OpenAI-compatible server."""

import json
import os
import time

import pytest
from helpers import GullibleCorrector, as_text, chain, check_golden, step

from stepcritic import cli as stepcritic_cli
from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval import correction
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.judges.generative import GenerativeJudge, Reply
from stepcritic.eval.runner import EvalError, build_judge, evaluate
from stepcritic.testing.fake_openai_server import FakeOpenAIServer


class FlagsAnswers(Judge):
    """Calls the final answer wrong exactly for the chains named in `wrong`; no step verdicts."""

    kind = "test-flags-answers"
    needs_images = False
    OPTIONS = {"wrong": str}

    def judge_batch(self, chains):
        wrong = set(self.options.get("wrong", "").split("+"))
        return [Critique(c["chain_id"], [None] * len(c["steps"]), answer_correct=c["chain_id"] not in wrong)
                for c in chains]


class ScoresOnly(Judge):
    """A reward model's shape: a chain score and nothing else, so no critique to correct from."""

    kind = "test-scores-only"
    needs_images = False

    def judge_batch(self, chains):
        return [Critique(c["chain_id"], [None] * len(c["steps"]), chain_score=0.5) for c in chains]


def four_chains():
    """Two wrong answers (w1, w2) and two right ones (r1, r2) to "What colour is the shape?" (reference red)."""
    out = []
    for chain_id, answer in (("w1", "blue"), ("w2", "green"), ("r1", "red"), ("r2", "Red.")):
        right = answer.lower().startswith("red")
        out.append(validate_chain(chain(chain_id, answer=answer, answer_correct=right, group_id="q", steps=[
            step("The image shows one circle."),
            step(f"The circle is {answer}", correct=right),
        ]), chain_id))
    return out


@pytest.fixture
def chains_dir(tmp_path):
    save_chains(four_chains(), str(tmp_path / "chains"))
    GullibleCorrector.REFERENCES = {"What colour is the shape?": "red"}
    GullibleCorrector.asked = []
    return str(tmp_path / "chains")


def corrector():
    return build_judge(f"py:{__name__}.GullibleCorrector")


def test_pcr_ncr_and_gain_as_visco_defines_them(chains_dir, tmp_path):
    # the judge calls w1 (wrong) and r1 (right) wrong: PCR = 1/2 (w1 fixed, w2 left), NCR = 1/2 (r1 broken)
    judge = FlagsAnswers(f"py:{__name__}.FlagsAnswers,wrong=w1+r1", wrong="w1+r1")
    metrics = evaluate(chains_dir, [judge], str(tmp_path / "out"), tasks=["correction"], corrector=corrector(),
                       progress=False, log=lambda line: None)
    sec = metrics["judges"][judge.name]["overall"]["correction"]
    assert (sec["own"]["pcr"], sec["own"]["ncr"], sec["own"]["gain"]) == (0.5, 0.5, 0.0)
    assert (sec["own"]["n_incorrect_before"], sec["own"]["n_correct_before"]) == (2, 2)
    assert sec["own"]["accuracy_before"] == 0.5 and sec["own"]["accuracy_after"] == 0.5
    # the gold critique names exactly the wrong answers: every one fixed, none broken
    assert (sec["gold"]["pcr"], sec["gold"]["ncr"], sec["gold"]["gain"]) == (1.0, 0.0, 1.0)
    lines = [json.loads(line) for line in open(tmp_path / "out" / "corrections.jsonl")]
    own = {r["chain_id"]: r for r in lines if r["critique"] == "own"}
    assert own["r1"]["answer_after"] == "none of these" and own["r1"]["answer_correct_after"] is False
    assert own["r2"]["answer_after"] == "Red." and own["r2"]["answer_correct_after"] is True  # unchanged: its label
    report = open(tmp_path / "out" / "report.md").read()
    assert "## Correction" in report and "| PCR (gold critique) |" in report and "corrected by" in report
    assert "correction" in metrics["plots"] and os.path.getsize(tmp_path / "out" / "plots" / "correction.png") > 1000


def test_the_corrector_sees_the_critique_it_is_given(chains_dir, tmp_path):
    judge = FlagsAnswers(f"py:{__name__}.FlagsAnswers,wrong=r2", wrong="r2")
    evaluate(chains_dir, [judge], str(tmp_path / "out"), tasks=["correction"], corrector=corrector(), progress=False,
             log=lambda line: None)
    gold_w1 = next(t for t in GullibleCorrector.asked if "is blue" in t and "Review of step 2: incorrect" in t)
    assert "Review of step 2: incorrect: 'The circle is blue' does not match the image." in gold_w1
    assert "Review of the final answer: incorrect" in gold_w1
    own_w1 = next(t for t in GullibleCorrector.asked if "is blue" in t and "Review of step 2: not judged" in t)
    assert "Review of the final answer: correct" in own_w1  # the judge missed it: the corrector is told so
    assert len(GullibleCorrector.asked) == 8  # four chains, gold and own


def test_answers_are_cached_and_a_rerun_asks_nothing(chains_dir, tmp_path):
    judge = FlagsAnswers(f"py:{__name__}.FlagsAnswers,wrong=w1", wrong="w1")
    out = str(tmp_path / "out")
    first = evaluate(chains_dir, [judge], out, tasks=["correction"], corrector=corrector(), progress=False,
                     log=lambda line: None)
    n = len(GullibleCorrector.asked)
    second = evaluate(chains_dir, [judge], out, tasks=["correction"], corrector=corrector(), progress=False,
                      log=lambda line: None)
    assert len(GullibleCorrector.asked) == n == 8
    assert second["correction"]["requests"][judge.name] == {"asked": 0, "cached": 8, "failed": 0}
    assert first["judges"][judge.name]["overall"]["correction"] == second["judges"][judge.name]["overall"]["correction"]
    # the gold critique is the same for a second judge: only its own critiques are new
    other = FlagsAnswers(f"py:{__name__}.FlagsAnswers,wrong=w2", wrong="w2")
    evaluate(chains_dir, [other], out, tasks=["correction"], corrector=corrector(), progress=False,
             log=lambda line: None)
    # its own critiques of r1 and r2 ("correct") are the first judge's, cached too: only w1 and w2 are new
    assert len(GullibleCorrector.asked) == 8 + 2


def test_a_judge_without_a_critique_has_no_own_numbers_and_no_corrector_is_an_error(chains_dir, tmp_path):
    scores = ScoresOnly(f"py:{__name__}.ScoresOnly")
    metrics = evaluate(chains_dir, [scores], str(tmp_path / "out"), tasks=["correction"], corrector=corrector(),
                       progress=False, log=lambda line: None)
    sec = metrics["judges"][scores.name]["overall"]["correction"]
    assert sec["own"]["pcr"] is None and sec["own"]["gain"] is None and sec["gold"]["gain"] == 1.0
    assert "| – | – | – |" in open(tmp_path / "out" / "report.md").read()
    with pytest.raises(EvalError, match="needs a corrector: give --corrector"):
        evaluate(chains_dir, [scores], str(tmp_path / "out2"), tasks=["correction"], progress=False)
    with pytest.raises(EvalError, match="is not a generative judge"):
        evaluate(chains_dir, [scores], str(tmp_path / "out3"), tasks=["correction"], corrector=ScoresOnly("x"),
                 progress=False)
    assert not os.path.exists(tmp_path / "out2" / "cache")  # refused before any judging


def test_a_generative_judge_corrects_its_own_critiques_through_the_fake_server(chains_dir, tmp_path):
    with FakeOpenAIServer() as server:
        judge = build_judge(f"openai:fake,base_url={server.base_url},concurrency=2")
        try:
            metrics = evaluate(chains_dir, [judge], str(tmp_path / "out"), tasks=["correction"], progress=False,
                               log=lambda line: None)
        finally:
            judge.close()
        corrector_prompts = [t for t in server.prompt_texts() if 'one last line of the form "Answer:' in t]
    # the fake critic calls every answer wrong (own: "red" everywhere, so w1, w2 fixed and r1, r2 kept); the gold
    # critique calls w1, w2 wrong, and the fake corrector answers "red" to those
    sec = metrics["judges"][judge.name]["overall"]["correction"]
    assert sec["corrector"] == judge.name and len(corrector_prompts) == 8
    assert (sec["own"]["pcr"], sec["own"]["ncr"]) == (1.0, 0.0) and (sec["gold"]["pcr"], sec["gold"]["ncr"]) == (1, 0)


def test_reading_and_comparing_answers():
    assert correction.parse_answer("First I check.\nAnswer: blue\nAnswer: **red**") == "red"
    assert correction.parse_answer('Thinking...\n```json\n{"answer": "B"}\n```') == "B"
    assert correction.parse_answer("Final answer: 12.") == "12."
    assert correction.parse_answer("I am not sure.") is None
    assert correction.same_answer("The red circle.", "red circle")
    assert correction.same_answer("12.0", "12") and correction.same_answer("1,000", "1000")
    assert correction.same_answer("(B)", "B") and correction.same_answer("B) red", "b")
    assert not correction.same_answer("A red circle", "A") and not correction.same_answer("blue", "red")
    assert not correction.same_answer(None, "red")


def test_correction_prompt_golden():
    c = validate_chain(chain("golden", question="What colour is the shape?", answer="blue", answer_correct=False,
                             steps=[step("The image shows one circle on a white background."),
                                    step("The circle is blue.", correct=False,
                                         explanations=["The circle is red, not blue.", "It is red."])]), "golden")
    gold = {"steps": [{"text": s["text"], "correct": s["correct"], "explanations": s["explanations"]}
                      for s in c["steps"]], "answer_correct": False}
    messages = correction.correction_messages(c, correction.gold_review(gold))
    check_golden("correction", as_text(messages))
    assert messages[0]["content"][0] == {"type": "image"}


def test_cli_corrector_options_fail_in_one_line(chains_dir, tmp_path, capsys):
    def run(*args):
        code = stepcritic_cli.main(["eval", "--chains", chains_dir, "--judge", "always-correct", "--out",
                                    str(tmp_path / "cli"), "--no-progress", *args])
        return code, capsys.readouterr().err

    code, err = run("--tasks", "correction")
    assert code == 2 and "needs a corrector" in err and len(err.strip().splitlines()) == 1
    code, err = run("--corrector", "always-correct")
    assert code == 2 and "only serves the correction task" in err
    code, err = run("--tasks", "correction", "--corrector", "majority")
    assert code == 2 and "is not a generative judge" in err and "Traceback" not in err


def test_the_api_pool_stays_full_but_never_holds_more_than_concurrency_unsaved():
    from stepcritic.data_prep.prompts import user_turn
    from stepcritic.eval.judges.generative import Prompt

    with FakeOpenAIServer(latency=0.05) as server:
        judge = build_judge(f"openai:fake,base_url={server.base_url},concurrency=3")
        try:
            stream = judge.generate_stream(Prompt([user_turn(f"Question {i}?")], []) for i in range(20))
            got = [next(stream) for _ in range(5)]  # the caller saves each before asking for the next
            stream.close()  # killed here
            time.sleep(0.3)
        finally:
            judge.close()
        assert sorted(i for i, _ in got) == sorted(set(i for i, _ in got)) and all(r.error is None for _, r in got)
        assert len(server.requests) <= 5 + 3 and server.max_in_flight <= 3


class FailsAfter(GenerativeJudge):
    """Answers `limit` prompts, one at a time, then fails as a dying server would."""

    kind = "test-fails-after"
    needs_images = False
    OPTIONS = {**GenerativeJudge.OPTIONS, "limit": int}
    answered = 0

    def __init__(self, spec, limit=3, **options):
        super().__init__(spec, limit=limit, batch_size=1, **options)
        self.limit = limit

    def generate(self, prompts):
        if type(self).answered >= self.limit:
            raise ConnectionError("the server went away")
        type(self).answered += len(prompts)
        return [Reply(text=f"Answer: {len(p.messages)}") for p in prompts]


def test_answers_saved_before_a_failure_are_not_asked_again(tmp_path):
    from stepcritic.eval.asking import ask
    from stepcritic.eval.cache import JsonlLog
    from stepcritic.eval.judges.generative import Prompt

    log = JsonlLog(str(tmp_path / "answers.jsonl"), "key")
    jobs = [(f"k{i}", lambda: Prompt([], [])) for i in range(6)]
    FailsAfter.answered = 0
    with pytest.raises(EvalError, match="failed after 3 of 6 prompts"):
        ask(FailsAfter("fails", limit=3), jobs, log, "correction", progress=False)
    assert sorted(log.load()) == ["k0", "k1", "k2"]
    FailsAfter.answered = 0
    counts = ask(FailsAfter("fails", limit=10), jobs, log, "correction", progress=False)
    assert (counts["asked"], counts["cached"], FailsAfter.answered) == (3, 3, 3)


def test_the_tiny_critic_runs_correction_and_best_of_n_on_synthetic_chains(tmp_path):
    # both tasks run end to end on synthetic data with the tiny critic, and reach the report with their plots
    from stepcritic.data_prep.synth import synthesize
    from stepcritic.train.tiny.cache import tiny_critic_path

    save_chains(synthesize(12, seed=3, image_size=32), str(tmp_path / "chains"))
    critic = build_judge(f"hf:{tiny_critic_path()},max_new_tokens=8,batch_size=4")
    try:
        metrics = evaluate(str(tmp_path / "chains"), [critic, build_judge("always-correct")], str(tmp_path / "out"),
                           tasks=["best-of-n", "correction"], progress=False, log=lambda line: None)
    finally:
        critic.close()
    own = metrics["judges"][critic.name]["overall"]
    assert own["correction"]["corrector"] == critic.name and own["best-of-n"]["n_questions"] == 4
    # whatever an untrained model writes, PCR and NCR are defined (a reply without an answer is a wrong a')
    gold = own["correction"]["gold"]
    assert gold["n_correct_before"] > 0 and gold["n_incorrect_before"] > 0
    assert gold["ncr"] is not None and gold["pcr"] is not None and own["correction"]["own"]["gain"] is not None
    assert metrics["judges"]["always-correct"]["overall"]["correction"]["gold"]["gain"] is None  # no corrector
    assert {"best_of_n", "correction"} <= set(metrics["plots"])
    report = open(tmp_path / "out" / "report.md").read()
    assert "## Best-of-N" in report and "## Correction" in report
