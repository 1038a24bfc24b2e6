"""Synthetic, fully step-annotated multimodal reasoning chains: the dataset that needs no download.

Each group is one rendered scene (see `render.py`) and one question about it; several chains answer
the question, some cleanly, some with injected mistakes that cover MiCEval's taxonomy (description
errors entity / attribute / spatial / non-spatial, logic errors inter / intra, irrelevant and
uninformative steps) and VISCO's patterns (perception errors; later steps that rest on a wrong fact
and are wrong too; later steps that do not rest on it and stay right).

The labels must not be guessable from a step's words: every claim template draws its true value
uniformly (or from a fixed distribution) and its wrong value from the same distribution without the
true one, and every template is wrong about equally often, so "The circle is red." is true in some
images and false in others at the same rate. Only the image (and, for logic and relevance errors,
the question and the other steps) tells them apart.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from stepcritic.data_prep import schema
from stepcritic.data_prep.card import write_synth_card
from stepcritic.data_prep.render import (
    AXES,
    CELL_NAMES,
    COLOUR_NAMES,
    MIN_IMAGE_SIZE,
    PLURALS,
    SHAPES,
    Item,
    place,
    random_pairs,
    render_png,
)
from stepcritic.errors import UserError

MAX_STEPS = 5
# Chance that a step gets a fault of its own, per template (description claims: a wrong value;
# reasoning claims: an inter-step error; "both": a wrong count or else an intra-step error), in every
# chain but each group's clean reference chain. Perception mistakes dominate, as in MiCEval and VISCO,
# and only the image can expose them. The rates differ because templates also go wrong in other ways
# (irrelevant copies, repeats, errors propagated from premises); they are set so that every template
# is wrong in about a third of its uses, which keeps a step's wording from predicting its label.
OWN_FAULT_RATES = {
    "colour": 0.33, "position": 0.33, "count": 0.42, "colour_count": 0.43, "count_pair": 0.42, "kinds": 0.42,
    "relation": 0.3, "bigger": 0.38, "counted_comparison": 0.3, "total": 0.09, "more": 0.26,
}
NOMINAL_FAULT_RATE = 0.3      # what `error_rate` is measured against when it rescales the rates above
# an answer's own (inter-step) error rate, per question: answers also inherit their premises' errors
ANSWER_FAULT_RATES = {"colour": 0.17, "count": 0.04, "existence": 0.27, "relation": 0.19, "size": 0.1,
                      "sum": 0.05, "compare": 0.18}
INTRA_FAULT_RATE = 0.2
INSERT_RATES = {"irrelevant": 0.12, "repeat": 0.1}  # per chain
WRONG_BYSTANDER = 0.3       # an irrelevant step is also false this often (relevance "none")

ALL_CELLS = tuple(name for row in CELL_NAMES for name in row)
COUNTS = (1, 2, 3)  # every counted quantity is drawn uniformly from these, so a number says nothing alone
# a + b for a, b uniform over COUNTS: wrong totals follow the same shape as true ones
TOTAL_WEIGHTS = {2: 1, 3: 2, 4: 3, 5: 2, 6: 1}
# what a step's claim is about, for per-kind results (`stepcritic eval` breaks step metrics down by `meta.step_kinds`):
# each template of a step's claim -> the picture reading or reasoning it needs
STEP_KINDS = {"count": "count", "colour_count": "count", "count_pair": "count", "colour": "colour",
              "position": "position", "kinds": "kind", "relation": "relation", "bigger": "relation", "total": "total",
              "more": "total", "counted_comparison": "total", "answer": "answer"}
QUESTION_WEIGHTS = {"colour": 1, "count": 1, "existence": 1, "relation": 1, "size": 1, "sum": 1.5, "compare": 1.5}


class SynthError(UserError, ValueError):
    """Options the generator cannot use (no chains asked for, an image too small to draw the shapes)."""


@dataclass(frozen=True)
class Level:
    """How cluttered scenes are and which questions are asked. Every level keeps the label rules and the
    no-text-shortcut property; an easier one only leaves fewer shapes for a step to be confused with."""

    scene: tuple[int, int] = (3, 5)            # shapes in a scene asked about one or two of them
    count_others: tuple[int, int] = (1, 3)     # shapes besides the counted kind
    sum_others: tuple[int, int] = (0, 2)       # shapes of neither summed kind
    compare_others: tuple[int, int] = (0, 2)   # shapes of neither compared colour
    present_others: tuple[int, int] = (2, 4)   # shapes besides the one an existence question asks about
    question_weights: dict = field(default_factory=lambda: dict(QUESTION_WEIGHTS))


LEVELS = {
    "standard": Level(),
    # one or two shapes, perception questions only: what a from-scratch critic learns in minutes of CPU
    "easy": Level(scene=(1, 2), count_others=(0, 1), sum_others=(0, 0), compare_others=(0, 0),
                  present_others=(0, 1), question_weights={"colour": 1, "count": 1, "existence": 1, "relation": 1,
                                                           "size": 1}),
}


# ----------------------------------------------------------------------------- claims


@dataclass
class Claim:
    """One planned step: what is true, how any value is worded, how the step can go wrong."""

    template: str
    type: str                                   # schema step type
    truth: Any                                  # the value the image (and correct premises) support
    say: Callable[[Any], str]
    explain: Callable[[Any, Any], list[str]]    # (said, truth) -> reference critiques
    corrupt: Callable[[Any, random.Random], Any] | None = None  # a wrong value; None: cannot go wrong
    error: str | None = None                    # MiCEval description error of a wrong description
    subject: str = ""                           # what the step is about, for "irrelevant" critiques
    premises: tuple[int, ...] = ()
    follow: Callable[..., Any] | None = None    # reasoning / "both": the value the premises lead to
    contradict: Callable[[Any], Any] | None = None  # "both": turn the conclusion round (intra error)
    explain_logic: Callable[[Any, Any], list[str]] | None = None
    fault_rate: float | None = None             # overrides OWN_FAULT_RATES[template] for this claim
    check: Callable[[Any], tuple] | None = None  # said -> the questions that check it against the image (`Asked`)
    claimed: Callable[[Any], tuple] | None = None  # said -> what it says, asked yes/no (None: `check` already is)

    def own_fault_rate(self) -> float:
        return OWN_FAULT_RATES[self.template] if self.fault_rate is None else self.fault_rate


@dataclass(frozen=True)
class Asked:
    """One verification question, the image's answer and what a base reads off the image to answer it, as the
    scene questions a base is pre-trained on (`train/tiny/scene_qa.py`, whose readings these match). A step's check
    (`meta.step_checks`, `data build --prm-notes check`) is one or more of these, whose answers the step must agree
    with."""

    question: str
    answer: str
    reading: str


def _qa(question: str, answer, reading: str) -> tuple[Asked]:
    return (Asked(question, str(answer), reading),)


def worded(check: tuple[Asked, ...] | None, say_first: bool = False) -> str | None:
    """A check as a note: "What colour is the cross? blue."; `say_first`, in the form of a base pre-trained with
    answers said first (`base_pretrain --say-first`): "What colour is the cross? cross blue."."""
    if not check:
        return None
    return " ".join(f"{a.question} {a.reading + ' ' if say_first else ''}{a.answer}." for a in check)


def _yes(ok: bool) -> str:
    return "yes" if ok else "no"


def _other(rng, options, value, weights: dict | None = None):
    """A wrong value drawn from the options' own distribution without the true one, so wrong claims
    use the same words as true ones at the same rates."""
    rest = [o for o in options if o != value]
    return rng.choices(rest, weights=None if weights is None else [weights[o] for o in rest])[0]


def _amount(n: int, noun: str, plural: str) -> str:
    return f"{n} {noun if n == 1 else plural}"


def _there_are(n: int, noun: str, plural: str) -> str:
    return f"There {'is' if n == 1 else 'are'} {_amount(n, noun, plural)}"


def _kinds_text(kinds) -> str:
    names = [f"a {s}" for s in SHAPES if s in kinds]  # canonical order: the order carries no signal
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _swap(pair: tuple) -> tuple:
    return pair[1], pair[0]


def colour_claim(item: Item) -> Claim:
    shape = item.shape  # only used for shapes that occur once in the scene
    return Claim("colour", "description", item.colour, say=lambda v: f"The {shape} is {v}.",
                 corrupt=lambda v, rng: _other(rng, COLOUR_NAMES, v), error="attribute", subject=f"the {shape}",
                 check=lambda v: _qa(f"What colour is the {shape}?", item.colour, shape),
                 claimed=lambda v: _qa(f"Is the {shape} {v}?", _yes(v == item.colour), f"{shape} {item.colour}"),
                 explain=lambda said, true: [f"The {shape} is {true}, not {said}.",
                                             f"In the image the {shape} is coloured {true}.",
                                             f"The step gets the colour wrong: the {shape} is {true}."])


def position_claim(item: Item, ref: str) -> Claim:
    return Claim("position", "description", item.cell, say=lambda v: f"The {ref} is at the {v}.",
                 corrupt=lambda v, rng: _other(rng, ALL_CELLS, v), error="spatial", subject=f"the {ref}",
                 check=lambda v: _qa(f"Where is the {ref}?", f"at the {item.cell}", ref),
                 claimed=lambda v: _qa(f"Is the {ref} at the {v}?", _yes(v == item.cell), f"{ref} {item.cell}"),
                 explain=lambda said, true: [f"The {ref} is at the {true}, not at the {said}.",
                                             f"In the image the {ref} sits in the {true} cell.",
                                             f"The {ref} is not at the {said} but at the {true}."])


def count_claim(noun: str, plural: str, n: int, avoid: int | None = None, template: str = "count") -> Claim:
    """"There are 2 circles." / "There is 1 red shape."; `avoid` keeps a wrong count off a rival count."""
    options = [c for c in COUNTS if c != avoid]
    return Claim(template, "description", n, say=lambda v: _there_are(v, noun, plural) + ".",
                 corrupt=lambda v, rng: _other(rng, options, v), error="attribute", subject=f"the {plural}",
                 check=lambda v: _qa(f"How many {plural} are there?", n, noun.removesuffix(" shape")),
                 claimed=lambda v: _is_count(v, n, noun, plural),
                 explain=lambda said, true: [f"{_there_are(true, noun, plural)} in the image, not {said}.",
                                             f"Counting the {plural} in the image gives {true}, not {said}.",
                                             f"The step miscounts the {plural}: there are exactly {true}."])


def count_pair_claim(shapes: tuple[str, str], a: int, b: int) -> Claim:
    """"There are 2 crosses and 1 circle.": one step, two counts, partly right when one is wrong."""
    (s1, s2), (p1, p2) = shapes, (PLURALS[shapes[0]], PLURALS[shapes[1]])

    def corrupt(pair, rng):
        which = rng.choice(((True, False), (False, True), (True, True)))
        return tuple(_other(rng, COUNTS, n) if wrong else n for n, wrong in zip(pair, which))

    def seen(pair):
        return f"{_amount(pair[0], s1, p1)} and {_amount(pair[1], s2, p2)}"
    return Claim("count_pair", "description", (a, b),
                 say=lambda v: f"{_there_are(v[0], s1, p1)} and {_amount(v[1], s2, p2)}.", corrupt=corrupt,
                 error="attribute", subject=f"the {p1} and {p2}",
                 check=lambda v: _qa(f"How many {p1} are there?", a, s1) + _qa(f"How many {p2} are there?", b, s2),
                 claimed=lambda v: _is_count(v[0], a, s1, p1) + _is_count(v[1], b, s2, p2),
                 explain=lambda said, true: [f"The image has {seen(true)}, not {said[0]} and {said[1]}.",
                                             f"Counting again gives {true[0]} {p1} and {true[1]} {p2}.",
                                             f"The step miscounts: there are {seen(true)}."])


def kinds_claim(items: list[Item]) -> Claim:
    present = frozenset(it.shape for it in items)
    absent = [s for s in SHAPES if s not in present]  # never empty: see _palette

    def swap_one(kinds, rng):  # one real kind replaced by an absent one: an entity error
        return (kinds - {rng.choice(sorted(kinds))}) | {rng.choice(absent)}

    def explain(said, true):
        ghost = sorted(said - true)[0]
        return [f"There is no {ghost} in the image.",
                f"The image contains {_kinds_text(true)}, but no {ghost}.",
                f"The step mentions a {ghost}, which does not appear in the image."]
    return Claim("kinds", "description", present, say=lambda v: f"The image contains {_kinds_text(v)}.",
                 corrupt=swap_one, error="entity", subject="the kinds of shapes",
                 check=lambda said: sum((_qa(f"Is there a {s} in the image?", _yes(s in present), s)
                                         for s in SHAPES if s in said), ()),
                 explain=explain)


def relation_claim(a: Item, b: Item, axis: str) -> Claim:
    words = AXES[axis]
    ahead = a.col < b.col if axis == "horizontal" else a.row < b.row
    return Claim("relation", "description", words[0] if ahead else words[1],
                 say=lambda v: f"The {a.name} is {v} the {b.name}.",
                 corrupt=lambda v, rng: _other(rng, words, v), error="spatial", subject=f"the {a.name}",
                 check=lambda v: _qa(f"Is the {a.name} {v} the {b.name}?", _yes(v == (words[0] if ahead else words[1])),
                                     f"{a.name} {a.cell} {b.name} {b.cell}"),
                 explain=lambda said, true: [f"The {a.name} is {true} the {b.name}, not {said} it.",
                                             f"In the image the {a.name} is {true} the {b.name}.",
                                             f"The step reverses the relation: the {a.name} is {true} the {b.name}."])


def bigger_claim(a: Item, b: Item) -> Claim:
    big, small = (a, b) if a.size == "big" else (b, a)
    return Claim("bigger", "description", (big.name, small.name),
                 say=lambda v: f"The {v[0]} is bigger than the {v[1]}.",
                 corrupt=lambda v, rng: _swap(v), error="non_spatial", subject=f"the {a.name}",
                 check=lambda v: _qa(f"Is the {v[0]} bigger than the {v[1]}?", _yes(v == (big.name, small.name)),
                                     " ".join(f"{n} {'big' if n == big.name else 'small'}" for n in v)),
                 explain=lambda said, true: [f"The {true[0]} is bigger than the {true[1]}, not the other way round.",
                                             f"In the image the {true[1]} is the smaller of the two.",
                                             f"The step swaps the sizes: the {true[0]} is the bigger one."])


def total_claim(premise: int, shapes: tuple[str, str], a: int, b: int) -> Claim:
    seen = f"{_amount(a, shapes[0], PLURALS[shapes[0]])} and {_amount(b, shapes[1], PLURALS[shapes[1]])}"
    return Claim("total", "reasoning", a + b, premises=(premise,), follow=sum,
                 say=lambda v: f"Together that makes {v}.",
                 corrupt=lambda v, rng: _other(rng, TOTAL_WEIGHTS, v, TOTAL_WEIGHTS),
                 check=lambda v: _qa(f"How many {PLURALS[shapes[0]]} and {PLURALS[shapes[1]]} are there altogether?",
                                     a + b, f"{shapes[0]} {a} {shapes[1]} {b}"),
                 claimed=lambda v: _is_total(v, shapes, a, b),
                 explain=lambda said, true: [f"The image has {seen}, which make {true}, not {said}.",
                                             f"{a} plus {b} is {true}, so the total of {said} is wrong.",
                                             f"The total should be {true}: there are {seen}."])


def _is_count(said: int, n: int, noun: str, plural: str) -> tuple[Asked]:
    """"Are there 2 circles?" / "Is there 1 red shape?", read as the count ("circle 3"), then yes or no."""
    question = f"{'Is there' if said == 1 else 'Are there'} {_amount(said, noun, plural)}?"
    return _qa(question, _yes(said == n), f"{noun.removesuffix(' shape')} {n}")


def _is_total(said: int, shapes: tuple[str, str], a: int, b: int) -> tuple[Asked]:
    return _qa(f"Are there {said} {PLURALS[shapes[0]]} and {PLURALS[shapes[1]]} altogether?", _yes(said == a + b),
               f"{shapes[0]} {a} {shapes[1]} {b}")


def _counts_read(colours: tuple[str, str], counts: dict) -> str:
    """What a comparison reads first: "red 2 blue 1", in the order the question names the colours."""
    return " ".join(f"{c} {counts[c]}" for c in colours)


def _majority(c1: str, c2: str):
    return lambda x, y: (c1, c2) if x > y else (c2, c1)


def more_claim(premises: tuple[int, int], c1: str, c2: str, a: int, b: int) -> Claim:
    return Claim("more", "reasoning", _majority(c1, c2)(a, b), premises=premises, follow=_majority(c1, c2),
                 say=lambda v: f"So there are more {v[0]} shapes than {v[1]} shapes.",
                 corrupt=lambda v, rng: _swap(v),
                 check=lambda v: _qa(f"Are there more {v[0]} shapes than {v[1]} shapes?",
                                     _yes(v == _majority(c1, c2)(a, b)), _counts_read(v, {c1: a, c2: b})),
                 explain=lambda said, true: [f"There are more {true[0]} shapes than {true[1]} shapes, not the reverse.",
                                             f"With {a} {c1} and {b} {c2} shapes, the {true[0]} shapes are more.",
                                             f"The comparison is turned round: the {true[1]} shapes are fewer."])


def counted_comparison_claim(c1: str, c2: str, a: int, b: int) -> Claim:
    """A "both" step: counts seen and the comparison drawn from them, in one sentence."""
    spare = next(c for c in COUNTS if c not in (a, b))  # a wrong count that never ties the other one
    majority = _majority(c1, c2)

    def say(value):
        (x, y), (more, fewer) = value
        listed = f"{_there_are(x, f'{c1} shape', f'{c1} shapes')} and {_amount(y, f'{c2} shape', f'{c2} shapes')}"
        return f"{listed}, so there are more {more} shapes than {fewer} shapes."
    return Claim("counted_comparison", "both", (a, b), say=say, follow=lambda d: majority(*d),
                 corrupt=lambda d, rng: (spare, d[1]) if rng.random() < 0.5 else (d[0], spare),
                 contradict=_swap, error="attribute", subject=f"the {c1} and {c2} shapes",
                 check=lambda said: (_qa(f"How many {c1} shapes are there?", a, c1)
                                     + _qa(f"How many {c2} shapes are there?", b, c2)
                                     + _qa(f"Are there more {said[1][0]} shapes than {said[1][1]} shapes?",
                                           _yes(said[1] == majority(a, b)), _counts_read(said[1], {c1: a, c2: b}))),
                 claimed=lambda said: (_is_count(said[0][0], a, f"{c1} shape", f"{c1} shapes")
                                       + _is_count(said[0][1], b, f"{c2} shape", f"{c2} shapes")
                                       + _qa(f"Are there more {said[1][0]} shapes than {said[1][1]} shapes?",
                                             _yes(said[1] == majority(a, b)), _counts_read(said[1], {c1: a, c2: b}))),
                 explain=lambda said, true: [
                     f"The image has {true[0]} {c1} and {true[1]} {c2} shapes, not {said[0]} and {said[1]}.",
                     f"The counts are wrong: there are {true[0]} {c1} shapes and {true[1]} {c2} shapes.",
                     f"Counting again gives {true[0]} {c1} and {true[1]} {c2} shapes."],
                 explain_logic=lambda said, concl: [
                     f"By its own counts the step should conclude there are more {concl[1]} shapes; it contradicts "
                     "itself.",
                     f"{said[0]} {c1} against {said[1]} {c2} shapes does not mean more {concl[0]} shapes.",
                     "The conclusion does not match the numbers given in the same sentence."])


def answer_claim(premise: int, truth: str, follow: Callable[[Any], str], options, weights=None) -> Claim:
    return Claim("answer", "reasoning", truth, premises=(premise,), follow=follow,
                 say=lambda v: f"So the answer is {v}.", corrupt=lambda v, rng: _other(rng, options, v, weights),
                 explain=lambda said, true: [f"The correct answer is {true}, not {said}.",
                                             f"The answer should be {true}.",
                                             f"\"{said}\" is wrong; the image supports the answer {true}."])


# ----------------------------------------------------------------------------- questions


@dataclass
class Question:
    """One scene and one question about it; `plan(rng)` draws the claims of one chain answering it."""

    kind: str
    category: str
    text: str
    items: list[Item]
    reference: str
    plan: Callable[[random.Random], list[Claim]]
    involved: list[Item]
    reading: str = ""  # what a base reads off the image to answer it (`Asked.reading`)
    claimed: Callable[[str], tuple] | None = None  # an answer -> it, asked yes/no (None: a yes/no question)

    @property
    def bystanders(self) -> list[Item]:
        return [it for it in self.items if it not in self.involved]


def _with_answer(kind: str, claims: list[Claim], *answer_args, **answer_kwargs) -> list[Claim]:
    answer = answer_claim(len(claims) - 1, *answer_args, **answer_kwargs)
    return claims + [replace(answer, fault_rate=ANSWER_FAULT_RATES[kind])]


def _shape_unique(items: list[Item], shape: str) -> bool:
    return sum(it.shape == shape for it in items) == 1


def _palette(rng) -> list[str]:
    """The shapes a scene may use: one kind is always left out, so every scene has a shape that a
    list of what is seen can wrongly include (an entity error is always possible)."""
    return rng.sample(SHAPES, len(SHAPES) - 1)


def _scene(rng, accept: Callable[[list[Item]], bool], level: Level) -> list[Item]:
    palette = _palette(rng)
    while True:
        items = place(rng, random_pairs(rng, rng.randint(*level.scene), shapes=palette))
        if accept(items):
            return items


def _colour_question(rng, level: Level = LEVELS['standard']) -> Question:
    items = _scene(rng, lambda its: any(_shape_unique(its, it.shape) for it in its), level)
    target = rng.choice([it for it in items if _shape_unique(items, it.shape)])

    def plan(rng):
        context = [position_claim(target, target.shape)] if rng.random() < 0.5 else []
        return _with_answer("colour", context + [colour_claim(target)], target.colour, str, COLOUR_NAMES)
    return Question("colour", "perception", f"What colour is the {target.shape}?", items, target.colour, plan,
                    [target], target.shape,
                    lambda v: _qa(f"Is the {target.shape} {v}?", _yes(v == target.colour),
                                  f"{target.shape} {target.colour}"))


def _count_question(rng, level: Level = LEVELS['standard']) -> Question:
    (shape, *others), k = _palette(rng), rng.choice(COUNTS)
    pairs = [(shape, c) for c in rng.sample(COLOUR_NAMES, k)]
    items = place(rng, pairs + random_pairs(rng, rng.randint(*level.count_others), shapes=others))

    def plan(rng):
        context = [kinds_claim(items)] if rng.random() < 0.5 else []
        count = count_claim(shape, PLURALS[shape], k)
        return _with_answer("count", context + [count], str(k), str, [str(c) for c in COUNTS])
    return Question("count", "perception", f"How many {PLURALS[shape]} are there?", items, str(k), plan,
                    [it for it in items if it.shape == shape], shape,
                    lambda v: _is_count(int(v), k, shape, PLURALS[shape]))


def _sum_question(rng, level: Level = LEVELS['standard']) -> Question:
    (s1, s2, other), a, b = _palette(rng), rng.choice(COUNTS), rng.choice(COUNTS)
    pairs = [(s1, c) for c in rng.sample(COLOUR_NAMES, a)] + [(s2, c) for c in rng.sample(COLOUR_NAMES, b)]
    items = place(rng, pairs + random_pairs(rng, rng.randint(*level.sum_others), shapes=[other]))

    def plan(rng):
        context = [kinds_claim(items)] if rng.random() < 0.4 else []
        claims = context + [count_pair_claim((s1, s2), a, b), total_claim(len(context), (s1, s2), a, b)]
        return _with_answer("sum", claims, str(a + b), str, [str(t) for t in TOTAL_WEIGHTS],
                            {str(t): w for t, w in TOTAL_WEIGHTS.items()})
    text = f"How many {PLURALS[s1]} and {PLURALS[s2]} are there altogether?"
    return Question("sum", "reasoning", text, items, str(a + b), plan,
                    [it for it in items if it.shape in (s1, s2)], f"{s1} {a} {s2} {b}",
                    lambda v: _is_total(int(v), (s1, s2), a, b))


def _compare_question(rng, level: Level = LEVELS['standard']) -> Question:
    (c1, c2), (a, b) = rng.sample(COLOUR_NAMES, 2), rng.sample(COUNTS, 2)
    palette = _palette(rng)
    pairs = [(s, c1) for s in rng.sample(palette, a)] + [(s, c2) for s in rng.sample(palette, b)]
    others = [c for c in COLOUR_NAMES if c not in (c1, c2)]
    extra = random_pairs(rng, rng.randint(*level.compare_others), shapes=palette, colours=others)
    items = place(rng, pairs + extra)
    reference = "yes" if a > b else "no"

    def answer(order):
        return "yes" if order[0] == c1 else "no"

    def plan(rng):
        if rng.random() < 0.5:
            return _with_answer("compare", [counted_comparison_claim(c1, c2, a, b)], reference, answer, ("yes", "no"))
        claims = [count_claim(f"{c1} shape", f"{c1} shapes", a, avoid=b, template="colour_count"),
                  count_claim(f"{c2} shape", f"{c2} shapes", b, avoid=a, template="colour_count"),
                  more_claim((0, 1), c1, c2, a, b)]
        return _with_answer("compare", claims, reference, answer, ("yes", "no"))
    return Question("compare", "reasoning", f"Are there more {c1} shapes than {c2} shapes?", items, reference, plan,
                    [it for it in items if it.colour in (c1, c2)], f"{c1} {a} {c2} {b}")


def _existence_question(rng, level: Level = LEVELS['standard']) -> Question:
    palette = _palette(rng)
    if rng.random() < 0.5:  # ask about a shape of the palette: it is there
        shape = rng.choice(palette)
        first = (shape, rng.choice(COLOUR_NAMES))
        items = place(rng, [first] + random_pairs(rng, rng.randint(*level.present_others), shapes=palette,
                                                        taken=[first]))
    else:  # ask about the shape left out
        shape = next(s for s in SHAPES if s not in palette)
        items = place(rng, random_pairs(rng, rng.randint(*level.scene), shapes=palette))
    reference = "yes" if any(it.shape == shape for it in items) else "no"

    def plan(rng):
        return _with_answer("existence", [kinds_claim(items)], reference,
                            lambda kinds: "yes" if shape in kinds else "no", ("yes", "no"))
    return Question("existence", "perception", f"Is there a {shape} in the image?", items, reference, plan,
                    [it for it in items if it.shape == shape], shape)


def _relation_question(rng, level: Level = LEVELS['standard']) -> Question:
    axis = rng.choice(sorted(AXES))
    key = (lambda it: it.col) if axis == "horizontal" else (lambda it: it.row)
    items = _scene(rng, lambda its: len({key(it) for it in its}) > 1, level)
    a, b = rng.choice([(x, y) for x in items for y in items if key(x) != key(y)])
    asked = rng.choice(AXES[axis])
    relation = relation_claim(a, b, axis)
    reference = "yes" if relation.truth == asked else "no"

    def plan(rng):
        context = [position_claim(it, it.name) for it in (a, b) if rng.random() < 0.4]
        return _with_answer("relation", context + [relation_claim(a, b, axis)], reference,
                            lambda word: "yes" if word == asked else "no", ("yes", "no"))
    return Question("relation", "perception", f"Is the {a.name} {asked} the {b.name}?", items, reference, plan,
                    [a, b], f"{a.name} {a.cell} {b.name} {b.cell}")


def _size_question(rng, level: Level = LEVELS['standard']) -> Question:
    items = _scene(rng, lambda its: len({it.size for it in its}) > 1, level)
    a, b = rng.choice([(x, y) for x in items for y in items if x.size != y.size])
    reference = "yes" if a.size == "big" else "no"

    def plan(rng):
        subject = rng.choice((a, b))
        context = [position_claim(subject, subject.name)] if rng.random() < 0.5 else []
        return _with_answer("size", context + [bigger_claim(a, b)], reference,
                            lambda order: "yes" if order[0] == a.name else "no", ("yes", "no"))
    return Question("size", "perception", f"Is the {a.name} bigger than the {b.name}?", items, reference, plan,
                    [a, b], f"{a.name} {a.size} {b.name} {b.size}")


QUESTIONS = {"colour": _colour_question, "count": _count_question, "existence": _existence_question,
             "relation": _relation_question, "size": _size_question, "sum": _sum_question,
             "compare": _compare_question}


def sample_question(rng, level: Level = LEVELS["standard"]) -> Question:
    weights = level.question_weights
    kind = rng.choices(list(weights), weights=list(weights.values()))[0]
    return QUESTIONS[kind](rng, level)


def bystander_claim(question: Question, rng) -> Claim:
    """A description of items the question is not about (for an irrelevant step), drawn from the same
    templates and wordings relevant steps use, so that relevance cannot be read off the words."""
    others = question.bystanders
    unique = [it for it in others if _shape_unique(question.items, it.shape)]
    pairs = [(x, y) for x in others for y in others if x != y]
    by_template = {
        "position": [position_claim(it, it.shape if it in unique else it.name) for it in others],
        "colour": [colour_claim(it) for it in unique],
        "relation": [relation_claim(x, y, axis) for x, y in pairs
                     for axis, apart in (("horizontal", x.col != y.col), ("vertical", x.row != y.row)) if apart],
        "bigger": [bigger_claim(x, y) for x, y in pairs if x.size != y.size],
    }
    return rng.choice(by_template[rng.choice([t for t, claims in by_template.items() if claims])])


# ----------------------------------------------------------------------------- chains


@dataclass
class Note:
    """What the generator did to one step; kept in `meta` so tests and analyses can audit labels."""

    template: str
    fault: str | None = None
    check: tuple | None = None  # the step's verification questions, answered from the image (`Claim.check`)
    claimed: tuple | None = None  # what the step says, asked yes/no and answered from the image (`Claim.claimed`)


def _description_correctness(said, truth) -> str:
    if said == truth:
        return "correct"
    if isinstance(truth, frozenset):  # a list of things seen: partly right while some are real
        return "partial" if said & truth else "unsupported"
    if isinstance(truth, tuple) and len(truth) > 1 and any(a == b for a, b in zip(said, truth)):
        return "partial"
    return "unsupported"


def _finish(step: dict, note: Note, explanations: list[str], correction: str | None = None) -> tuple[dict, Note]:
    """`correction`: the step as it should read (a wrong value replaced by the true one); None for steps that
    no rewording fixes (irrelevant, repeated)."""
    step["correct"] = schema.step_correct_from_aspects(step)
    step["explanations"] = [] if step["correct"] else explanations
    step["correction"] = None if step["correct"] else correction
    return step, note


def _note_checks(note: Note, claim: Claim, said) -> None:
    if claim.check:
        note.check = claim.check(said)
        note.claimed = claim.claimed(said) if claim.claimed else note.check


def _realise_claim(claim: Claim, said_before: list, wrong_before: set[int], fault: str | None,
                   rng) -> tuple[dict, Note, Any]:
    """Turn one planned claim into a labelled step; returns the value later steps build on."""
    note = Note(claim.template)
    step: dict = {"type": claim.type, "premises": list(claim.premises)}
    if claim.type == "reasoning":
        follows = claim.follow(*(said_before[p] for p in claim.premises))
        # an inter-step error must break the step away from its premises; a step whose premises are
        # already wrong is wrong anyway, so the injection is dropped there
        injected = fault == "inter" and follows == claim.truth
        said = claim.corrupt(follows, rng) if injected else follows
        step.update(text=claim.say(said), logic_correct=said == claim.truth, logic_relevant=True, informative=True,
                    logic_error="inter" if injected else None)
        _note_checks(note, claim, said)
        explanations = claim.explain(said, claim.truth)
        if said != claim.truth and not injected:
            note.fault = "propagated"
            wrong_at = " and ".join(str(p + 1) for p in claim.premises if p in wrong_before)
            explanations = [f"{e} It builds on the mistake in step {wrong_at}." for e in explanations]
        else:
            note.fault = "inter" if injected else None
        return (*_finish(step, note, explanations, claim.say(claim.truth)), said)

    described = claim.corrupt(claim.truth, rng) if fault == "description" else claim.truth
    correctness = _description_correctness(described, claim.truth)
    step.update(description_correctness=correctness, description_relevance="both",
                description_errors=[] if correctness == "correct" else [claim.error])
    explanations = [] if correctness == "correct" else claim.explain(described, claim.truth)
    note.fault = None if correctness == "correct" else claim.error
    if claim.type == "description":
        _note_checks(note, claim, described)
        step["text"] = claim.say(described)
        return (*_finish(step, note, explanations, claim.say(claim.truth)), described)

    # "both": a description plus a conclusion drawn inside the same sentence (a claim gets at most
    # one fault, so an intra-step error sits on a correct description)
    conclusion = claim.follow(described)
    intra = fault == "intra"
    if intra:
        conclusion = claim.contradict(conclusion)
        explanations = claim.explain_logic(described, conclusion)
        note.fault = "intra"
    step.update(text=claim.say((described, conclusion)), logic_correct=not intra, logic_relevant=True,
                informative=True, logic_error="intra" if intra else None)
    _note_checks(note, claim, (described, conclusion))
    correction = claim.say((claim.truth, claim.follow(claim.truth)))
    return (*_finish(step, note, explanations, correction), conclusion)


def _irrelevant_step(claim: Claim, question: str, rng) -> tuple[dict, Note]:
    """A description of something the question is not about: relevance "image", or "none" if also false."""
    wrong = rng.random() < WRONG_BYSTANDER
    described = claim.corrupt(claim.truth, rng) if wrong else claim.truth
    off_topic = [f"This step is about {claim.subject}, which has nothing to do with the question.",
                 f"Describing {claim.subject} does not help answer \"{question}\".",
                 f"The question does not ask about {claim.subject}, so this step is irrelevant."]
    step = {"type": "description", "text": claim.say(described), "premises": [],
            "description_correctness": "unsupported" if wrong else "correct",
            "description_relevance": "none" if wrong else "image",
            "description_errors": [claim.error] if wrong else []}
    explanations = off_topic
    if wrong:
        explanations = [f"{a} {b}" for a, b in zip(off_topic, claim.explain(described, claim.truth))]
    return _finish(step, Note(claim.template, "irrelevant"), explanations)


def _repeat_step(steps: list[dict], notes: list[Note], source: int) -> tuple[dict, Note]:
    """A verbatim repeat of an earlier correct step: true, relevant, but uninformative."""
    original = steps[source]
    step = {"text": original["text"], "premises": [source], "logic_correct": True, "logic_relevant": True,
            "informative": False, "logic_error": None}
    if original["type"] == "reasoning":
        step["type"] = "reasoning"
    else:
        step.update(type="both", description_correctness="correct", description_relevance="both")
    explanations = [f"This step only repeats step {source + 1}.",
                    f"Step {source + 1} already said this, so the step adds nothing new.",
                    f"This is a redundant restatement of step {source + 1}."]
    return _finish(step, Note(notes[source].template, "uninformative"), explanations)


def _insert(steps: list[dict], notes: list[Note], at: int, step: dict, note: Note) -> None:
    for later in steps[at:]:
        later["premises"] = [p + 1 if p >= at else p for p in later["premises"]]
    steps.insert(at, step)
    notes.insert(at, note)


def _choose_faults(question: Question, claims: list[Claim], scale: float, rng,
                   rates: dict | None = None) -> tuple[dict[int, str], list[str]]:
    """Step index -> "description"/"inter"/"intra", and the kinds of steps to insert.

    Every step goes wrong on its own, independently, so a template is not wrong more or less often
    merely because of the chains it sits in. `rates` ({template: rate}) replaces `OWN_FAULT_RATES` for its
    templates; the draws are the same, so only those templates' outcomes change.
    """
    faults: dict[int, str] = {}
    for i, claim in enumerate(claims):
        own = rates[claim.template] if rates and claim.template in rates else claim.own_fault_rate()
        if claim.corrupt and rng.random() < scale * own:
            faults[i] = "inter" if claim.type == "reasoning" else "description"
        elif claim.contradict and rng.random() < scale * INTRA_FAULT_RATE:
            faults[i] = "intra"
    inserts = [k for k, rate in INSERT_RATES.items() if rng.random() < scale * rate]
    if not question.bystanders and "irrelevant" in inserts:
        inserts.remove("irrelevant")
    return faults, inserts[:MAX_STEPS - len(claims)]


def _chain_steps(question: Question, rng, scale: float,
                 rates: dict | None = None) -> tuple[list[dict], list[Note], Any]:
    claims = question.plan(rng)
    faults, inserts = _choose_faults(question, claims, scale, rng, rates)
    steps, notes, said = [], [], []
    for i, claim in enumerate(claims):
        wrong_before = {j for j, s in enumerate(steps) if not s["correct"]}
        step, note, value = _realise_claim(claim, said, wrong_before, faults.get(i), rng)
        if claim.template == "answer":  # an answer is checked by asking the question itself
            note.check = _qa(question.text, question.reference, question.reading)
            # a yes/no question's answer is claimed right when its yes or no is the image's: asked as such, so that
            # its note too ends in yes exactly when the step is right
            note.claimed = question.claimed(value) if question.claimed else note.check + _qa(
                f"Is the answer {value}?", _yes(value == question.reference), question.reference)
        steps.append(step)
        notes.append(note)
        said.append(value)
    if "irrelevant" in inserts:
        step, note = _irrelevant_step(bystander_claim(question, rng), question.text, rng)
        _insert(steps, notes, rng.randrange(len(steps)), step, note)
    if "repeat" in inserts:
        sources = [i for i, s in enumerate(steps[:-1]) if s["correct"]]
        if sources:
            source = rng.choice(sources)
            step, note = _repeat_step(steps, notes, source)
            _insert(steps, notes, rng.randint(source + 1, len(steps) - 1), step, note)
    return steps, notes, said[-1]


def _reference_clues(question: str, steps: list[dict]) -> list[dict]:
    """RPTS's clues, the leaves of a chain's reasoning tree (`eval/rpts_tree.py`), made explicit: the facts read off
    the image (each relevant description or "both" step as it reads when right: its text, or its correction) and the
    question's text. A repeated or off-topic step adds no clue: the answer needs nothing from it."""
    visual = [s["text"] if s["correct"] else s.get("correction") for s in steps
              if s["type"] in ("description", "both") and s.get("description_relevance") == "both"
              and s.get("informative") is not False]
    return ([{"kind": "visual", "text": text} for text in dict.fromkeys(t for t in visual if t)]
            + [{"kind": "textual", "text": question}])


