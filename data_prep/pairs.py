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
- false_alarm:       in a chain without errors, one correct step is flagged with an explanation written for a
                     different question. Not one of the same question: those state what the image really shows,
                     so quoting one against a correct step contradicts itself in words (the DPO learnability test
                     learnt to spot such pairs with blank images).

The realised mix is the requested one: `plan_corruptions` gives each chain at most one corruption that applies
to it, in the requested shares over as many chains as allow it; chains left over (when, say, most chains are
fully correct and only answer_flip and false_alarm apply to them) are skipped and counted as over_mix_quota.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import random
from collections import Counter
from typing import Callable

from stepcritic.data_prep import critique, schema
from stepcritic.errors import UserError

DEFAULT_PREF_MIX = {"miss_perception": 1.0, "reluctant": 1.0, "over_propagation": 1.0,
                    "wrong_explanation": 1.0, "answer_flip": 1.0, "false_alarm": 1.0}
FALLBACK_FALSE_ALARM = "This step does not match what the image shows."
# the skip reasons `plan_corruptions` gives in place of a corruption
NO_CORRUPTION, OVER_QUOTA = "no_applicable_corruption", "over_mix_quota"


class PrefMixError(UserError, ValueError):
    """A `--pref-mix` the builder cannot use (not JSON, an unknown corruption, a negative weight)."""


class ExplanationPool:
    """Gold explanations of one split, so a swapped-in explanation always comes from another question."""

    def __init__(self, chains=()):
        self._groups_by_text: dict[str, set] = {}
        self._indexed = False
        for chain in chains:
            self.add(chain)

    def add(self, chain: dict) -> None:
        """Take in one more chain's explanations (a streamed build adds a split's chains one at a time)."""
        for step in chain["steps"]:
            for text in step.get("explanations") or []:
                self._groups_by_text.setdefault(text, set()).add(chain["group_id"])
        self._indexed = False

    def _index(self) -> None:
        if self._indexed:
            return
        self._texts = sorted(self._groups_by_text)
        self._texts_by_group: dict[str, list[str]] = {}
        for text in self._texts:
            for group in self._groups_by_text[text]:
                self._texts_by_group.setdefault(group, []).append(text)
        self._indexed = True

    def _is_unrelated(self, text: str, group_id: str, avoid: str) -> bool:
        return text != avoid and group_id not in self._groups_by_text[text]

    def has_unrelated(self, group_id: str, avoid: str) -> bool:
        """Whether `unrelated(group_id, avoid, ...)` finds a text."""
        self._index()
        others = len(self._texts) - len(self._texts_by_group.get(group_id, ()))
        if others != 1:
            return others > 1
        return any(self._is_unrelated(t, group_id, avoid) for t in self._texts)

    def unrelated(self, group_id: str, avoid: str, rng: random.Random) -> str | None:
        """An explanation written for another question (never `avoid`), or None when there is none."""
        self._index()
        for _ in range(16):  # nearly every text qualifies: a few draws beat scanning all of them
            if not self._texts:
                return None
            text = self._texts[rng.randrange(len(self._texts))]
            if self._is_unrelated(text, group_id, avoid):
                return text
        candidates = [t for t in self._texts if self._is_unrelated(t, group_id, avoid)]
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


def _errors(chain: dict) -> list[int]:
    return _indices(chain, lambda s: s["correct"] is False)


# When each corruption applies (exactly when its function above returns True), without copying the critique.
APPLIES: dict[str, Callable[[dict, dict, ExplanationPool], bool]] = {
    "miss_perception": lambda chain, gold, pool: any(s["correct"] is False and schema.describes(s)
                                                     for s in chain["steps"]),
    "reluctant": lambda chain, gold, pool: any(s["correct"] is False and not schema.describes(s)
                                               for s in chain["steps"]),
    "over_propagation": lambda chain, gold, pool: bool(_errors(chain)) and any(
        s["correct"] is True for s in chain["steps"][_errors(chain)[0] + 1:]),
    "wrong_explanation": lambda chain, gold, pool: any(
        pool.has_unrelated(chain["group_id"], gold["steps"][i]["explanation"]) for i in _errors(chain)),
    "answer_flip": lambda chain, gold, pool: gold["answer_correct"] is not None,
    "false_alarm": lambda chain, gold, pool: all(s["correct"] is True for s in chain["steps"]),
}


