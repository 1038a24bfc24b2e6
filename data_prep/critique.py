"""The critique a critic writes, in VISCO's structure, and the forgiving parsers of every critic output.

Gold critiques (the SFT targets) are rendered by `format_critique`; judges' raw outputs are read back by
`parse_critique`. Both live here because training (SFT targets, GRPO rewards) and evaluation (judges)
must agree on one format. The replies to the other prompts of `prompts.py` are read here too: a verifier
label (`parse_label`), a 0-10 score (`parse_score`), a listwise letter (`parse_letter`) and LookBack's
questions (`parse_questions`). Unreadable output gives None (or an invalid `ParsedCritique`), never an error.

Format (compact JSON, one object):
    {"steps": [{"step": 1, "correct": true}, {"step": 2, "correct": false, "explanation": "..."}],
     "answer_correct": false}
A note-writing critic adds what the image shows before each verdict: {"step": 1, "shows": "...", "correct": true}.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass, field

from stepcritic.data_prep import schema

TRUE_WORDS = {"true", "yes", "correct", "right", "valid", "+", "1", "ok", "good", "accurate"}
FALSE_WORDS = {"false", "no", "incorrect", "wrong", "invalid", "-", "0", "bad", "error", "inaccurate", "erroneous"}
SCORE_SCALE = 10.0  # the score prompt asks for 0 to 10


def step_note(step: dict) -> str | None:
    """What a note-writing critic writes about a step before its verdict: the step as the image has it.

    Why a note: the synthetic labels are built so that neither a step's words nor the image alone predict them,
    only the two together (an XOR), and a model trained on the verdict alone gets no gradient towards either half:
    it stays at the label prior. Writing the step as the image has it first is a plain look-up with a signal of its
    own, and the verdict then compares two pieces of text (docs/tiny-critic.md). A correct step reads as it is; an
    incorrect one as its `correction`, or, when no rewording fixes it (irrelevant, repeated), as its first reference
    critique; None when an incorrect step has neither.
    """
    if step.get("correct") is not False:
        return step["text"]
    if step.get("correction"):
        return step["correction"]
    return (step.get("explanations") or [None])[0]


# What a note-writing critic writes before each verdict (`data build --prm-notes [STYLE]`, `--critique-notes
# [STYLE]`): "rewrite", the step as the image has it (`step_note`); "check", questions that check the step against
# the image with the image's answers (`meta.step_checks`, written by the synthetic generator), worded as a
# pre-trained base's scene questions, so that the note asks the base what it already answers (Chain-of-Verification,
# Dhuliawala et al. 2023, for one step). A check note's verdict compares answers with the step: plain text.
# "check-said": the same questions answered as a base pre-trained with answers said first (`base_pretrain
# --say-first`) answers them: what it reads off the image, then the answer (`meta.step_checks_said`). "claims-said":
# what the step says, asked as yes/no questions and answered the same way (`meta.step_claims_said`: "Is the cross
# blue? cross red no."), so that the verdict only has to see whether every answer is yes (an answer to a yes/no
# question: whether the last one, "Is the answer no?", is).
NOTE_STYLES = ("rewrite", "check", "check-said", "claims-said")
CHECK_STYLES = ("check", "check-said", "claims-said")  # notes whose verdict is read after them
CHECK_KEYS = {"check": "step_checks", "check-said": "step_checks_said", "claims-said": "step_claims_said"}


def note_style(notes) -> str | None:
    """`notes` as passed around (False/None, True for the original style, or a style name) -> None or a style."""
    if not notes:
        return None
    style = "rewrite" if notes is True else notes
    if style not in NOTE_STYLES:
        raise ValueError(f"unknown note style {notes!r}; choose one of {', '.join(NOTE_STYLES)}")
    return style


def chain_notes(chain: dict, notes=True) -> list[str | None]:
    """Per step, its note in style `notes`; None where a step has none. A "check" note falls back to the rewrite
    note for a step no question checks (an irrelevant or repeated one: its reference critique says why); a chain
    without `step_checks` (not synthetic) has no check notes at all."""
    steps = chain["steps"]
    style = note_style(notes)
    if style in CHECK_STYLES:
        checks = schema.chain_meta(chain).get(CHECK_KEYS[style]) or [None] * len(steps)
        if not any(checks):
            return [None] * len(steps)
        return [check or step_note(step) for step, check in zip(steps, checks)]
    return [step_note(step) for step in steps]


def gold_critique(chain: dict, explanation_index: int = 0, notes: bool | str = False) -> dict:
    """The reference critique of a chain; with `notes`, each step first says what the image shows (`chain_notes`,
    in that style) under "shows", before its verdict. A check note asks about what the step says, so the step is
    first copied under "says": the note then follows the words it checks, as a PRM's note follows its step, instead
    of a small critic having to find step k in the prompt (the structured decoder writes "says" itself)."""
    steps, shown = [], chain_notes(chain, notes) if notes else None
    says = note_style(notes) in CHECK_STYLES
    for i, s in enumerate(chain["steps"], 1):
        item: dict = {"step": i}
        if says:
            item["says"] = s["text"]
        if notes:
            item["shows"] = shown[i - 1]
        item["correct"] = s["correct"]
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


# Qualifiers that turn a "correct"-style word into a verdict: "not correct" and MiCEval's "Partially Correct"
# are negatives (a partially correct step is not a correct step, MiCEval Sec. 2.3.1); "fully correct" is positive.
NEGATIONS = ("not", "isn't", "is not", "never", "hardly", "no longer")
PARTIAL_WORDS = ("partially", "partly", "partial", "somewhat", "mostly", "half")
FULL_WORDS = ("fully", "completely", "entirely", "totally", "100%")


def to_bool(value) -> bool | None:
    """A verdict from a JSON value or a short phrase: True (correct), False (incorrect), None (unreadable).

    Negated and partial wordings of a positive word are negative ("not correct", "Partially Correct",
    "not fully correct"); "not incorrect" is positive. Anything else outside the word lists is None.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if not isinstance(value, str):
        return None
    v = re.sub(r"[\s_]+", " ", value.strip().strip(".!\"'*`").lower()).strip()
    if v in TRUE_WORDS:
        return True
    if v in FALSE_WORDS:
        return False
    for words, flip in ((NEGATIONS, True), (PARTIAL_WORDS, None), (FULL_WORDS, False)):
        for word in words:
            if v.startswith(word + " "):
                inner = to_bool(v[len(word) + 1:])
                if inner is None:
                    return None
                if flip is None:  # "partially correct" is not correct; "partially incorrect" is not correct either
                    return False
                return (not inner) if flip else inner
    return None


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def _json_candidates(text: str):
    """Fenced blocks, then every JSON object that starts at a "{" of the text, in order. Objects are read by the
    JSON decoder, not by counting braces, so a brace inside a string (an explanation that says "{x}") cannot cut
    one short."""
    for m in _FENCE.finditer(text):
        yield m.group(1)
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            yield text[start:decoder.raw_decode(text, start)[1]]
        except json.JSONDecodeError:
            pass
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


