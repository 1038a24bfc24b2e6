"""Generative test doubles for `stepcritic generate` and `data label`, as `py:policy_fakes.CLASS` specs (conftest puts
tests/ on the path): each counts the prompts it was asked, and can be told to stop after a number of them (a kill)."""

import pytest

from stepcritic.eval.judges.generative import GenerativeJudge
from stepcritic.eval.judges.prompting import Reply

ASKED: list = []  # every prompt asked, in order, by any double below
STOP_AFTER: list = []  # [n]: raise once n prompts have been asked in all (the process "killed")


@pytest.fixture(autouse=True)
def fresh_fakes():
    """Imported by a test module: each of its tests starts with no prompts counted and no kill set."""
    ASKED.clear()
    STOP_AFTER.clear()
    yield
    STOP_AFTER.clear()


def _text(prompt) -> str:
    return "".join(p.get("text") or "" for m in prompt.messages for p in m["content"] if isinstance(m["content"], list))


class _Counting(GenerativeJudge):
    kind = "py"
    CONTINUES = True

    def generate(self, prompts):
        replies = []
        for prompt in prompts:
            if STOP_AFTER and len(ASKED) >= STOP_AFTER[0]:
                raise KeyboardInterrupt("killed")
            ASKED.append(prompt)
            replies.append(Reply(text=self.reply(prompt)))
        return replies


class FakePolicy(_Counting):
    """Cycles through a right chain, a wrong one, one without an answer and a blank one."""

    REPLIES = ("The circle is red.\nSo the answer is red.", "The circle is blue.\nSo the answer is blue.",
               "The circle is red.", "  ")

    def reply(self, prompt) -> str:
        return self.REPLIES[(len(ASKED) - 1) % len(self.REPLIES)]


class ReachesGold(_Counting):
    """A completer that reaches the gold answer ("red") exactly when the prefix it continues has no wrong step (a step
    whose text says "wrong"): Math-Shepherd's labels are then the true ones, exactly. It reads the step texts only."""

    def reply(self, prompt) -> str:
        assert prompt.continue_final and prompt.messages[-1]["role"] == "assistant"
        prefix = prompt.messages[-1]["content"][0]["text"]
        return "So the answer is blue." if "wrong" in prefix else "So the answer is red."


class HalfTheTime(_Counting):
    """Reaches the gold answer on every second continuation of a prefix without a wrong step: soft labels of 0.5."""

    def reply(self, prompt) -> str:
        prefix = prompt.messages[-1]["content"][0]["text"]
        same = sum(_text(p) == _text(prompt) for p in ASKED)
        return "So the answer is red." if "wrong" not in prefix and same % 2 == 0 else "So the answer is blue."


class Draws(_Counting):
    """Writes a number drawn from torch's generator, as a local model's sampling draws: two replies are the same only
    when the same random numbers were drawn for them."""

    def reply(self, prompt) -> str:
        import torch

        return f"The draw is {torch.rand(1).item():.9f}.\nSo the answer is red."
