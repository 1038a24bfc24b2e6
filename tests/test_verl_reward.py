"""The critic as verl's custom reward function: loaded from its file as verl loads it, the question and images read
from `extra_info`, one judge per process, the batch form, and the errors a misconfigured run gets."""

import importlib.util
import os
from collections.abc import Mapping

import numpy as np
import pytest
from helpers import png

from stepcritic.data_prep.schema import validate_chain
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.judges.registry import build_judge
from stepcritic.eval.scores import step_scores
from stepcritic.rewards import verl

pytestmark = pytest.mark.usefixtures("one_torch_thread")

QUESTION = "What colour is the shape?"
ANSWER = "Step 1: The image shows one circle.\nStep 2: The circle is red."
STEPS = ["The image shows one circle.", "The circle is red."]
VERL_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rewards", "verl.py")


@pytest.fixture(scope="module")
def spec(tiny_prm):
    return f"prm:{tiny_prm}"


@pytest.fixture(scope="module")
def expected(spec):
    """`stepcritic eval`'s step scores of the answer, with the picture and without."""
    judge = build_judge(spec)
    with_image, text_only = [validate_chain({"chain_id": "c", "question": QUESTION, "image": image,
                                             "steps": [{"text": s} for s in STEPS]}) for image in (png(), None)]
    return {name: step_scores(judge.judge_batch([chain])[0].to_json())
            for name, chain in (("image", with_image), ("text", text_only))}


def load_like_verl(**reward_kwargs):
    """What verl's `get_custom_reward_fn` does: import the file under a module name of its own, then call the named
    function with `reward_kwargs` added to every call."""
    spec = importlib.util.spec_from_file_location("custom_module", VERL_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return lambda *args, **kwargs: module.compute_score(*args, **kwargs, **reward_kwargs)


def test_compute_score_loaded_from_its_file_scores_as_eval_does(spec, expected):
    compute_score = load_like_verl(judge=spec, aggregate="mean")
    reward = compute_score("geo3k", ANSWER, "red", extra_info={"question": QUESTION, "images": [png()], "index": 3})
    assert reward == pytest.approx(sum(expected["image"]) / 2, abs=1e-6)
    assert isinstance(reward, float)
    # newer verl versions add keyword arguments of their own
    assert compute_score(data_source="geo3k", solution_str=ANSWER, ground_truth="red",
                         extra_info={"question": QUESTION, "image": png()}, reward_router_address=None) == reward


def test_the_question_falls_back_to_the_prompt_and_the_images_are_optional(spec, expected):
    # a verl chat prompt (read from parquet: NumPy object arrays), its image marked in the text
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "<image>" + QUESTION}]
    with_picture = verl.compute_score("geo3k", ANSWER, "red", {"prompt": np.array(chat, dtype=object),
                                                               "images": np.array([png()], dtype=object)},
                                      judge=spec)
    assert with_picture == pytest.approx(min(expected["image"]), abs=1e-6)
    assert verl.compute_score("geo3k", ANSWER, "red", {"question": f"<image>\n{QUESTION}", "images": [png()]},
                              judge=spec) == with_picture
    plain = verl.compute_score("geo3k", ANSWER, "red", {"prompt": QUESTION}, judge=spec)
    assert plain == pytest.approx(min(expected["text"]), abs=1e-6)
    assert verl.compute_score("geo3k", ANSWER, "red", {"question": QUESTION}, judge=spec) == plain


def test_one_judge_per_spec_for_the_whole_process(spec, monkeypatch):
    monkeypatch.setattr(verl, "_JUDGES", {})
    monkeypatch.setattr(verl, "_REWARDS", {})
    first = verl.step_reward(spec, "min")
    assert verl.step_reward(spec, "min") is first
    other = verl.step_reward(spec, "last")
    assert other is not first and other.judge is first.judge
    assert len(verl._JUDGES) == 1


class CountingJudge(Judge):
    """P(incorrect) 0.5 for the first step, 0.1 for the others; counts its calls."""

    kind = "counting"
    calls = 0

    def judge_batch(self, chains):
        CountingJudge.calls += 1
        return [Critique(c["chain_id"], verdicts=[True] * len(c["steps"]),
                         p_incorrect=[0.5] + [0.1] * (len(c["steps"]) - 1)) for c in chains]


class UnreadableJudge(Judge):
    kind = "unreadable"

    def judge_batch(self, chains):
        return [Critique(c["chain_id"], verdicts=[None] * len(c["steps"]), valid=False) for c in chains]


def test_the_batch_form_judges_the_batch_in_one_pass():
    CountingJudge.calls = 0
    infos = [{"question": QUESTION}] * 3
    rewards = verl.compute_score_batch(["a"] * 3, [ANSWER, "", "One.\nTwo.\nThree."], ["red"] * 3, infos,
                                       judge="py:test_verl_reward.CountingJudge", aggregate="last")
    assert rewards == pytest.approx([0.9, 0.0, 0.9])
    assert CountingJudge.calls == 1
    single = [verl.compute_score("a", text, "red", {"question": QUESTION}, judge="py:test_verl_reward.CountingJudge",
                                 aggregate="last") for text in (ANSWER, "", "One.\nTwo.\nThree.")]
    assert single == rewards


def test_a_judge_block_from_the_config_names_the_same_judge():
    class Config(Mapping):  # what OmegaConf hands over: a mapping that is not a dict
        def __init__(self, values):
            self.values = values

        def __getitem__(self, key):
            return self.values[key]

        def __iter__(self):
            return iter(self.values)

        def __len__(self):
            return len(self.values)

    block = {"kind": "py", "target": "test_verl_reward.CountingJudge"}
    by_block = verl.compute_score("a", "One.\nTwo.", "x", {"question": QUESTION}, judge=block)
    by_config = verl.compute_score("a", "One.\nTwo.", "x", {"question": QUESTION}, judge=Config(block))
    assert by_block == by_config == pytest.approx(0.5)


def test_verl_gets_a_number_for_every_response():
    unreadable = "py:test_verl_reward.UnreadableJudge"
    assert verl.compute_score("a", "One step.", "x", {"question": QUESTION}, judge=unreadable) == 0.0
    assert verl.compute_score("a", "One step.", "x", {"question": QUESTION}, judge=unreadable,
                              unscored_reward=-0.5) == -0.5
    assert verl.compute_score("a", " ", "x", {"question": QUESTION}, judge=unreadable, empty_reward=-1) == -1.0


@pytest.mark.parametrize("call, message", [
    (lambda: verl.compute_score("a", ANSWER, "x", {"question": QUESTION}), "judge: no critic given"),
    (lambda: verl.compute_score("a", ANSWER, "x", {"index": 0}, judge="py:test_verl_reward.CountingJudge"),
     r"extra_info has no 'question' \(nor 'prompt'\)"),
    (lambda: verl.compute_score("a", ANSWER, "x", None, judge="py:test_verl_reward.CountingJudge"),
     "extra_info has no 'question'"),
    (lambda: verl.compute_score("a", ANSWER, "x", {"question": QUESTION}, judge="py:test_verl_reward.CountingJudge",
                                unscored_reward=None), "unscored_reward: verl needs a number"),
    (lambda: verl.compute_score("a", None, "x", {"question": QUESTION}, judge="py:test_verl_reward.CountingJudge"),
     "solution_str must be a string"),
    (lambda: verl.compute_score_batch(["a"], [ANSWER], ["x"], [], judge="py:test_verl_reward.CountingJudge"),
     "1 solution_strs but 0 extra_infos"),
])
def test_a_misconfigured_run_gets_one_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
