"""VISCO's LookBack critique strategy (`strategy=lookback` on any generative judge), as its Algorithm 1.

Critics tend to take a chain's claims about the image on trust. LookBack makes the model go back to the image
before it critiques (VISCO, Section 5 and Appendix D, Algorithm 1):

1. RaiseQuestion: for every step T_i, questions about the visual facts it relies on, from the image and T_i;
2. the chain's own question q joins them;
3. AnswerQuestion: each question answered from the image alone;
4. Critique: the ordinary critique prompt for (q, chain, answer), followed by the questions and their answers.

There is no first critique: an earlier version fed one into the final prompt, which the paper's algorithm does not.
Every phase is one `generate` call over all chains of the batch, so API judges run it concurrently. A chain any of
whose requests got no answer is `failed` (not a judgment, asked again by the next run): a lost question or answer
would change what the final critique is shown.
Because of these rounds, LookBack judges (and the runner saves) a whole batch at a time: `Judge.judge_stream`'s
batch-level default, not the OpenAI judge's per-judgment stream. A killed LookBack run can repeat up to one batch.
"""

from __future__ import annotations

from stepcritic.data_prep import prompts
from stepcritic.data_prep.critique import parse_questions
from stepcritic.data_prep.schema import chain_images
from stepcritic.eval.judges.base import Critique
from stepcritic.eval.judges.prompting import chain_prompt, critique_from_reply, with_appended_text

TEMPLATES = ["lookback_questions", "lookback_answer", "lookback_final"]  # in `data_prep/templates/`


def lookback_critiques(judge, chains: list[dict]) -> list[Critique]:
    """`judge`'s critiques of `chains` (a `GenerativeJudge`: its `generate`, `critique_prompt`, `max_questions`)."""
    # RaiseQuestion: one request per step, from the image and that step
    asks = [(i, chain_prompt(prompts.lookback_question_messages(chain, k, judge.max_questions), chain))
            for i, chain in enumerate(chains) for k in range(len(chain["steps"]))]
    questions: list[list[str]] = [[] for _ in chains]
    lost: list[str | None] = [None] * len(chains)  # the first request error of each chain
    for (i, _), reply in zip(asks, judge.generate([p for _, p in asks])):
        lost[i] = lost[i] or reply.error
        questions[i] += parse_questions(reply.text)[:judge.max_questions]
    for i, chain in enumerate(chains):
        questions[i].append(chain["question"])

    # AnswerQuestion: every question answered from the image alone
    pending = [(i, q) for i in range(len(chains)) for q in questions[i]]
    answers = judge.generate([chain_prompt(prompts.lookback_answer_messages(q, len(chain_images(chains[i]))), chains[i])
                              for i, q in pending])
    checks: list[list[dict]] = [[] for _ in chains]
    for (i, q), reply in zip(pending, answers):
        lost[i] = lost[i] or reply.error
        if not reply.error and reply.text and reply.text.strip():
            checks[i].append({"question": q, "answer": reply.text.strip()})

    # Critique, given the questions and their answers
    finals = judge.generate([
        with_appended_text(judge.critique_prompt(chain), "\n\n" + prompts.lookback_final_text(checks[i]))
        for i, chain in enumerate(chains)])
    critiques = []
    for i, chain in enumerate(chains):
        critique = critique_from_reply(chain, finals[i])
        if lost[i] and not critique.failed:
            critique.failed, critique.valid, critique.error = True, False, lost[i]
        critique.extra["lookback"] = {"checks": checks[i]}
        critiques.append(critique)
    return critiques