def _chain_meta(question: Question, notes: list[Note], steps: list[dict], seed: int, group: int,
                image_size: int, level: str) -> dict:
    wrong = [not s["correct"] for s in steps]
    first_wrong = wrong.index(True) if True in wrong else len(steps)
    return {
        "generator": "stepcritic.data_prep.synth", "seed": seed, "group": group, "image_size": image_size,
        "level": level,
        "question_type": question.kind, "scene": [item.as_dict() for item in question.items],
        "step_templates": [n.template for n in notes], "step_kinds": [STEP_KINDS[n.template] for n in notes],
        "step_faults": [n.fault for n in notes],
        # per step, questions that check it against the image with the image's answers; None for an inserted
        # step (irrelevant, repeated), which no question about the image checks
        "step_checks": [worded(n.check) for n in notes],
        # the same, answered as a base pre-trained with --say-first answers: what it reads, then the answer
        "step_checks_said": [worded(n.check, say_first=True) for n in notes],
        # what each step says, asked as yes/no questions and answered the same way: a step is right when every
        # answer is yes ("Is the cross blue? cross red no."), a yes/no question's answer when the last one is
        "step_claims_said": [worded(n.claimed, say_first=True) for n in notes],
        "independent_after_error": any(not w for w in wrong[first_wrong + 1:]),
        "error_propagated": any(n.fault == "propagated" for n in notes),
        "clues": _reference_clues(question.text, steps),
    }


