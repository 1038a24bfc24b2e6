"""Judge specs, the baselines, the text-only ablation, the local hf judge, LookBack and the listwise choice."""

import base64
import importlib.util
import io
import json

import pytest
from helpers import chains
from PIL import Image

from stepcritic.data_prep.critique import parse_label, parse_letter, parse_questions, parse_score
from stepcritic.eval.judges.artifacts import weights_digest
from stepcritic.eval.judges.baselines import RandomJudge, TextOnlyJudge
from stepcritic.eval.judges.registry import KINDS, JudgeSpec, describe_kinds, make_judge, parse_spec
from stepcritic.testing.fake_openai_server import FakeOpenAIServer


def fake_openai(server, **options):
    return make_judge({"kind": "openai", "target": "m", "base_url": server.base_url, "concurrency": 4, **options})


# ----------------------------------------------------------------------------- specs

@pytest.mark.parametrize("spec, expected", [
    ("always-correct", JudgeSpec("always-correct")),
    ("random,rate=0.3,seed=0", JudgeSpec("random", None, {"rate": 0.3, "seed": 0})),
    ("random,rate=1", JudgeSpec("random", None, {"rate": 1.0})),
    ("majority,prior=0.2", JudgeSpec("majority", None, {"prior": 0.2})),
    ("hf:runs/critic,mode=critique,max_new_tokens=64",
     JudgeSpec("hf", "runs/critic", {"mode": "critique", "max_new_tokens": 64})),
    ("openai:gpt-4o,base_url=http://127.0.0.1:8000/v1,api_key_env=OPENAI_API_KEY,concurrency=32",
     JudgeSpec("openai", "gpt-4o",
               {"base_url": "http://127.0.0.1:8000/v1", "api_key_env": "OPENAI_API_KEY", "concurrency": 32})),
    ("openai:gpt-4o,strategy=lookback,blank_image=true",
     JudgeSpec("openai", "gpt-4o", {"strategy": "lookback", "blank_image": True})),
    ("text-only:random,seed=3", JudgeSpec("text-only", "random,seed=3")),
    ({"kind": "openai", "target": "gpt-4o", "concurrency": 32}, JudgeSpec("openai", "gpt-4o", {"concurrency": 32})),
    ({"kind": "random", "options": {"rate": "0.25"}}, JudgeSpec("random", None, {"rate": 0.25})),
    ({"kind": "text-only", "target": {"kind": "random", "seed": 1}}, JudgeSpec("text-only", "random,seed=1")),
    ("py:stepcritic.eval.judges.baselines.RandomJudge,seed=2",
     JudgeSpec("py", "stepcritic.eval.judges.baselines.RandomJudge", {"seed": 2})),
])
def test_good_specs(spec, expected):
    assert parse_spec(spec) == expected
    assert parse_spec(str(expected)) == expected  # the canonical string reads back the same


@pytest.mark.parametrize("spec, complaint", [
    ("oracle", "unknown judge kind 'oracle'"),
    ("random,rate", "option 'rate' is not key=value"),
    ("random,temperature=1", "unknown option 'temperature' for judge kind 'random'"),
    ("random,rate=high", "option rate='high' should be of type float"),
    ("openai:gpt-4o,concurrency=2.5", "option concurrency=2.5 should be of type int"),
    ("random,seed=1,seed=2", "option 'seed' given twice"),
    ("hf:", "empty target"),
    ("text-only", "needs an inner spec"),
    ("text-only:oracle", "unknown judge kind 'oracle'"),
    ({"target": "x"}, "has no 'kind'"),
    ("", "non-empty"),
    ("py", "py needs a class"),
    ("py:no_such_module.Judge", "cannot import 'no_such_module.Judge'"),
    ("py:json.JSONDecoder", "'json.JSONDecoder' is not a Judge subclass"),
    ("py:stepcritic.eval.judges.baselines.RandomJudge,temperature=1", "unknown option 'temperature'"),
])
def test_bad_specs_name_the_bad_part(spec, complaint):
    with pytest.raises(ValueError, match=complaint):
        parse_spec(spec)


