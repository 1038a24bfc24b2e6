"""Test doubles for RL of a policy, as `py:rl_fakes.CLASS` specs: a critic built to be gamed."""

from stepcritic.eval.judges.base import Critique, Judge


class LengthCritic(Judge):
    """Rewards long answers: every step of an n-step chain scores n / (n + 1), whatever it says."""

    kind = "py"

    def judge_batch(self, chains):
        out = []
        for chain in chains:
            n = len(chain["steps"])
            p = [1 / (n + 1)] * n
            out.append(Critique(chain["chain_id"], verdicts=[x < 0.5 for x in p], p_incorrect=p))
        return out
