"""`StepReward`: TRL-shaped inputs (plain, conversational, with images) scored as `stepcritic eval` scores the same
chains, under every aggregate; the fallbacks; a judge that scores whole chains only; a judge failure."""

import io
import json
import math
import subprocess
import sys

import pytest
from helpers import chains, png, train_tiny
from PIL import Image

from stepcritic.data_prep.schema import validate_chain
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.judges.registry import build_judge
from stepcritic.eval.scores import step_scores
from stepcritic.rewards import StepReward
from stepcritic.rewards.core import AGGREGATES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RED, BLUE = (255, 0, 0), (0, 0, 255)
QUESTION = "What colour is the shape?"
ANSWERS = [
    "Step 1: The image shows one circle.\nStep 2: The circle is red.\nStep 3: So the answer is red.",
    "The image shows one circle.\n\nThe circle is blue.",
    "The circle is red.",
]
ANSWER_STEPS = [["The image shows one circle.", "The circle is red.", "So the answer is red."],
                ["The image shows one circle.", "The circle is blue."],
                ["The circle is red."]]


def pil(color):
    return Image.open(io.BytesIO(png(color)))


def eval_predictions(judge, question, steps_per_chain, image=None, images=None):
    """What `stepcritic eval` reads for these chains (each with `image`, or its own of `images`), judged in one batch
    as the reward judges them: the judge's critiques as predictions."""
    images = images or [image] * len(steps_per_chain)
    records = [validate_chain({"chain_id": f"c{i}", "question": question, "steps": [{"text": s} for s in steps],
                               "image": image}) for i, (steps, image) in enumerate(zip(steps_per_chain, images))]
    return [critique.to_json() for critique in judge.judge_batch(records)]


def aggregated(scores, aggregate):
    known = [s for s in scores if s is not None]
    return {"min": min(known), "mean": sum(known) / len(known), "prod": math.prod(known),
            "last": scores[-1]}[aggregate]


@pytest.fixture(scope="module")
def spec(tiny_prm):
    return f"prm:{tiny_prm}"


@pytest.fixture(scope="module")
def eval_judge(spec):
    """An independent judge built from the spec, as `stepcritic eval` builds it."""
    return build_judge(spec)


@pytest.fixture(scope="module")
def critics(spec):
    return {aggregate: StepReward(spec, aggregate=aggregate) for aggregate in AGGREGATES}


def as_messages(text):
    return [{"role": "assistant", "content": text}]