def test_bad_option_values_are_rejected_when_building():
    with pytest.raises(ValueError, match="rate must be between 0 and 1"):
        make_judge("random,rate=2")
    with pytest.raises(ValueError, match="unknown mode 'essay'"):
        make_judge("openai:m,mode=essay")
    with pytest.raises(ValueError, match="lookback needs mode=critique"):
        make_judge("openai:m,mode=score,strategy=lookback")
    with pytest.raises(ValueError, match="unknown verifier task 'vibes'"):
        make_judge("openai:m,mode=verifier,task=vibes")


def test_every_kind_is_listed_with_help():
    assert {"always-correct", "random", "majority", "text-only", "hf", "openai", "vllm", "prm", "reward"} <= set(KINDS)
    assert all(kind in describe_kinds() for kind in [*KINDS, "py"])


def test_python_judges_are_built_by_the_registry_like_any_kind():
    judge = make_judge("py:stepcritic.eval.judges.baselines.RandomJudge,seed=2,blank_image=true")
    assert isinstance(judge, TextOnlyJudge) and isinstance(judge.inner, RandomJudge)
    assert judge.inner.seed == 2 and judge.inner.spec == "py:stepcritic.eval.judges.baselines.RandomJudge,seed=2"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_without_the_extra_is_a_clear_error():
    from stepcritic.errors import MissingExtra

    with pytest.raises(MissingExtra, match=r"pip install 'stepcritic\[vllm\]'"):
        make_judge("vllm:some/model")


@pytest.mark.parametrize("plain, faster, other", [
    ("prm:runs/prm", "prm:runs/prm,batch_size=32,device=cpu", "prm:runs/prm,threshold=0.7"),
    ("reward:runs/rm", "reward:runs/rm,batch_size=32", "reward:runs/rm,dtype=bfloat16"),
    ("hf:runs/critic", "hf:runs/critic,batch_size=2,device=cuda", "hf:runs/critic,structured=true"),
    ("openai:m", "openai:m,batch_size=64,concurrency=16", "openai:m,temperature=0.7"),
    ("text-only:openai:m", "text-only:openai:m,batch_size=64", "text-only:openai:m,max_tokens=64"),
])
def test_runtime_options_keep_the_cache_and_output_options_do_not(plain, faster, other, monkeypatch):
    # building a judge loads no model, and a folder that does not exist is digested by its name
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # OpenAI's own API is refused without one
    plain, faster, other = map(make_judge, (plain, faster, other))
    assert plain.fingerprint() == faster.fingerprint() != other.fingerprint()
    assert plain.cache_name == faster.cache_name != other.cache_name


# ----------------------------------------------------------------------------- baselines

def test_always_correct():
    judge = make_judge("always-correct")
    critiques = judge.judge_batch(chains(4))
    assert all(c.verdicts == [True] * 3 and c.answer_correct and c.chain_score == 1.0 for c in critiques)
    assert judge.needs_images is False


def test_random_is_seeded_per_chain_and_follows_the_rate():
    many = [dict(c, chain_id=f"c{i}") for i, c in enumerate(chains(2) * 200)]
    judge = make_judge("random,rate=0.3,seed=7")
    forward = {c.chain_id: c.verdicts for c in judge.judge_batch(many)}
    backward = {c.chain_id: c.verdicts for c in judge.judge_batch(many[::-1][:50])}
    assert all(forward[cid] == verdicts for cid, verdicts in backward.items())
    flagged = sum(v is False for verdicts in forward.values() for v in verdicts) / (3 * len(many))
    assert 0.25 < flagged < 0.35
    assert judge.judge_batch(many[:1])[0].p_incorrect == [0.3] * 3
    other_seed = {c.chain_id: c.verdicts for c in make_judge("random,rate=0.3,seed=8").judge_batch(many)}
    assert other_seed != forward
    assert all(v is False for c in make_judge("random,rate=1").judge_batch(many[:5]) for v in c.verdicts)


