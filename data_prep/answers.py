"""Answers: read off a chain's text, and compared with the gold answer. One home for every stage that asks whether an
answer is right: `stepcritic generate` (a policy's outcome label), `stepcritic data label` (whether a rollout reached
the gold answer), the correction task and majority vote of `stepcritic eval`.

Two rules (`RULES`), picked per chain by `matching_rule`:
- `exact`: the synthetic domain, whose answers are one word from a closed vocabulary ("red", "3", "yes"): equal once
  surrounding space and a final full stop are gone. "Red circle" is not "red" there.
- `normalised`: multiple-choice and math answers (MiCEval, VISCO, ProcessBench): case, spacing, articles and
  surrounding punctuation ignored, numbers compared as numbers ("12.0" is "12", "1,000" is "1000") and option
  letters in any form ("(B)", "B.", "B) red", "option b" all answer "B").

A policy writes its chain one step per line, in the synthetic generator's style, the last step stating the answer
("So the answer is red."); `policy_text` writes a chain so for training, and `answer_of_text` reads an answer back
from such a text or from the usual forms of other models ("Final answer: ...", "Answer: ...", `\\boxed{...}`).

Standard library only: the command-line modules import it.
"""

from __future__ import annotations

import math
import re

RULES = ("exact", "normalised")
FINAL_LINE = "Final answer:"  # how `prompts.chain_completion_text` ends a chain whose steps do not state the answer

_ANSWER_LINE = re.compile(r"(?im)^[\s>#*_-]*(?:final\s+|corrected\s+)?answer\s*[*_]*\s*[:：]\s*(.+?)\s*$")
_ANSWER_JSON = re.compile(r'"answer"\s*:\s*(?:"([^"]*)"|([^,}\s][^,}]*))')
_ANSWER_IS = re.compile(r"(?i)\bthe\s+(?:final\s+)?answer\s+is\s*[:：]?\s*(.+?)\s*$", re.MULTILINE)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_EDGES = re.compile(r"^[\s*_`\"'“”‘’]+|[\s*_`\"'“”‘’.,;:!?]+$")
_OPTION = re.compile(r"^(?:option\s+)?\(?([a-z])\)?(?:[.:)]\s*.*)?$")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def parse_answer(text: str | None) -> str | None:
    """An answer given on a line of its own: the last "Answer: ..." line, else a JSON `"answer": ...` (VISCO's own
    format), else None (no usable answer)."""
    lines = _ANSWER_LINE.findall(text or "")
    found = lines[-1] if lines else None
    if found is None:
        match = list(_ANSWER_JSON.finditer(text or ""))
        found = (match[-1].group(1) if match[-1].group(1) is not None else match[-1].group(2)) if match else None
    found = (found or "").strip().strip("*_`").strip()
    return found or None


def answer_of_text(text: str | None) -> str | None:
    """The answer a chain of thought ends with: an "Answer: ..." line or JSON answer (`parse_answer`), else the last
    `\\boxed{...}`, else the last "the answer is ..." (the synthetic chains' last step), without a final full stop;
    None when the text states none."""
    found = parse_answer(text)
    if found is None:
        boxed = _BOXED.findall(text or "")
        found = boxed[-1].strip() if boxed else None
    if found is None:
        said = _ANSWER_IS.findall(text or "")
        found = said[-1] if said else None
    if found is None:
        return None
    found = found.strip().rstrip(".").strip().strip("*_`").strip()
    return found or None


def normalize_answer(text: str) -> str:
    """Lower case, without surrounding quotes, markdown or final punctuation, articles, or repeated spaces."""
    t = _EDGES.sub("", text.strip().lower())
    return " ".join(_ARTICLES.sub(" ", t).split())


def _number(text: str) -> float | None:
    try:
        value = float(text.replace(",", "").rstrip("%"))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def same_answer(answer: str | None, reference: str | None) -> bool:
    """The `normalised` rule: whether two answers say the same once normalised, as numbers, or as the same option
    letter."""
    if answer is None or reference is None:
        return False
    a, r = normalize_answer(answer), normalize_answer(reference)
    if a == r:
        return True
    x, y = _number(a), _number(r)
    if x is not None and y is not None:
        return math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9)
    if len(r) == 1 and r.isalpha():
        match = _OPTION.match(a)
        return bool(match) and match.group(1) == r
    return False


def _exact(text: str) -> str:
    return text.strip().rstrip(".").strip()


def matching_rule(chain: dict) -> str:
    """The rule that compares answers to this chain's question: `exact` for the synthetic generator's chains (and a
    policy's chains about its questions, which keep the source), `normalised` for everything else."""
    return "exact" if chain.get("source") == "synthetic" else "normalised"


def answers_match(answer: str | None, reference: str | None, rule: str = "normalised") -> bool:
    """Whether `answer` is the gold `reference` under `rule` (`RULES`); no answer, or no reference, is no match."""
    if rule not in RULES:
        raise ValueError(f"unknown answer rule {rule!r}; expected one of {list(RULES)}")
    if answer is None or reference is None:
        return False
    if rule == "exact":
        return _exact(answer) == _exact(reference)
    return same_answer(answer, reference)


def reaches_gold(chain: dict, answer: str | None) -> bool:
    """Whether `answer` is the gold answer of `chain` (its `reference_answer`), by the chain's `matching_rule`."""
    return answers_match(answer, chain.get("reference_answer"), matching_rule(chain))


def policy_text(steps: list[str], final_answer: str | None = None) -> str:
    """A chain as a policy writes it: one step per line, then a "Final answer:" line only when no step states the
    answer already (the synthetic chains end with "So the answer is ...")."""
    text = "\n".join(s.strip() for s in steps)
    if final_answer and answer_of_text(text) is None:
        text += f"\n{FINAL_LINE} {final_answer}"
    return text


def without_final_line(text: str) -> tuple[str, str | None]:
    """`text` without a last "Final answer: ..." line, and that answer (None when there is none): the line is the
    answer, not a step."""
    body, _, last = text.rstrip().rpartition("\n")
    if last.strip().lower().startswith(FINAL_LINE.lower()):
        return body, last.strip()[len(FINAL_LINE):].strip() or None
    if not body and text.strip().lower().startswith(FINAL_LINE.lower()):
        return "", text.strip()[len(FINAL_LINE):].strip() or None
    return text, None
