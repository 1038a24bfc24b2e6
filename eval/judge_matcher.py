"""`--matcher judge:SPEC`: VISCO's LLM-judged explanation matching (Sec. 3.1.1, App. A.2) for explanation F1.

VISCO counts a correctly flagged step as explained only when an LLM (GPT-4o there), reading the question, the chain
and the human critiques, finds that the critic's explanation addresses the core error without adding an error of its
own; small omissions and other wording are fine. Here any generative judge spec plays that LLM. It is asked once per
step that explanation F1 reads (an incorrect step the critic flagged with an explanation), shown the question, every
step of the chain and its final answer, the step in question, every reference critique of that step and the
critic's explanation (`data_prep/templates/explanation_match.j2`, in our own words), text only as in VISCO; a last
line "Verdict: yes" is a match (1), "Verdict: no" or no readable verdict none (0, the latter counted as unparsed).

Departure: VISCO asks once per annotator and averages the three verdicts; the step's references are shown together
here, one request per step, since the data does not say which annotator wrote which critique of another step.

Replies are cached by content (`asking.ask`: the matcher's fingerprint and template, the chain's text, the step, its
references and the explanation) under `OUT/cache/matches/`, so a rerun, or another judge with the same explanation,
asks nothing again. A failed request counts as no match for this run and is asked again by the next.
"""

from __future__ import annotations

import os

from stepcritic.data_prep.prompts import load_template, template_hash, user_turn
from stepcritic.eval.asking import ask, content_key, is_generative
from stepcritic.eval.cache import JsonlLog, judge_cache_dir
from stepcritic.eval.errors import EvalError
from stepcritic.eval.judges.prompting import Prompt
from stepcritic.eval.judges.registry import build_judge
from stepcritic.eval.matchers import JUDGE_PREFIX as PREFIX
from stepcritic.eval.matchers import MATCHERS, parse_yes_no

TEMPLATE = "explanation_match"


def match_messages(item: dict) -> list[dict]:
    """The text-only user turn asking whether `item`'s explanation names the error its references describe."""
    text = load_template(TEMPLATE).render(
        question=item["question"], steps=item["steps"], final_answer=item.get("final_answer") or "",
        step_number=item["step_index"] + 1, references=item["references"], explanation=item["explanation"])
    return [user_turn(text)]


class LLMJudgeMatcher:
    """A generative judge deciding whether explanations match their references, every reply cached."""

    def __init__(self, judge, out_dir: str, progress: bool = True):
        if not is_generative(judge):
            raise EvalError(f"--matcher {PREFIX}{judge.name}: not a generative judge (hf:, openai:, vllm: or a py: "
                            "GenerativeJudge), so it cannot be asked whether explanations match")
        self.judge, self.progress = judge, progress
        self.name = f"{PREFIX}{judge.name}"
        self.fingerprint = content_key(judge.fingerprint(), template_hash(TEMPLATE))[:16]
        folder = os.path.join(out_dir, "cache", "matches",
                              os.path.basename(judge_cache_dir(out_dir, judge.cache_name, self.fingerprint)))
        self.log = JsonlLog(os.path.join(folder, "matches.jsonl"), "key")
        self.requests = {"asked": 0, "cached": 0, "failed": 0, "unparsed": 0}

    def key(self, item: dict) -> str:
        return content_key(self.fingerprint, item["question"], item["steps"], item.get("final_answer"),
                           item["step_index"], item["references"], item["explanation"])

    def __call__(self, explanation: str, reference: str) -> float:
        raise TypeError("the LLM judge matcher reads a step in its chain: call match_items")

    def match_items(self, items: list[dict]) -> list[float]:
        """1.0 or 0.0 per item ({question, steps, final_answer, step_index, references, explanation})."""
        keys = [self.key(item) for item in items]
        asked = ask(self.judge, [(k, lambda item=item: Prompt(match_messages(item), []))
                                 for k, item in zip(keys, items)], self.log, "explanation matching", self.progress)
        for name in ("asked", "cached", "failed"):
            self.requests[name] += asked[name]
        replies = {k: r["text"] for k, r in self.log.load().items()}
        scores = []
        for k in keys:
            verdict = parse_yes_no(replies[k]) if k in replies else None
            self.requests["unparsed"] += k in replies and verdict is None
            scores.append(float(bool(verdict)))
        return scores

    def close(self) -> None:
        self.log.close()
        self.judge.close()


def build(spec: str, out_dir: str, progress: bool = True):
    """The matcher `--matcher` names: "lexical", "embedding" (`matchers.MATCHERS`) or "judge:SPEC"."""
    if dict.__contains__(MATCHERS, spec):
        return MATCHERS[spec]()
    if spec not in MATCHERS:
        raise EvalError(f"--matcher {spec!r}: expected one of {', '.join(MATCHERS)} or {PREFIX}SPEC (a generative "
                        "judge spec)")
    judge = build_judge(spec[len(PREFIX):].strip())
    try:
        return LLMJudgeMatcher(judge, out_dir, progress)
    except EvalError:
        judge.close()
        raise