def parse_pref_mix(pref_mix: dict | str | None) -> dict[str, float]:
    """Normalise a corruption mix (dict or JSON text, name -> non-negative weight); None = all equal."""
    if pref_mix is None:
        return dict(DEFAULT_PREF_MIX)
    if isinstance(pref_mix, str):
        try:
            pref_mix = json.loads(pref_mix)
        except json.JSONDecodeError as e:
            raise PrefMixError(f"pref_mix is not valid JSON ({e})") from None
    if not isinstance(pref_mix, dict):
        raise PrefMixError(f"pref_mix must map corruption names to weights, got {type(pref_mix).__name__}")
    for name, weight in pref_mix.items():
        if name not in CORRUPTIONS:
            raise PrefMixError(f"pref_mix: unknown corruption {name!r}; expected some of {list(CORRUPTIONS)}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            raise PrefMixError(f"pref_mix: weight of {name!r} must be a non-negative number, got {weight!r}")
    if not any(pref_mix.values()):
        raise PrefMixError("pref_mix: at least one corruption needs a positive weight")
    return {name: float(w) for name, w in pref_mix.items()}


def applicable(chain: dict, mix: dict[str, float], pool: ExplanationPool, gold: dict | None = None) -> list[str]:
    """The corruptions with a positive weight that apply to `chain`, sorted by name."""
    gold = critique.gold_critique(chain) if gold is None else gold
    return sorted(name for name, w in mix.items() if w > 0 and APPLIES[name](chain, gold, pool))


def apply_corruption(chain: dict, name: str, pool: ExplanationPool, rng: random.Random, notes: bool = False) -> dict:
    """The gold critique of `chain` with corruption `name` (which must apply) made to it (with `notes`: the
    critique whose steps say what the image shows, kept as they are: only verdicts and explanations are corrupted)."""
    gold = critique.gold_critique(chain, notes=notes)
    rejected = copy.deepcopy(gold)
    if not CORRUPTIONS[name](chain, rejected, pool, rng):
        raise AssertionError(f"{chain['chain_id']}: corruption {name} does not apply")
    assert rejected != gold, f"{chain['chain_id']}: corruption {name} left the critique unchanged"
    return rejected


def _max_flow_plan(options: Counter, quotas: dict[str, int]) -> dict[tuple, Counter] | None:
    """How many chains of each option tuple take each corruption so that every quota is met exactly, or None.

    A transportation problem on at most 2^6 option tuples and 6 corruptions, never on the chains themselves:
    source -> option tuple (its chains) -> corruption it admits -> sink (the corruption's quota), solved as a
    maximum flow by scipy. The graph is built in sorted order, so the plan never depends on the chains' order.
    """
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    option_list, names = sorted(options), sorted(quotas)
    if not sum(quotas.values()):
        return {option: Counter() for option in option_list}
    if not option_list:
        return None
    first_name, sink = 1 + len(option_list), 1 + len(option_list) + len(names)
    edges = []  # (from, to, capacity)
    for i, option in enumerate(option_list, start=1):
        edges.append((0, i, options[option]))
        edges += [(i, first_name + j, options[option]) for j, name in enumerate(names) if name in option]
    edges += [(first_name + j, sink, quotas[name]) for j, name in enumerate(names)]
    start, end, capacity = zip(*edges)
    graph = csr_matrix((np.array(capacity, dtype=np.int32), (start, end)), shape=(sink + 1, sink + 1))
    result = maximum_flow(graph, 0, sink)
    if result.flow_value < sum(quotas.values()):
        return None
    flow = result.flow.toarray()
    return {option: Counter({name: int(flow[i, first_name + j]) for j, name in enumerate(names)
                             if flow[i, first_name + j] > 0})
            for i, option in enumerate(option_list, start=1)}


def mix_quotas(options: Counter, mix: dict[str, float]) -> dict[str, int]:
    """Pairs per corruption: shares as in `mix`, over as many chains as the options allow (at most one each).

    Corruptions that apply to no chain are left out. By Hall's condition, `total` pairs in `mix`'s shares fit
    when every set S of corruptions gets no more than the chains that admit one of S; the quotas are the
    largest such total split by largest remainders (lowered until the exact split fits).
    """
    names = sorted(n for n in mix if mix[n] > 0 and any(n in option for option in options))
    if not names:
        return {}
    weight = sum(mix[n] for n in names)
    best = sum(options.values())
    for size in range(1, len(names) + 1):
        for subset in itertools.combinations(names, size):
            admitted = sum(k for option, k in options.items() if set(option) & set(subset))
            best = min(best, admitted * weight / sum(mix[n] for n in subset))
    for total in range(int(best + 1e-9), 0, -1):
        exact = {n: mix[n] / weight * total for n in names}
        quotas = {n: int(v) for n, v in exact.items()}
        for n in sorted(names, key=lambda n: (quotas[n] - exact[n], n))[:total - sum(quotas.values())]:
            quotas[n] += 1
        if _max_flow_plan(options, quotas) is not None:
            return quotas
    return {}


def plan_corruptions(chains: list[dict], mix: dict[str, float], pool: ExplanationPool,
                     seed: int) -> dict[str, str]:
    """chain_id -> the corruption its rejected critique gets, realising `mix` over `chains`, or a skip reason:
    `NO_CORRUPTION` when nothing applies, `OVER_QUOTA` when the chain was left out so that the realised shares
    match the requested ones (a corruption that applies to few chains limits how many pairs the others get).
    Which chains take which corruption, and which are left out, follows a seeded order that does not depend on
    the input order.
    """
    return plan_from_options({c["chain_id"]: tuple(applicable(c, mix, pool)) for c in chains}, mix, seed)


def plan_from_options(options: dict[str, tuple], mix: dict[str, float], seed: int) -> dict[str, str]:
    """`plan_corruptions` from each chain's applicable corruptions (chain_id -> sorted names), so a streamed
    build can compute them in one pass and plan without holding the chains."""
    counts = Counter(o for o in options.values() if o)
    quotas = mix_quotas(counts, mix)
    flow = _max_flow_plan(counts, quotas) or {}
    plan: dict[str, str] = {}
    order = sorted(options, key=lambda cid: hashlib.sha1(f"{seed}:{cid}".encode()).hexdigest())
    for chain_id in order:
        option = options[chain_id]
        left = flow.get(option, Counter()) if option else Counter()
        name = next((n for n in sorted(left) if left[n] > 0), None)
        if name is None:
            plan[chain_id] = NO_CORRUPTION if not option else OVER_QUOTA
            continue
        left[name] -= 1
        plan[chain_id] = name
    return plan


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