def vlm_prompt(image):
    """A prompt as TRL's VLM path hands it to reward functions: the image filled into its part."""
    return [{"role": "system", "content": "Answer step by step."},
            {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": QUESTION}]}]


@pytest.mark.parametrize("aggregate", AGGREGATES)
def test_plain_prompts_score_as_eval_does(critics, eval_judge, aggregate):
    preds = eval_predictions(eval_judge, QUESTION, ANSWER_STEPS)
    critic = critics[aggregate]
    rewards = critic([QUESTION] * 3, ANSWERS, completion_ids=[[1]] * 3)
    assert rewards == pytest.approx([aggregated(step_scores(p), aggregate) for p in preds], abs=1e-6)
    got = critic.step_scores([QUESTION] * 3, ANSWERS)
    for mine, pred in zip(got, preds):
        assert mine == pytest.approx(step_scores(pred), abs=1e-6)
    assert len(set(got[0])) == 3  # three different step scores: every aggregate reads a different number


@pytest.mark.parametrize("aggregate", AGGREGATES)
def test_conversational_prompts_with_images_score_as_eval_does(critics, eval_judge, aggregate):
    prompts = [vlm_prompt(pil(RED))] * 3
    rewards = critics[aggregate](prompts, [as_messages(a) for a in ANSWERS], images=[[pil(RED)]] * 3)
    with_image = eval_predictions(eval_judge, QUESTION, ANSWER_STEPS, image=png(RED))
    assert rewards == pytest.approx([aggregated(step_scores(p), aggregate) for p in with_image], abs=1e-6)
    # the picture reached the critic: without it the same critic scores the same steps otherwise
    text_only = eval_predictions(eval_judge, QUESTION, ANSWER_STEPS)
    assert all(abs(r - aggregated(step_scores(p), aggregate)) > 1e-6 for r, p in zip(rewards, text_only))


def test_every_way_trl_hands_the_images_gives_the_same_rewards(critics):
    critic = critics["min"]
    completions = [as_messages(a) for a in ANSWERS[:2]]
    text_prompt = [{"role": "user", "content": QUESTION}]
    from_images = critic([text_prompt] * 2, completions, images=[[pil(BLUE)]] * 2)
    from_image = critic([text_prompt] * 2, completions, image=[pil(BLUE)] * 2)
    from_parts = critic([vlm_prompt(pil(BLUE))] * 2, completions)
    from_bytes = critic([text_prompt] * 2, completions, images=[[{"bytes": png(BLUE), "path": None}]] * 2)
    assert from_images == from_image == from_parts == pytest.approx(from_bytes, abs=1e-6)
    # the column wins over the images filled into the prompt: both are there in TRL's calls, and they are the same
    column_wins = critic([vlm_prompt(pil(RED))] * 2, completions, images=[[pil(BLUE)]] * 2)
    assert column_wins == pytest.approx(from_images, abs=1e-6)
    assert critic([vlm_prompt(pil(RED))] * 2, completions) != pytest.approx(from_images, abs=1e-6)


def test_a_text_only_row_in_a_batch_with_images(critics, eval_judge):
    text_prompt = [{"role": "user", "content": QUESTION}]
    rewards = critics["mean"]([vlm_prompt(pil(RED)), text_prompt], [as_messages(ANSWERS[0])] * 2,
                              images=[[pil(RED)], []])
    preds = eval_predictions(eval_judge, QUESTION, ANSWER_STEPS[:1] * 2, images=[png(RED), None])
    assert rewards == pytest.approx([aggregated(step_scores(p), "mean") for p in preds], abs=1e-6)
    assert abs(rewards[0] - rewards[1]) > 1e-6


def test_the_question_is_the_last_user_message(critics, eval_judge):
    prompt = [{"role": "user", "content": "An earlier question?"}, {"role": "assistant", "content": "Yes."},
              {"role": "user", "content": [{"type": "text", "text": "  What colour is the shape?  "}]}]
    reward = critics["min"]([prompt], [as_messages(ANSWERS[2])])
    pred = eval_predictions(eval_judge, QUESTION, ANSWER_STEPS[2:])[0]
    assert reward == pytest.approx([aggregated(step_scores(pred), "min")], abs=1e-6)


def test_an_image_placeholder_in_the_text_is_not_part_of_the_question(critics, eval_judge):
    # LLaVA-style data writes "<image>" into the text; left in, a LLaVA critic would count one image too many
    prompt = [{"role": "user", "content": f"<image>\n{QUESTION}"}]
    reward = critics["min"]([prompt], [ANSWERS[2]], images=[[pil(RED)]])
    pred = eval_predictions(eval_judge, QUESTION, ANSWER_STEPS[2:], image=png(RED))[0]
    assert reward == pytest.approx([aggregated(step_scores(pred), "min")], abs=1e-6)


def test_tool_results_are_not_judged_as_the_policys_steps(critics):
    critic = critics["min"]
    with_tool = [{"role": "assistant", "content": "The image shows one circle."},
                 {"role": "tool", "content": "colour picker: red"},
                 {"role": "assistant", "content": "The circle is red."}]
    assert critic.step_scores([QUESTION], [with_tool]) == critic.step_scores(
        [QUESTION], ["The image shows one circle.\n\nThe circle is red."])


class RecordingJudge(Judge):
    """Gives every step P(incorrect) = 0.25 and records the chains it was asked about."""

    kind = "recording"

    def __init__(self, spec="recording", **options):
        super().__init__(spec, **options)
        self.seen = []

    def judge_batch(self, chains):
        self.seen.extend(chains)
        return [Critique(c["chain_id"], verdicts=[True] * len(c["steps"]), p_incorrect=[0.25] * len(c["steps"]))
                for c in chains]


class UnreadableJudge(Judge):
    """A generative critic whose replies could not be read: no verdict for any step."""

    kind = "unreadable"

    def judge_batch(self, chains):
        return [Critique(c["chain_id"], verdicts=[None] * len(c["steps"]), valid=False) for c in chains]


class ChainOnlyJudge(Judge):
    """An outcome reward model: one score per chain, the number of steps / 10."""

    kind = "chain-only"

    def judge_batch(self, chains):
        return [Critique(c["chain_id"], verdicts=[None] * len(c["steps"]), chain_score=len(c["steps"]) / 10)
                for c in chains]


class FailingJudge(Judge):
    kind = "failing"

    def judge_batch(self, chains):
        return [Critique(c["chain_id"], verdicts=[], failed=True, error="HTTP 503 after 3 retries") for c in chains]


def test_a_completion_with_no_steps_gets_the_empty_reward_and_is_not_judged():
    judge = RecordingJudge()
    rewards = StepReward(judge)([QUESTION] * 3, ["The circle is red.", "   \n", as_messages("")])
    assert rewards == [0.75, 0.0, 0.0]
    assert [c["chain_id"] for c in judge.seen] == ["completion-0"]
    assert StepReward(judge, empty_reward=-1.0)([QUESTION], [""]) == [-1.0]
    assert StepReward(judge).step_scores([QUESTION] * 2, ["", "A.\nB."]) == [[], [0.75, 0.75]]


def test_a_completion_longer_than_a_critic_scores_is_unscored_not_a_crash():
    from stepcritic.train.limits import MAX_STEPS

    judge = RecordingJudge()
    rambling = "\n".join(f"Step {i}." for i in range(MAX_STEPS + 1))
    assert StepReward(judge, unscored_reward=-0.5)([QUESTION] * 2, [rambling, "A."]) == [-0.5, 0.75]
    assert [c["chain_id"] for c in judge.seen] == ["completion-1"]  # the long one never reached the critic


def test_a_completion_the_judge_gives_no_score_gets_none_which_trl_leaves_out():
    assert StepReward(UnreadableJudge("unreadable"))([QUESTION] * 2, ["A.", ""]) == [None, 0.0]
    assert StepReward(UnreadableJudge("unreadable"), unscored_reward=0.5)([QUESTION], ["A."]) == [0.5]


@pytest.mark.parametrize("aggregate", AGGREGATES)
def test_a_judge_of_whole_chains_gives_its_chain_score_under_every_aggregate(aggregate):
    critic = StepReward("py:test_step_reward.ChainOnlyJudge", aggregate=aggregate)
    assert critic([QUESTION] * 2, ANSWERS[:2]) == pytest.approx([0.3, 0.2])
    assert critic.step_scores([QUESTION] * 2, ANSWERS[:2]) == [[], []]
    assert critic.__name__ == f"stepcritic_chain_only_{aggregate}"


@pytest.fixture(scope="module")
def tiny_reward_model(tmp_path_factory):
    """A tiny outcome reward model after 2 training steps (`reward:DIR`)."""
    return train_tiny(tmp_path_factory.mktemp("tiny-reward"), "reward", "outcome-rm")


def test_a_trained_reward_model_scores_as_eval_does(tiny_reward_model):
    spec = f"reward:{tiny_reward_model}"
    preds = eval_predictions(build_judge(spec), QUESTION, ANSWER_STEPS, image=png(RED))
    expected = [p["chain_score"] for p in preds]
    assert all(isinstance(s, float) for s in expected)
    for aggregate in ("min", "last"):
        critic = StepReward(spec, aggregate=aggregate)
        assert critic([vlm_prompt(pil(RED))] * 3, ANSWERS) == pytest.approx(expected, abs=1e-6)
        assert critic.__name__ == f"stepcritic_reward_{aggregate}"
    assert critic.step_scores([vlm_prompt(pil(RED))], ANSWERS[:1]) == [[]]


def test_a_judge_failure_raises_instead_of_making_up_a_reward():
    with pytest.raises(RuntimeError, match="'completion-1' was not judged: HTTP 503"):
        StepReward(FailingJudge("failing"))([QUESTION] * 2, ["", "A."])


def test_score_and_score_chains(critics, eval_judge):
    critic = critics["prod"]
    pred = eval_predictions(eval_judge, QUESTION, ANSWER_STEPS[:1], image=png(RED))[0]
    expected = step_scores(pred)
    for scored in (critic.score(QUESTION, ANSWERS[0], images=png(RED)),
                   critic.score(QUESTION, ANSWER_STEPS[0], images=[pil(RED)])):
        assert scored.step_scores == pytest.approx(expected, abs=1e-6)
        assert scored.score == pytest.approx(math.prod(expected), abs=1e-6)
    assert critic.score(QUESTION, "  ").step_scores == [] and critic.score(QUESTION, "  ").score is None

    canonical = [validate_chain(c) for c in chains(4)]
    preds = [c.to_json() for c in eval_judge.judge_batch(canonical)]
    for aggregate, each in critics.items():
        scored = each.score_chains(canonical)
        assert [s.score for s in scored] == pytest.approx([aggregated(step_scores(p), aggregate) for p in preds],
                                                          abs=1e-6)


def test_the_name_trl_logs_it_by(critics):
    from trl.trainer.utils import get_callable_name

    assert get_callable_name(critics["min"]) == "stepcritic_prm_min"
    assert get_callable_name(critics["last"]) == "stepcritic_prm_last"


def test_it_logs_the_mean_number_of_steps_through_trl(critics):
    logged = []
    critics["min"]([QUESTION] * 3, ANSWERS, log_metric=lambda name, value: logged.append((name, value)),
                   log_extra=lambda *a: None, trainer_state=None)
    assert logged == [("rewards/stepcritic_prm_min/steps", 2.0)]


def test_a_batch_size_goes_to_the_judge_and_changes_no_score(spec, critics):
    small = StepReward(spec, batch_size=1)
    assert small.judge.batch_size == 1
    assert small([QUESTION] * 3, ANSWERS) == pytest.approx(critics["min"]([QUESTION] * 3, ANSWERS), abs=1e-5)


@pytest.mark.parametrize("make, message", [
    (lambda spec: StepReward(spec, aggregate="max"), "aggregate: unknown 'max'"),
    (lambda spec: StepReward(spec, batch_size=0), "batch_size must be a positive"),
    (lambda spec: StepReward(spec, split="(unclosed"), "split: "),
    (lambda spec: StepReward(spec, empty_reward=None), "empty_reward must be a number"),
    (lambda spec: StepReward(42), "judge must be a judge spec"),
    (lambda spec: StepReward(spec)(["q?"], ["a", "b"]), "1 prompts but 2 completions"),
    (lambda spec: StepReward(spec)(["q?"] * 2, ["a"] * 2, images=[[]]), "'images' column must hold one entry"),
    (lambda spec: StepReward(spec)([[{"role": "system", "content": "hi"}]], ["a"]), r"prompts\[0\]: no user"),
    (lambda spec: StepReward(spec)([[{"role": "user", "content": [{"type": "image"}]}]], ["a"]),
     r"prompts\[0\]: the question is empty"),
    (lambda spec: StepReward(spec)(["q?"], [{"content": "a"}]), r"completions\[0\]: expected a string"),
    (lambda spec: StepReward(spec).score("", "a"), "question must be a non-empty string"),
])
def test_bad_input_is_one_clear_error(spec, make, message):
    with pytest.raises(ValueError, match=message):
        make(spec)


def test_a_bad_spec_is_one_line_naming_it(tmp_path):
    from stepcritic.errors import UserError

    with pytest.raises(UserError) as e:
        StepReward(f"prm:{tmp_path / 'missing'}")
    assert "missing" in str(e.value) and "\n" not in str(e.value)


def test_importing_the_rewards_loads_no_model_library():
    code = ("import sys, json; import stepcritic.rewards as r; r.StepReward; import stepcritic.rewards.verl; "
            "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
