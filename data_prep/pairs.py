"""Preference pairs: realistic wrong critiques (for critique DPO) and chain-level reward pairs.

A rejected critique is the gold critique with one failure mode that VISCO observed in real critics
applied to it. Each corruption declares when it applies, so a pair always differs from its chosen side
and its label says exactly what changed:

- miss_perception:   one incorrect description step (a perception error) is called correct.
- reluctant:         one incorrect non-description step is called correct ("reluctance to say no").
- over_propagation:  every correct step after the first error is called incorrect, blamed on that error.
- wrong_explanation: verdicts stay right, but one incorrect step's explanation is replaced by one written
                     for a different question (drawn from `ExplanationPool`).
- answer_flip:       the answer verdict is flipped.
- false_alarm:       in a chain without errors, one correct step is flagged with a plausible explanation.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Callable

from stepcritic.data_prep import critique, schema

DEFAULT_PREF_MIX = {"miss_perception": 1.0, "reluctant": 1.0, "over_propagation": 1.0,
                    "wrong_explanation": 1.0, "answer_flip": 1.0, "false_alarm": 1.0}
FALLBACK_FALSE_ALARM = "This step does not match what the image shows."


class ExplanationPool:
    """Gold explanations of one split, so a swapped-in explanation always comes from another question."""

    def __init__(self, chains: list[dict]):
        self._groups_by_text: dict[str, set] = {}
        for chain in chains:
            for step in chain["steps"]:
                for text in step.get("explanations") or []:
                    self._groups_by_text.setdefault(text, set()).add(chain["group_id"])
        self._texts = sorted(self._groups_by_text)

    def unrelated(self, group_id: str, avoid: str, rng: random.Random) -> str | None:
        candidates = [t for t in self._texts if t != avoid and group_id not in self._groups_by_text[t]]
        return rng.choice(candidates) if candidates else None


def _indices(chain: dict, predicate) -> list[int]:
    return [i for i, s in enumerate(chain["steps"]) if predicate(s)]


def _call_correct(gold: dict, index: int) -> None:
    item = gold["steps"][index]
    item["correct"] = True
    item.pop("explanation", None)


def _call_incorrect(gold: dict, index: int, explanation: str) -> None:
    gold["steps"][index].update(correct=False, explanation=explanation)


def _miss_perception(chain, gold, pool, rng) -> bool:
    candidates = _indices(chain, lambda s: s["correct"] is False and schema.describes(s))
    if not candidates:
        return False
    _call_correct(gold, rng.choice(candidates))
    return True


def _reluctant(chain, gold, pool, rng) -> bool:
    candidates = _indices(chain, lambda s: s["correct"] is False and not schema.describes(s))
    if not candidates:
        return False
    _call_correct(gold, rng.choice(candidates))
    return True


def _over_propagation(chain, gold, pool, rng) -> bool:
    errors = _indices(chain, lambda s: s["correct"] is False)
    if not errors:
        return False
    first = errors[0]
    later_correct = [i for i in _indices(chain, lambda s: s["correct"] is True) if i > first]
    for i in later_correct:
        _call_incorrect(gold, i, f"This step builds on step {first + 1}, which is wrong, so it is wrong too.")
    return bool(later_correct)


def _wrong_explanation(chain, gold, pool, rng) -> bool:
    errors = _indices(chain, lambda s: s["correct"] is False)
    rng.shuffle(errors)
    for i in errors:
        swapped = pool.unrelated(chain["group_id"], gold["steps"][i]["explanation"], rng)
        if swapped is not None:
            gold["steps"][i]["explanation"] = swapped
            return True
    return False


def _answer_flip(chain, gold, pool, rng) -> bool:
    if gold["answer_correct"] is None:
        return False
    gold["answer_correct"] = not gold["answer_correct"]
    return True


def _false_alarm(chain, gold, pool, rng) -> bool:
    if any(s["correct"] is not True for s in chain["steps"]):
        return False
    index = rng.randrange(len(chain["steps"]))
    explanation = pool.unrelated(chain["group_id"], "", rng) or FALLBACK_FALSE_ALARM
    _call_incorrect(gold, index, explanation)
    return True


# Each corruption edits a copy of the gold critique in place and says whether it applied.
CORRUPTIONS: dict[str, Callable[..., bool]] = {
    "miss_perception": _miss_perception,
    "reluctant": _reluctant,
    "over_propagation": _over_propagation,
    "wrong_explanation": _wrong_explanation,
    "answer_flip": _answer_flip,
    "false_alarm": _false_alarm,
}


def parse_pref_mix(pref_mix: dict | str | None) -> dict[str, float]:
    """Normalise a corruption mix (dict or JSON text, name -> non-negative weight); None = all equal."""
    if pref_mix is None:
        return dict(DEFAULT_PREF_MIX)
    if isinstance(pref_mix, str):
        try:
            pref_mix = json.loads(pref_mix)
        except json.JSONDecodeError as e:
            raise ValueError(f"pref_mix is not valid JSON ({e})") from None
    if not isinstance(pref_mix, dict):
        raise ValueError(f"pref_mix must map corruption names to weights, got {type(pref_mix).__name__}")
    for name, weight in pref_mix.items():
        if name not in CORRUPTIONS:
            raise ValueError(f"pref_mix: unknown corruption {name!r}; expected some of {list(CORRUPTIONS)}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            raise ValueError(f"pref_mix: weight of {name!r} must be a non-negative number, got {weight!r}")
    if not any(pref_mix.values()):
        raise ValueError("pref_mix: at least one corruption needs a positive weight")
    return {name: float(w) for name, w in pref_mix.items()}


def corrupt_critique(chain: dict, mix: dict[str, float], pool: ExplanationPool,
                     rng: random.Random) -> tuple[str, dict] | None:
    """Draw a corruption that applies to this chain (by weight) and return (name, rejected critique).

    Returns None when no corruption with a positive weight applies.
    """
    gold = critique.gold_critique(chain)
    remaining = {name: w for name, w in mix.items() if w > 0}
    while remaining:
        names = sorted(remaining)
        name = rng.choices(names, weights=[remaining[n] for n in names])[0]
        rejected = copy.deepcopy(gold)
        if CORRUPTIONS[name](chain, rejected, pool, rng):
            assert rejected != gold, f"{chain['chain_id']}: corruption {name} left the critique unchanged"
            return name, rejected
        del remaining[name]
    return None


def outcome_pairs(chains: list[dict]) -> tuple[list[tuple[dict, dict]], set]:
    """All (fully correct, incorrect) chain pairs within each group, and the ids of chains left unpaired."""
    by_group: dict[str, list[dict]] = {}
    for chain in chains:
        by_group.setdefault(chain["group_id"], []).append(chain)
    pairs, unpaired = [], set()
    for group in by_group.values():
        good = [c for c in group if c["chain_correct"] is True]
        bad = [c for c in group if c["chain_correct"] is False]
        if good and bad:
            pairs += [(g, b) for g in good for b in bad]
        else:
            unpaired |= {c["chain_id"] for c in group}
    return pairs, unpaired
