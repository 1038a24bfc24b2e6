"""Test doubles for `stepcritic search`, as `py:search_fakes.CLASS` specs: a policy whose samples have known answers and
a critic whose scores are known. Both count what they were asked and can be told to stop after a number (a kill)."""

import re

from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.judges.generative import GenerativeJudge
from stepcritic.eval.judges.prompting import Reply

ASKED: list = []  # every policy prompt, in order
SCORED: list = []  # every chain the critic scored, as its step texts
STOP_AFTER: dict = {}  # {"policy": n} or {"critic": n}: raise once n have been asked (the process "killed")
COLOURS = ("red", "blue", "green")
# the samples of a question, in the order it is asked for them: majority says blue, the gold answer is red
SAMPLES = ("The circle is blue.\nSo the answer is blue.", "The circle is blue.\nSo the answer is blue.",
           "The circle is red.\nSo the answer is red.", "The circle is green.\nSo the answer is green.")


def _text(prompt) -> str:
    return "".join(p.get("text") or "" for m in prompt.messages for p in m["content"] if isinstance(m["content"], list))


def colour(text: str) -> str | None:
    found = re.findall(r"\b(red|blue|green)\b", text)
    return found[-1] if found else None


class SearchPolicy(GenerativeJudge):
    """A fresh question's k-th plain prompt gets SAMPLES[k % 4]; a begun answer is finished in the colour of its last
    step ("So the answer is <colour>.")."""

    kind = "py"
    CONTINUES = True
    SAMPLES = SAMPLES

    def generate(self, prompts):
        replies = []
        for prompt in prompts:
            if "policy" in STOP_AFTER and len(ASKED) >= STOP_AFTER["policy"]:
                raise KeyboardInterrupt("killed")
            if prompt.continue_final:
                prefix = prompt.messages[-1]["content"][0]["text"]
                text = f"So the answer is {colour(prefix)}."
            else:
                seen = sum(not p.continue_final and _text(p) == _text(prompt) for p in ASKED)
                text = self.SAMPLES[seen % len(self.SAMPLES)]
            ASKED.append(prompt)
            replies.append(Reply(text=text))
        return replies


class Unfinished(SearchPolicy):
    """Samples of which one is blank and one states no answer."""

    SAMPLES = ("  ", "The circle is red.\nSo the answer is red.", "The circle is blue.\nSo the answer is blue.",
               "The circle is red.")


class ColourCritic(Judge):
    """Scores a step by the colour it names (`red`, `blue`, `green` options; 0.8 for a step naming none): known scores
    that say nothing of the gold answer, which it never sees."""

    kind = "py"
    batch_size = 1  # a kill loses no scored chain

    def __init__(self, spec, red=0.9, blue=0.2, green=0.3, answer_step=None, **options):
        super().__init__(spec, red=red, blue=blue, green=green, answer_step=answer_step, **options)
        self.score = {"red": float(red), "blue": float(blue), "green": float(green), None: 0.8}
        self.answer_step = answer_step  # the score of every "So the answer is ..." step, whatever its colour

    def step_score(self, text: str) -> float:
        if self.answer_step is not None and text.startswith("So the answer"):
            return float(self.answer_step)
        return self.score[colour(text)]

    def judge_batch(self, chains):
        out = []
        for chain in chains:
            if "critic" in STOP_AFTER and len(SCORED) >= STOP_AFTER["critic"]:
                raise KeyboardInterrupt("killed")
            assert chain.get("reference_answer") is None and chain.get("answer_correct") is None
            texts = [s["text"] for s in chain["steps"]]
            SCORED.append(texts)
            p = [1 - self.step_score(t) for t in texts]
            out.append(Critique(chain["chain_id"], verdicts=[x < 0.5 for x in p], p_incorrect=p))
        return out


class ChainOnly(ColourCritic):
    """A critic that scores whole chains only, as an outcome reward model does."""

    def judge_batch(self, chains):
        return [Critique(c["chain_id"], verdicts=[None] * len(c["steps"]), chain_score=0.5) for c in chains]
