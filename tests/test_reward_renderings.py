"""StepReward and verl's reward function on chains written as MiCEval, VISCO and VisualProcessBench write them: the
answer text is cut back into the source's steps, and every step gets the score `stepcritic eval` gives the chain
stored with those steps (same question, same picture)."""

import pytest
from helpers import MICEVAL_STYLE, VISCO_STYLE, VISUALPROCESSBENCH_STYLE, png

from stepcritic.data_prep.schema import validate_chain
from stepcritic.eval.judges.registry import build_judge
from stepcritic.eval.scores import step_scores
from stepcritic.rewards import StepReward, verl
from stepcritic.rewards.splitting import SENTENCES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

QUESTION = "What does the image show?"
# (source, steps, the answer text as the source writes it, the split that reads it back)
RENDERINGS = [
    ("miceval", MICEVAL_STYLE[1], " ".join(MICEVAL_STYLE[1]), SENTENCES),
    ("visco", VISCO_STYLE[0], " ".join(VISCO_STYLE[0]), SENTENCES),
    ("visualprocessbench", VISUALPROCESSBENCH_STYLE[0], "\n\n".join(VISUALPROCESSBENCH_STYLE[0]), None),
]


@pytest.fixture(scope="module")
def spec(tiny_prm):
    return f"prm:{tiny_prm}"


def eval_step_scores(spec, steps):
    chain = validate_chain({"chain_id": "c", "question": QUESTION, "image": png(),
                            "steps": [{"text": s} for s in steps]})
    return step_scores(build_judge(spec).judge_batch([chain])[0].to_json())


@pytest.mark.parametrize("source, steps, text, split", RENDERINGS, ids=[r[0] for r in RENDERINGS])
def test_trl_and_verl_rewards_of_a_rendered_chain_are_evals_scores(spec, source, steps, text, split):
    expected = eval_step_scores(spec, steps)
    assert len(expected) == len(steps)
    critic = StepReward(spec, aggregate="min", split=split)
    prompts = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]]
    completions = [[{"role": "assistant", "content": text}]]
    got = critic.step_scores(prompts=prompts, completions=completions, images=[[png()]])[0]
    assert got == pytest.approx(expected, abs=1e-6)
    assert critic(prompts=prompts, completions=completions, images=[[png()]])[0] == pytest.approx(min(expected),
                                                                                                  abs=1e-6)
    reward = verl.compute_score(source, text, None, extra_info={"question": QUESTION, "images": [png()]},
                                judge=spec, aggregate="mean", split=split)
    assert reward == pytest.approx(sum(expected) / len(expected), abs=1e-6)
