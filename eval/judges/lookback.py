"""VISCO's LookBack critique strategy (`strategy=lookback` on any generative judge).

Critics tend to take a chain's claims about the image on trust. LookBack makes the model go back to the
image before its final word:

1. a first critique, with the ordinary critique prompt;
2. for every step, questions about the visual facts the step takes for granted;
3. each question (plus the chain's own question, since a candidate answer helps the critique) answered
   from the image alone;
4. the final critique: the ordinary critique prompt, followed by the first critique and the checked
   observations.

Every phase is one `generate` call over all chains of the batch, so API judges run it concurrently.
A chain whose first or final request fails is invalid; a failed question or answer only loses that check.
"""

from __future__ import annotations

from stepcritic.data_prep import prompts
from stepcritic.data_prep.critique import parse_questions
from stepcritic.eval.judges.base import Critique
from stepcritic.eval.judges.generative import GenerativeJudge, chain_prompt, critique_from_reply, with_appended_text

TEMPLATES = ["lookback_questions", "lookback_answer", "lookback_final"]  # in `data_prep/templates/`


def lookback_critiques(judge: GenerativeJudge, chains: list[dict]) -> list[Critique]:
    first = judge.generate([judge.critique_prompt(c) for c in chains])
    live = [i for i, reply in enumerate(first) if not reply.error]

    # phase 2: verification questions, one request per step
    asks = [(i, chain_prompt(prompts.lookback_question_messages(chains[i], k, judge.max_questions), chains[i]))
            for i in live for k in range(len(chains[i]["steps"]))]
    questions: dict[int, list[str]] = {i: [] for i in live}
    for (i, _), reply in zip(asks, judge.generate([p for _, p in asks])):
        questions[i] += parse_questions(reply.text)[:judge.max_questions]
    for i in live:
        questions[i].append(chains[i]["question"])

    # phase 3: answer every question from the image alone
    pending = [(i, q) for i in live for q in questions[i]]
    answers = judge.generate([chain_prompt(prompts.lookback_answer_messages(q), chains[i]) for i, q in pending])
    checks: dict[int, list[dict]] = {i: [] for i in live}
    for (i, q), reply in zip(pending, answers):
        if not reply.error and reply.text and reply.text.strip():
            checks[i].append({"question": q, "answer": reply.text.strip()})

    # phase 4: the final critique, informed by the checks
    finals = judge.generate([
        with_appended_text(judge.critique_prompt(chains[i]),
                           "\n\n" + prompts.lookback_final_text((first[i].text or "").strip(), checks[i]))
        for i in live])
    final_of = dict(zip(live, finals))

    critiques = []
    for i, chain in enumerate(chains):
        critique = critique_from_reply(chain, final_of.get(i, first[i]))
        critique.extra["lookback"] = {"first": first[i].text, "checks": checks.get(i, [])}
        critiques.append(critique)
    return critiques