# Phrases that state the final choice; the last one in the reply wins (CMMU reads the answer a model
# concludes with, so "Answer B has a mistake ... So the best is C" is C).
_CONCLUSION = [
    r"(?:final\s+answer|answer|choice|option|pick|verdict)\s*(?:is\s*:?|:|-|=)\s*\**\s*\(?([A-Za-z])\b(?!\s+[a-z])",
    r"\b(?:best|correct|right)\s+(?:one\s+|answer\s+|option\s+|chain\s+)?(?:is|would\s+be|:)\s*\**\s*"
    r"\(?(?:answer\s+|option\s+)?([A-Za-z])\b(?!\s+[a-z])",
    r"\b(?:I\s+(?:choose|pick|select)|choose|pick|select|go\s+with)\s+\(?(?:answer\s+|option\s+)?([A-Za-z])\b"
    r"(?!\s+[a-z])",
    r"\b(?:answer\s+|option\s+)?\(?([A-Z])\)?\s+is\s+(?:the\s+)?(?:best|correct|right|most\s+\w+)",
]


def _standalone_letters(line: str) -> list[str]:
    """Option letters named in a line: "(b)", "Answer: c", or a standalone capital that is not the article
    in "A careful look shows C"."""
    named = [(m.start(), m.group(1).upper()) for pattern in (r"(?i)\banswer\s*[:\-]?\s*\(?([a-z])\b(?!\s+[a-z])",
                                                            r"\(([A-Za-z])\)")
             for m in re.finditer(pattern, line)]
    named += [(m.start(), m.group(1)) for m in re.finditer(r"\b([A-Z])\b", line)
              if not (m.group(1) == "A" and re.match(r"\s+[a-z]", line[m.end():]))]
    return [letter for _, letter in sorted(named)]


def parse_letter(text: str | None, n_options: int) -> int | None:
    """Index of the option letter the reply concludes with, or None.

    A bare letter ("B", "(c)", "**C**."); else the last concluding phrase ("the best is C", "Answer: D",
    "I choose B", "D is best"); else the first letter named on the last line that names one (CMMU takes
    the final answer, not the first letter mentioned: "Answer B has a mistake ... So the best is C" is C).
    """
    letters = string.ascii_uppercase[:n_options]
    cleaned = (text or "").strip()
    bare = cleaned.strip(" .:()[]*`'\"").upper()
    if len(bare) == 1:
        return letters.index(bare) if bare in letters else None
    concluded = sorted((m.start(1), m.group(1).upper()) for pattern in _CONCLUSION
                       for m in re.finditer(pattern, cleaned, re.I if pattern is not _CONCLUSION[-1] else 0))
    concluded = [letter for _, letter in concluded if letter in letters]
    if concluded:
        return letters.index(concluded[-1])
    for line in reversed(cleaned.splitlines()):
        named = [letter for letter in _standalone_letters(line) if letter in letters]
        if named:
            return letters.index(named[0])
    return None


