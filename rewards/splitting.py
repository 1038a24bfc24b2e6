"""A policy's free-text answer cut into steps, so that a step-level critic can judge each one.

A critic trained on annotated chains judges steps; a policy writes text. The default conventions, first match wins:

1. explicit markers at line starts, in any case: `Step 1:`, `Step 2.`, `Step 3)`, `Step 4 -`, `**Step 1**`,
   `**Step 1:** ...`, `## Step 1: ...`. Each marker opens a step that runs to the next one; the marker itself is
   dropped (it is layout, and a critic's prompt numbers the steps itself). Text before the first marker (an
   introduction) is a step of its own: the critic sees everything the policy wrote.
2. paragraphs separated by blank lines (how VisualProcessBench's responses break into its steps);
3. non-empty lines (one step per line, as `data_prep.prompts.chain_completion_text` writes a chain);
4. otherwise the whole text is one step.

MiCEval and VISCO write a chain of thought as one paragraph whose sentences are the steps (VISCO splits its
`reasoning` with nltk's `sent_tokenize`); a one-paragraph answer is one step by default, and `split=SENTENCES` cuts
it into sentences instead. `split` may be any regex (applied with `re.split`) or a callable `str -> list[str]`.

Whatever the rule, steps are stripped, empty ones dropped, and non-blank text never gives an empty list (a split that
leaves nothing gives the whole text as one step); blank text gives `[]`. Standard library only: importing this module
stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# A marker: an optional markdown heading, an optional opening bold, "step", its number, then a delimiter (`:` `.`
# `)` or a dash; a `.` not starting a decimal) or the closing bold, or nothing at all after a heading's number.
MARKER = re.compile(
    r"^[ \t]*(?P<heading>\#{1,6}[ \t]*)?(?P<bold>\*\*|__)?[ \t]*step[ \t]*(?P<number>\d+)[ \t]*"
    r"(?:(?P<delimiter>[:)\-–—]|\.(?!\d))[ \t]*(?P<close>(?P=bold))?|(?P<close_only>(?P=bold))[ \t]*[:.)\-–—]?|"
    r"(?(heading)(?=[ \t]*$)|(?!)))[ \t]*",
    re.IGNORECASE | re.MULTILINE)
PARAGRAPHS = re.compile(r"\n[ \t]*\n")
# A sentence ends at `.`, `!` or `?`, maybe closed by a quote or a bracket, then space: MiCEval's and VISCO's steps.
# A decimal point ("3.5") is never a sentence end (no space follows); an abbreviation ("e.g. the") is one.
SENTENCES = r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+"

Split = str | Callable[[str], list] | None


def _strip(parts) -> list[str]:
    return [p.strip() for p in parts if p and p.strip()]


def by_markers(text: str) -> list[str] | None:
    """The steps of a text that marks them (`Step 1:`...), or None when no line starts with a marker."""
    matches = list(MARKER.finditer(text))
    if not matches:
        return None
    steps = [text[:matches[0].start()]]
    for match, following in zip(matches, matches[1:] + [None]):
        body = text[match.end():following.start() if following else len(text)]
        opened = match.group("bold")
        if opened and not (match.group("close") or match.group("close_only")):
            # `**Step 1: A title**`: the bold spans the title, so the title keeps its opening `**`
            first_line = body.split("\n", 1)[0]
            if opened in first_line:
                body = opened + body
        steps.append(body)
    return _strip(steps)


def by_paragraphs(text: str) -> list[str]:
    return _strip(PARAGRAPHS.split(text))


def by_lines(text: str) -> list[str]:
    return _strip(text.split("\n"))


def default_split(text: str) -> list[str]:
    """The default conventions of the module docstring."""
    marked = by_markers(text)
    if marked:
        return marked
    for rule in (by_paragraphs, by_lines):
        steps = rule(text)
        if len(steps) > 1:
            return steps
    return _strip([text])


def check_split(split: Split) -> Callable[[str], list[str]]:
    """`split` as a function (None: `default_split`). A regex that does not compile, or anything but None, a string or
    a callable, raises ValueError naming `split`."""
    if split is None:
        return default_split
    if callable(split):
        return split
    if not isinstance(split, str):
        raise ValueError(f"split must be a regex string or a callable str -> list[str], got {type(split).__name__}")
    try:
        pattern = re.compile(split)
    except re.error as e:
        raise ValueError(f"split: {split!r} is not a valid regex ({e})") from None
    if pattern.fullmatch(""):
        raise ValueError(f"split: the regex {split!r} matches the empty string, so it would split between every "
                         "character")
    # re.split returns the text of capturing groups between the pieces: keep the pieces only
    return lambda text: pattern.split(text)[::pattern.groups + 1]


def split_steps(text: str, split: Split = None) -> list[str]:
    """`text` cut into steps (see the module docstring): by the default conventions, or by `split`, a regex string
    for `re.split` or a callable `str -> list[str]`."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        return []
    parts = check_split(split)(text)
    if not isinstance(parts, (list, tuple)) or not all(isinstance(p, str) for p in parts):
        raise ValueError(f"split: the function must return a list of strings, got {parts!r:.80}")
    return _strip(parts) or [text.strip()]