def parse_fault_rates(text: str | dict | None) -> dict[str, float]:
    """`bigger=0.75,colour=0.5` (or such a dict) -> {template: rate}, each a template of `OWN_FAULT_RATES` and a
    rate in [0, 1]; `SynthError` naming the bad part otherwise."""
    if not text:
        return {}
    parts = text.items() if isinstance(text, dict) else (p.partition("=")[::2] for p in text.split(",") if p.strip())
    rates = {}
    for template, value in parts:
        template = template.strip()
        if template not in OWN_FAULT_RATES:
            close = difflib.get_close_matches(template, OWN_FAULT_RATES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (templates: {', '.join(OWN_FAULT_RATES)})"
            raise SynthError(f"--fault-rates: unknown template {template!r}{hint}")
        try:
            rate = float(value)
        except (TypeError, ValueError):
            raise SynthError(f"--fault-rates: {template}={value}: the rate must be a number") from None
        if not 0 <= rate <= 1:
            raise SynthError(f"--fault-rates: {template}={value}: the rate must be between 0 and 1")
        rates[template] = rate
    return rates


def check_options(n: int, image_size: int = 96, level: str = "standard", chains_per_question: int = 3,
                  error_rate: float | None = None) -> None:
    """Raise `SynthError` (one line naming the option) for options `synthesize` cannot honour."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SynthError(f"--n must be a positive number of chains, got {n!r}")
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < MIN_IMAGE_SIZE:
        raise SynthError(f"--image-size must be at least {MIN_IMAGE_SIZE} px to draw the shapes apart, "
                         f"got {image_size!r}")
    if level not in LEVELS:
        raise SynthError(f"unknown level {level!r}; choose one of {sorted(LEVELS)}")
    if isinstance(chains_per_question, bool) or not isinstance(chains_per_question, int) or chains_per_question < 1:
        raise SynthError(f"chains_per_question must be at least 1, got {chains_per_question!r}")
    if error_rate is not None and not (isinstance(error_rate, (int, float)) and 0 <= error_rate <= 1):
        raise SynthError(f"--error-rate must be between 0 and 1, got {error_rate!r}")


def synthesize(n: int, seed: int = 0, image_size: int = 96, chains_per_question: int = 3,
               error_rate: float | None = None, level: str = "standard", fault_rates: dict | None = None) -> list[dict]:
    """`n` validated chains (schema.validate_chain) over rendered scenes; same arguments, same output.

    One chain of each group (when a group has several) is a clean reference, so a group
    nearly always holds a fully correct and a faulty chain. In the others each step goes wrong with
    a per-template chance (`OWN_FAULT_RATES`, about 0.3 on average); `error_rate` rescales those
    chances to that mean (0 gives only clean chains). Group g depends only on (seed, g), so a
    smaller `n` gives a prefix of a larger one. `level` picks the scenes' clutter and the question mix
    (`LEVELS`: "standard", the default dataset, or "easy"). `fault_rates` ({template: rate}, `parse_fault_rates`)
    replaces some templates' own rates: training chains whose size claims are wrong half of the time say nothing
    about sizes in their words. `iter_synthesize` yields the same chains one by one.
    """
    return list(iter_synthesize(n, seed, image_size, chains_per_question, error_rate, level, fault_rates))


def iter_synthesize(n: int, seed: int = 0, image_size: int = 96, chains_per_question: int = 3,
                    error_rate: float | None = None, level: str = "standard", fault_rates: dict | None = None):
    """The chains of `synthesize`, one at a time (a group's chains one after another), holding none of them."""
    check_options(n, image_size, level, chains_per_question, error_rate)
    rates = parse_fault_rates(fault_rates)
    scale = 1.0 if error_rate is None else error_rate / NOMINAL_FAULT_RATE
    made = 0
    for group in range(math.ceil(n / chains_per_question)):
        rng = random.Random(f"stepcritic-synth/{seed}/{group}")
        question = sample_question(rng, LEVELS[level])
        image = {"bytes": render_png(question.items, image_size), "path": None}
        clean_reference = rng.randrange(chains_per_question) if chains_per_question > 1 else None
        for k in range(chains_per_question):
            if made == n:
                break
            steps, notes, final = _chain_steps(question, rng, 0.0 if k == clean_reference else scale, rates)
            chain_id = f"synth-s{seed}-g{group:06d}-c{k}"
            record = {
                "chain_id": chain_id, "source": "synthetic", "generator": "synth", "image": image,
                "question": question.text, "reference_answer": question.reference, "final_answer": str(final),
                "answer_correct": str(final) == question.reference, "category": question.category,
                "steps": steps, "meta": _chain_meta(question, notes, steps, seed, group, image_size, level),
            }
            made += 1
            yield schema.validate_chain(record, where=chain_id)


class LabelStats:
    """Counts of labels and injected faults, for the CLI report and for checking the mix, added up one chain at a time.
    Of each group it keeps only what the group counts ask (its chain count, whether every chain is correct, the
    distinct step texts and answers, hashed), not the chains: two groups can share an id (the same scene and question
    drawn twice), so no group is ever final before the end. The group counts say how many groups (of two or more
    chains) can teach nothing by contrast: every chain the same steps and answer, or no faulty chain at all
    (outcome-rm skips those; ShiftCheck has no wrong option)."""

    def __init__(self):
        self.chains = self.steps = self.incorrect = self.fully_correct = self.answers_correct = 0
        self.irrelevant = self.uninformative = self.propagated = self.independent = 0
        self.counters = {name: Counter() for name in ("step_types", "categories", "question_types",
                                                      "description_errors", "logic_errors")}
        self.groups: dict[str, list] = {}  # group id -> [chains, all correct, {hash of (step texts, answer)}]

    def add(self, c: dict) -> None:
        meta = schema.chain_meta(c)
        self.chains += 1
        self.fully_correct += bool(c["chain_correct"])
        self.answers_correct += bool(c["answer_correct"])
        self.counters["categories"][c["category"]] += 1
        self.counters["question_types"][meta["question_type"]] += 1
        self.propagated += sum(f == "propagated" for f in meta["step_faults"])
        self.independent += bool(meta["independent_after_error"])
        for s in c["steps"]:
            self.steps += 1
            self.incorrect += s["correct"] is False
            self.counters["step_types"][s["type"]] += 1
            self.counters["description_errors"].update(s["description_errors"])
            if s["logic_error"]:
                self.counters["logic_errors"][s["logic_error"]] += 1
            self.irrelevant += s["description_relevance"] in ("image", "none")
            self.uninformative += s["informative"] is False
        group = self.groups.setdefault(c["group_id"], [0, True, set()])
        group[0] += 1
        group[1] = group[1] and bool(c["chain_correct"])
        group[2].add(hash((tuple(s["text"] for s in c["steps"]), c["final_answer"])))

    def result(self) -> dict:
        multi = [g for g in self.groups.values() if g[0] > 1]
        return {
            "chains": self.chains, "groups": len(self.groups), "steps": self.steps,
            "steps_incorrect": self.incorrect, "step_error_rate": round(self.incorrect / max(self.steps, 1), 4),
            "chains_fully_correct": self.fully_correct, "answers_correct": self.answers_correct,
            **{name: dict(counter) for name, counter in self.counters.items()},
            "irrelevant": self.irrelevant, "uninformative": self.uninformative, "propagated": self.propagated,
            "chains_independent_after_error": self.independent,
            "groups_with_several_chains": len(multi),
            "groups_identical_chains": sum(len(g[2]) == 1 for g in multi),
            "groups_without_faulty_chain": sum(g[1] for g in multi),
        }


def synthesize_to_disk(n: int, seed: int, out_dir: str, image_size: int = 96, chains_per_question: int = 3,
                       error_rate: float | None = None, level: str = "standard", overwrite: bool = True,
                       progress: bool = False, fault_rates: dict | None = None) -> dict:
    """Generate, validate and save `n` chains with `schema.save_chains`, with `stats.json` (`LabelStats` and
    the options) and a dataset card (README.md) next to them; returns the stats plus `out_dir`.

    The folder appears at `out_dir` only once complete (`outputs.staged`); an existing one is replaced then, or,
    `overwrite` False, refused before any chain is made. `progress`: a bar on stderr."""
    from stepcritic.data_prep import outputs
    from stepcritic.data_prep.progress import bar

    counts, rates = LabelStats(), parse_fault_rates(fault_rates)
    with outputs.staged(out_dir, overwrite) as target, bar(progress, "synth", total=n) as shown:
        def counted():
            for chain in iter_synthesize(n, seed, image_size, chains_per_question, error_rate, level, rates):
                counts.add(chain)
                shown.update()
                yield chain

        schema.save_chains(counted(), target)  # written as they are made: memory does not grow with n
        stats = {"generator": "stepcritic.data_prep.synth", "n": n, "seed": seed, "image_size": image_size,
                 "chains_per_question": chains_per_question, "error_rate": error_rate, "level": level,
                 **({"fault_rates": rates} if rates else {}), **counts.result()}
        with open(os.path.join(target, schema.CHAINS_STATS_FILE), "w") as f:
            json.dump(stats, f, indent=2, sort_keys=True)
        write_synth_card(stats, os.path.join(target, "README.md"))
    return {"out_dir": out_dir, **stats}