def test_majority_defaults_to_correct_and_takes_the_majority_class_from_its_prior():
    assert make_judge("majority").judge_batch(chains(2))[0].verdicts == [True] * 3
    mostly_wrong = make_judge("majority,prior=0.8")
    assert mostly_wrong.judge_batch(chains(2))[0].verdicts == [False] * 3
    assert mostly_wrong.judge_batch(chains(2))[0].p_incorrect == pytest.approx([0.8] * 3)
    assert mostly_wrong.fingerprint() != make_judge("majority").fingerprint()


def _sent_image(request) -> Image.Image:
    url = request["body"]["messages"][0]["content"][0]["image_url"]["url"]
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")


@pytest.mark.parametrize("style", ["prefix", "option"])
def test_text_only_really_blanks_the_images(style):
    with FakeOpenAIServer() as server:
        spec = f"openai:m,base_url={server.base_url}"
        judge = make_judge(f"text-only:{spec}" if style == "prefix" else f"{spec},blank_image=true")
        assert isinstance(judge, TextOnlyJudge)
        critiques = judge.judge_batch(chains(2))
        picked = judge.pick_best(chains(2))
        plain = make_judge(spec)
        plain.judge_batch(chains(2)[:1])
    assert all(c.valid for c in critiques) and picked == 1
    blanked = [_sent_image(r) for r in server.requests[:-1]]
    assert all(im.size == (64, 64) and im.getcolors() == [(64 * 64, (255, 255, 255))] for im in blanked)
    assert len(_sent_image(server.requests[-1]).getcolors()) > 1  # the unwrapped judge sees the real image
    assert judge.fingerprint() != plain.fingerprint()


def test_text_only_leaves_judges_without_images_alone():
    judge = make_judge("text-only:random,seed=1")
    assert judge.needs_images is False
    assert [c.verdicts for c in judge.judge_batch(chains(4))] == \
        [c.verdicts for c in RandomJudge("random", seed=1).judge_batch(chains(4))]


# ----------------------------------------------------------------------------- generative modes (fake server)

def test_score_and_verifier_modes():
    with FakeOpenAIServer() as server:
        scored = fake_openai(server, mode="score").judge_batch(chains(2))
        verified = fake_openai(server, mode="verifier", task="logic_correctness").judge_batch(chains(2))
    assert [c.chain_score for c in scored] == [0.7, 0.7] and all(c.valid for c in scored)
    assert scored[0].verdicts == [None] * 3
    # only the reasoning step is asked about logic; the fake critic calls it incorrect
    assert verified[0].verdicts == [None, None, False] and verified[0].valid
    assert verified[0].extra["labels"] == [None, None, "incorrect"]


def test_lookback_follows_visco_algorithm_1():
    """RaiseQuestion per step from the image and that step, q added, AnswerQuestion for each, then one Critique
    given the questions and answers; no first critique (VISCO Appendix D, Algorithm 1)."""
    chain = chains(2)[0]
    with FakeOpenAIServer() as server:
        # one request at a time, so the server sees them in the order they are asked
        (critique,) = fake_openai(server, strategy="lookback", concurrency=1).judge_batch([chain])
    sent = server.prompt_texts()
    steps = [step["text"] for step in chain["steps"]]
    # 3 RaiseQuestion requests (one per step) + 4 AnswerQuestion (3 raised questions + q) + 1 Critique, in order
    assert len(sent) == 3 + 4 + 1
    for k, text in enumerate(steps):  # each RaiseQuestion sees its own step, not the others nor the chain's question
        assert "JSON list of at most" in sent[k] and text in sent[k]
        assert not any(other in sent[k] for other in steps if other != text) and chain["question"] not in sent[k]
    answered = sent[3:7]
    assert all("from what you can see" in p for p in answered)
    assert f"Question: {chain['question']}" in answered[-1]  # the original question q joins Q, last
    final = sent[-1]
    assert all(step in final for step in steps) and "-> " in final and "first review" not in final
    assert critique.valid and critique.verdicts == [True, False, True]
    assert len(critique.extra["lookback"]["checks"]) == 4 and "first" not in critique.extra["lookback"]