# MiCEval's own wordings of the verifier labels (`prompts.VERIFIER_TASKS`), from its prompt templates
# (App. C.2): "Fully Correct", "Partially Correct", "Image Relevant", "Entity False", "Inter-step Incorrect",
# and Yes/No for the MCoT correctness task. A label's own name is always a wording too. Lower case; "_"
# and "-" read as spaces.
MICEVAL_WORDINGS: dict[str, tuple[str, ...]] = {
    "correct": ("fully correct", "yes"),
    "incorrect": ("no",),
    "partial": ("partially correct",),
    "image": ("image relevant",),
    "logic": ("logic relevant",),
    "entity": ("entity false",),
    "attribute": ("attribute false",),
    "spatial": ("spatial relationship false",),
    "non_spatial": ("non spatial relationship false",),
    "inter": ("inter step incorrect",),
    "intra": ("intra step incorrect",),
}
# What common models write besides those (read in lenient mode only).
LABEL_ALIASES: dict[str, tuple[str, ...]] = {
    "correct": ("completely correct", "entirely correct"),
    "partial": ("partly correct", "partially", "partly"),
    "unsupported": ("not supported",),
    "uninformative": ("non informative", "noninformative"),
    "non_spatial": ("nonspatial",),
    "inter": ("inter step",),
    "intra": ("intra step",),
}
# A negation right before a label word names the label's opposite when the task has it ("Not informative"
# -> uninformative); a negated label without an opposite in the task is no answer.
OPPOSITE = {"correct": "incorrect", "incorrect": "correct", "relevant": "irrelevant", "irrelevant": "relevant",
            "informative": "uninformative", "uninformative": "informative"}
_NEGATED = re.compile(r"(?:\bnot|n't|\bnever|\bhardly|\bno longer)\s+(?:\w+\s+)?$")
_STRICT_PREFIX = re.compile(r"^(?:output|answer|label|verdict|prediction|final answer)\s*:\s*")
_STRIP = " .!*`'\"()[]{}"


def _normalise(text: str) -> str:
    return re.sub(r"[\s_\-]+", " ", text.lower())


def _wordings(label: str, labels: tuple, strict: bool) -> set[str]:
    phrases = {label.replace("_", " "), *MICEVAL_WORDINGS.get(label, ())}
    if not strict:
        phrases |= set(LABEL_ALIASES.get(label, ()))
        phrases -= {"yes", "no"}  # in running text these are read only as the first word (below)
    return phrases


def parse_label(text: str | None, labels: tuple, strict: bool = False) -> str | None:
    """The label a verifier reply names, or None (an invalid output).

    Lenient (default): the earliest phrase naming an allowed label, in its own words, MiCEval's
    ("Partially Correct" -> partial, never correct; "Fully Correct" -> correct; "Image Relevant" -> image)
    or a common variant; the longest phrase wins where phrases overlap. Negations are read as negations:
    "Not informative" -> uninformative, "not correct" -> incorrect, "not relevant" -> irrelevant, and a
    negated label whose opposite the task lacks is skipped. Failing all that, a two-label task takes a
    yes/no-style first word (yes/true/correct -> the first label).
    Strict (MiCEval App. C.1: predictions that do not match the defined labels are invalid): the whole
    reply, less surrounding punctuation, markdown and an "Output:"/"Answer:" prefix, must be one label in
    its own or MiCEval's wording; anything else is None.
    """
    text = (text or "").strip()
    if not text:
        return None
    norm = _normalise(text)
    wordings = {label: _wordings(label, labels, strict) for label in labels}
    if strict:
        bare = _STRICT_PREFIX.sub("", norm.strip(_STRIP)).strip(_STRIP)
        found = {label for label, phrases in wordings.items() if bare in phrases}
        return found.pop() if len(found) == 1 else None
    alternatives = sorted(((phrase, label) for label, phrases in wordings.items() for phrase in phrases),
                          key=lambda pair: len(pair[0]), reverse=True)
    pattern = re.compile("|".join(f"(?<![a-z0-9])({re.escape(phrase)})(?![a-z0-9])" for phrase, _ in alternatives))
    for match in pattern.finditer(norm):
        label = alternatives[match.lastindex - 1][1]
        if _NEGATED.search(norm[:match.start()]):
            label = OPPOSITE.get(label)
            if label not in labels:
                continue
        return label
    if len(labels) == 2:
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
