"""The critique a critic writes, in VISCO's structure, and the forgiving parsers of every critic output.

Gold critiques (the SFT targets) are rendered by `format_critique`; judges' raw outputs are read back by
`parse_critique`. Both live here because training (SFT targets, GRPO rewards) and evaluation (judges)
must agree on one format. The replies to the other prompts of `prompts.py` are read here too: a verifier
label (`parse_label`), a 0-10 score (`parse_score`), a listwise letter (`parse_letter`) and LookBack's
questions (`parse_questions`). Unreadable output gives None (or an invalid `ParsedCritique`), never an error.

Format (compact JSON, one object):
    {"steps": [{"step": 1, "correct": true}, {"step": 2, "correct": false, "explanation": "..."}],
     "answer_correct": false}
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass, field

TRUE_WORDS = {"true", "yes", "correct", "right", "valid", "+", "1", "ok", "good", "accurate"}
FALSE_WORDS = {"false", "no", "incorrect", "wrong", "invalid", "-", "0", "bad", "error", "inaccurate", "erroneous"}
SCORE_SCALE = 10.0  # the score prompt asks for 0 to 10


def gold_critique(chain: dict, explanation_index: int = 0) -> dict:
    steps = []
    for i, s in enumerate(chain["steps"], 1):
        item: dict = {"step": i, "correct": s["correct"]}
        if s["correct"] is False:
            expl = s.get("explanations") or []
            item["explanation"] = expl[explanation_index % len(expl)] if expl else "This step is incorrect."
        steps.append(item)
    return {"steps": steps, "answer_correct": chain.get("answer_correct")}


def format_critique(critique: dict) -> str:
    return json.dumps(critique, ensure_ascii=False, separators=(", ", ": "))


@dataclass
class ParsedCritique:
    """Per-step verdicts: True (correct), False (incorrect), None (not given / unparseable)."""

    verdicts: list
    explanations: list
    answer_correct: bool | None = None
    valid: bool = False
    error: str | None = None
    extra: dict = field(default_factory=dict)


def to_bool(value) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        v = value.strip().strip(".!\"'").lower()
        if v in TRUE_WORDS:
            return True
        if v in FALSE_WORDS:
            return False
    return None


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def _json_candidates(text: str):
    for m in _FENCE.finditer(text):
        yield m.group(1)
    start = text.find("{")
    while start != -1:  # outermost balanced {...} blocks, in order
        depth = 0
        for j in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                yield text[start:j + 1]
                break
        start = text.find("{", start + 1)


def _step_items(obj) -> list | None:
    if isinstance(obj, list):
        return obj
    if not isinstance(obj, dict):
        return None
    for key in ("steps", "step_verdicts", "reasoning", "critique", "verdicts"):
        if isinstance(obj.get(key), list):
            return obj[key]
    keyed = {k: v for k, v in obj.items() if re.fullmatch(r"(?i)step[ _]?(\d+)", str(k))}
    if keyed:
        return [dict(v, step=int(re.search(r"\d+", k).group())) if isinstance(v, dict)
                else {"step": int(re.search(r"\d+", k).group()), "correct": v}
                for k, v in keyed.items()]
    return None


def parse_critique(text: str | None, n_steps: int) -> ParsedCritique:
    """Read a critique from model output; anything unreadable is reported, never raised."""
    verdicts: list = [None] * n_steps
    explanations: list = [None] * n_steps
    if not text:
        return ParsedCritique(verdicts, explanations, error="empty output")
    for cand in _json_candidates(text):
        try:
            obj = json.loads(cand)
        except json.JSONDecodeError:
            continue
        items = _step_items(obj)
        if items is None:
            continue
        for pos, item in enumerate(items):
            if isinstance(item, dict):
                idx = item.get("step", item.get("index", pos + 1))
                verdict = next((to_bool(item[k]) for k in ("correct", "correctness", "verdict", "label", "is_correct")
                                if k in item), None)
                expl = item.get("explanation") or item.get("critique")
            else:
                idx, verdict, expl = pos + 1, to_bool(item), None
            try:
                i = int(idx) - 1
            except (TypeError, ValueError):
                continue
            if 0 <= i < n_steps:
                verdicts[i], explanations[i] = verdict, expl
        answer = None
        if isinstance(obj, dict):
            for k in ("answer_correct", "answer_correctness", "answer", "final_answer_correct"):
                if k in obj:
                    answer = to_bool(obj[k])
                    break
        n_given = sum(v is not None for v in verdicts)
        ok = n_given == n_steps
        err = None if ok else f"verdicts for {n_given} of {n_steps} steps"
        return ParsedCritique(verdicts, explanations, answer, ok, err)
    return ParsedCritique(verdicts, explanations, error="no JSON critique found")


# ----------------------------------------------------------------------------- replies to the other prompts

def parse_score(text: str | None, scale: float = SCORE_SCALE) -> float | None:
    """The first number in the reply, as a fraction of `scale`; None when missing or out of range."""
    match = re.search(r"-?\d+(?:\.\d+)?", text or "")
    if not match:
        return None
    value = float(match.group())
    return value / scale if 0 <= value <= scale else None


def parse_letter(text: str | None, n_options: int) -> int | None:
    """Index of the option letter the reply names ("B", "Answer: b", "(c)", "**C**.", "D is best"), or None."""
    letters = string.ascii_uppercase[:n_options]
    cleaned = (text or "").strip()
    bare = cleaned.strip(" .:()[]*`'\"").upper()
    if len(bare) == 1:
        return letters.index(bare) if bare in letters else None
    named = [m.group(1).upper() for pattern in (r"(?i)\banswer\s*[:\-]?\s*\(?([a-z])\b", r"\(([A-Za-z])\)")
             for m in re.finditer(pattern, cleaned)]
    # then any standalone capital, except the article in "A careful look shows C"
    named += [m.group(1) for m in re.finditer(r"\b([A-Z])\b", cleaned)
              if not (m.group(1) == "A" and re.match(r"\s+[a-z]", cleaned[m.end():]))]
    return next((letters.index(letter) for letter in named if letter in letters), None)


def parse_label(text: str | None, labels: tuple) -> str | None:
    """The label the reply names: the earliest mention of an allowed label (any case, `_`/`-`/space alike),
    or for two-label tasks a yes/no-style first word (yes/true/correct -> first label)."""
    text = (text or "").strip()
    found = []
    for label in labels:
        pattern = r"(?<![a-z_])" + r"[_\s-]?".join(map(re.escape, label.split("_"))) + r"(?![a-z_])"
        match = re.search(pattern, text, re.I)
        if match:
            found.append((match.start(), label))
    if found:
        return min(found)[1]
    if len(labels) == 2 and text:
        verdict = to_bool(re.split(r"[\s,.;:]", text, maxsplit=1)[0])
        if verdict is not None:
            return labels[0] if verdict else labels[1]
    return None


def parse_questions(text: str | None) -> list[str]:
    """Questions from a JSON list reply, or failing that from the lines that end with '?'."""
    text = text or ""
    start, end = text.find("["), text.rfind("]")
    if 0 <= start < end:
        try:
            items = json.loads(text[start:end + 1])
            if isinstance(items, list):
                return [q.strip() for q in items if isinstance(q, str) and q.strip()]
        except json.JSONDecodeError:
            pass
    lines = (re.sub(r"^\s*(?:[-*]|\d+[.)])\s*", "", line).strip() for line in text.splitlines())
    return [line for line in lines if line.endswith("?")]