def test_step_score_mode_rates_each_step_given_the_steps_before_it():
    """MiCEval's per-step scoring evaluator: one 0-10 rating per step, with the question and the earlier steps only;
    the rating / 10 is the step's score (p_incorrect = 1 - it), under 0.5 is flagged, the chain gets the mean."""
    from stepcritic.eval.judges.generative import GenerativeJudge, Reply

    class Scripted(GenerativeJudge):
        kind = "scripted"

        def generate(self, prompts):
            self.sent = [p.messages[0]["content"][1]["text"] for p in prompts]
            return [Reply("8"), Reply("Score: 2"), Reply("no idea")][:len(prompts)]

    chain = chains(2)[0]
    judge = Scripted("scripted", mode="step-score")
    (critique,) = judge.judge_batch([chain])
    steps = [step["text"] for step in chain["steps"]]
    assert len(judge.sent) == len(steps) == 3
    for k, text in enumerate(judge.sent):  # step k is rated with steps before it, never the ones after
        assert f"Step {k + 1}: {steps[k]}" in text and chain["question"] in text
        assert all(later not in text for later in steps[k + 1:])
    assert critique.verdicts == [True, False, None] and critique.p_incorrect == pytest.approx([0.2, 0.8, None])
    assert critique.chain_score == pytest.approx(0.5) and not critique.valid
    assert critique.extra["n_outputs"] == 3 and critique.extra["n_invalid"] == 1
    assert Scripted("s", mode="step-score").fingerprint() != Scripted("s", mode="score").fingerprint()


def test_a_step_score_judge_has_its_somers_d_in_the_report_beside_the_other_routes(tmp_path):
    """MiCEval's "Step, w/o MiCEval" evaluator is reported like every judge with step scores: its Somers' D against the
    human step scores (all steps, description steps, reasoning steps) and against the chain label, in the same tables
    as the critique route and the baselines."""
    from stepcritic.data_prep.schema import save_chains
    from stepcritic.data_prep.synth import synthesize
    from stepcritic.eval.judges.generative import GenerativeJudge, Reply
    from stepcritic.eval.runner import build_judge, evaluate
    from stepcritic.eval.tasks import METRICS, lookup

    class StepScores(GenerativeJudge):
        kind = "test-step-score"
        needs_images = False

        def generate(self, prompts):
            return [Reply(str(sum(map(ord, p.messages[0]["content"][1]["text"])) % 11)) for p in prompts]

    save_chains(synthesize(24, seed=4, image_size=32), str(tmp_path / "chains"))
    judges = [StepScores("step-score-judge", mode="step-score"), build_judge("always-correct")]
    metrics = evaluate(str(tmp_path / "chains"), judges, str(tmp_path / "out"), tasks=["critique"], progress=False,
                       log=lambda line: None)
    overall = metrics["judges"]["step-score-judge"]["overall"]
    names = ("somers_d_step", "somers_d_chain", "somers_d_description", "somers_d_reasoning")
    assert all(lookup(overall, METRICS[name]) is not None for name in names)
    report = (tmp_path / "out" / "report.md").read_text()
    checked = []
    for table in ("## Leaderboard", "## Diagnostics"):
        lines = report[report.index(table):].splitlines()
        header = next(line for line in lines if line.startswith("| Judge"))
        row = next(line for line in lines if line.startswith("| `step-score-judge`"))
        cells = dict(zip(header.split("|"), row.split("|")))
        for name in names:
            if f" {METRICS[name].display} " in cells:
                value = lookup(overall, METRICS[name])
                assert cells[f" {METRICS[name].display} "].strip(" *") == f"{100 * value:.1f}", name
                checked.append(name)
    assert sorted(checked) == sorted(names) and "`always-correct`" in report


# ----------------------------------------------------------------------------- reading replies

@pytest.mark.parametrize("text, n, expected", [
    ("B", 3, 1), (" c. ", 3, 2), ("**A**", 2, 0), ("Answer D is best.", 4, 3), ("The best one is (b).", 3, 1),
    ("A careful look shows C", 3, 2), ("B is the most careful", 3, 1), ("E", 3, None), ("none of them", 3, None),
    ("", 2, None), (None, 2, None),
])
def test_parse_letter(text, n, expected):
    assert parse_letter(text, n) == expected


def test_pick_best_asks_one_listwise_question():
    with FakeOpenAIServer() as server:
        assert fake_openai(server).pick_best(chains(4)[:3]) == 1
        server.garbage = "I cannot decide."
        assert fake_openai(server).pick_best(chains(2)) is None
    text = server.prompt_texts()[0]
    assert "Answer A:" in text and "Answer C:" in text and "(A, B, C)" in text


@pytest.mark.parametrize("text, labels, expected", [
    ("Incorrect.", ("correct", "incorrect"), "incorrect"), ("correct", ("correct", "incorrect"), "correct"),
    ("yes", ("relevant", "irrelevant"), "relevant"),
    ("No, it repeats step 1", ("informative", "uninformative"), "uninformative"),
    ("non-spatial", ("entity", "attribute", "spatial", "non_spatial"), "non_spatial"),
    ("It is PARTIAL", ("correct", "partial", "unsupported"), "partial"), ("maybe", ("correct", "incorrect"), None),
])
def test_parse_label(text, labels, expected):
    assert parse_label(text, labels) == expected


def test_parse_score_and_questions():
    assert parse_score("I'd give it 8/10") == 0.8
    assert parse_score("eleven") is None and parse_score("42") is None
    assert parse_questions('Sure: ["Is it red?", "How many?"]') == ["Is it red?", "How many?"]
    assert parse_questions("1. Is it red?\n2. What shape is it?\nThat is all.") == ["Is it red?", "What shape is it?"]


# ----------------------------------------------------------------------------- the local hf judge

def test_weights_digest_follows_the_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "adapter_model.safetensors").write_bytes(b"v1")
    before = weights_digest(str(tmp_path))
    (tmp_path / "adapter_model.safetensors").write_bytes(b"v2")
    assert weights_digest(str(tmp_path)) != before
    assert weights_digest("org/hub-model") == "name:org/hub-model"


@pytest.fixture(scope="module")
def tiny_critic():
    from stepcritic.train.tiny.cache import tiny_critic_path

    return tiny_critic_path()  # the shared build cache: built once, reused by every test file


def test_hf_judge_with_an_untrained_tiny_model(tiny_critic):
    critic = make_judge(f"hf:{tiny_critic},max_new_tokens=8,batch_size=2")
    critiques = critic.judge_batch(chains(2))
    # random weights write nonsense: every chain must be reported invalid with its raw text, not crash
    assert [c.chain_id for c in critiques] == [c["chain_id"] for c in chains(2)]
    assert all(not c.valid and c.raw is not None and len(c.verdicts) == 3 for c in critiques)
    verifier = make_judge(f"hf:{tiny_critic},mode=verifier,task=description_correctness,max_new_tokens=4")
    (checked,) = verifier.judge_batch(chains(2)[:1])
    assert len(json.loads(checked.raw)) == 2  # one prompt per description step
    assert checked.extra["task"] == "description_correctness" and len(checked.extra["labels"]) == 3
    assert critic.fingerprint() != verifier.fingerprint()
