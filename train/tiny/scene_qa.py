"""Captions and questions about rendered scenes: pre-training data for a vision-language base, not critic data.

Every real critic starts from a VLM that can already say what is in a picture; the offline tiny critic starts
from nothing. These conversations are the offline stand-in for that VLM's pre-training (LLaVA's caption and
visual-question stages): one rendered scene, sometimes a caption listing every cell, then short questions about colours,
positions, counts, kinds, relations and sizes, each answered from the scene. They never contain a reasoning
chain, a step or a correctness label, so a base trained on them has learnt to look, not to judge.

    conversation(rng) -> (messages, png_bytes)
"""

from __future__ import annotations

import random

from stepcritic.data_prep.render import (
    AXES,
    CELL_NAMES,
    COLOUR_NAMES,
    PLURALS,
    SHAPES,
    SIZES,
    Item,
    place,
    random_pairs,
    render_png,
)

# the words scenes are described with: the vocabulary of the repeated word lists below
SCENE_WORDS = tuple(sorted({*SHAPES, *COLOUR_NAMES, *SIZES,
                            *(word for row in CELL_NAMES for cell in row for word in cell.split())}))


def repeated_words(rng: random.Random, low: int = 8, high: int = 24) -> str:
    """A list of `low` to `high` scene words said twice ("red top circle big red top circle big"): the text on
    which a transformer learns to find an earlier copy of the current word and read what followed it (an
    induction head). Every later look-up ("the circle" in a question -> the circle in the caption or the picture)
    is built on that ability, which question-answer pairs alone, with one answer word to learn from, teach slowly."""
    said = [rng.choice(SCENE_WORDS) for _ in range(rng.randint(low, high))]
    return " " + " ".join(said + said)


def caption(items: list[Item]) -> str:
    """Every occupied cell in reading order: "top left: a big red circle. centre: a small blue cross." """
    return " ".join(f"{it.cell}: a {it.size} {it.colour} {it.shape}." for it in items)


# With `say_first`, an answer first says what it is about and what it reads off the picture, then answers: "What
# colour is the circle?" -> "circle red", "Is the circle red?" -> "circle blue no". The token the answer is predicted
# from is then the name of what to look for, and a look-up is one hop: find the image token that holds the circle,
# read it (docs/tiny-critic.md, "The look-up is the language model's"). A yes/no check reads first and compares
# after, as a critic's note does.
def _said(question: str, answer: str, reading: str, say_first: bool) -> tuple[str, str]:
    return question, f"{reading} {answer}" if say_first else answer


def _count_of(items: list[Item], **match) -> int:
    return sum(all(getattr(it, k) == v for k, v in match.items()) for it in items)


def _unique(items: list[Item], shape: str) -> bool:
    return sum(it.shape == shape for it in items) == 1


def _colour(rng, items, say_first=False):
    once = [it for it in items if _unique(items, it.shape)]
    if once:
        it = rng.choice(once)
        return _said(f"What colour is the {it.shape}?", it.colour, it.shape, say_first)


def _where(rng, items, say_first=False):
    it = rng.choice(items)
    return _said(f"Where is the {it.name}?", f"at the {it.cell}", it.name, say_first)


def _what_at(rng, items, say_first=False):
    row, col = rng.randrange(3), rng.randrange(3)
    found = [it for it in items if (it.row, it.col) == (row, col)]
    return _said(f"What is at the {CELL_NAMES[row][col]}?",
                 f"a {found[0].size} {found[0].colour} {found[0].shape}" if found else "nothing", CELL_NAMES[row][col],
                 say_first)


def _count_shape(rng, items, say_first=False):
    shape = rng.choice(SHAPES)
    return _said(f"How many {PLURALS[shape]} are there?", str(_count_of(items, shape=shape)), shape, say_first)


def _count_colour(rng, items, say_first=False):
    colour = rng.choice(COLOUR_NAMES)
    return _said(f"How many {colour} shapes are there?", str(_count_of(items, colour=colour)), colour, say_first)


def _exists(rng, items, say_first=False):
    present = sorted({it.shape for it in items})
    absent = [shape for shape in SHAPES if shape not in present]
    if rng.random() < 0.5 or not absent:
        shape = rng.choice(present)
        return _said(f"Is there a {shape} in the image?", "yes", shape, say_first)
    shape = rng.choice(absent)
    return _said(f"Is there a {shape} in the image?", "no", shape, say_first)


def _relation(rng, items, say_first=False):
    axis = rng.choice(sorted(AXES))
    key = (lambda it: it.col) if axis == "horizontal" else (lambda it: it.row)
    pairs = [(a, b) for a in items for b in items if key(a) != key(b)]
    if pairs:
        a, b = rng.choice(pairs)
        word = rng.choice(AXES[axis])
        truth = AXES[axis][0] if key(a) < key(b) else AXES[axis][1]
        return _said(f"Is the {a.name} {word} the {b.name}?", "yes" if word == truth else "no",
                     f"{a.name} {a.cell} {b.name} {b.cell}", say_first)


def _bigger(rng, items, say_first=False):
    pairs = [(a, b) for a in items for b in items if a.size != b.size]
    if pairs:
        a, b = rng.choice(pairs)
        return _said(f"Is the {a.name} bigger than the {b.name}?", "yes" if a.size == "big" else "no",
                     f"{a.name} {a.size} {b.name} {b.size}", say_first)


# Yes/no checks are asked true half of the time: drawn blindly, "Is the circle red?" would be "no" 3 times in 4, a
# base would learn to say "no", and checking a claim against the picture is what a critic needs most.
def _is_colour(rng, items, say_first=False):
    once = [it for it in items if _unique(items, it.shape)]
    if once:
        it = rng.choice(once)
        colour = it.colour if rng.random() < 0.5 else rng.choice([c for c in COLOUR_NAMES if c != it.colour])
        return _said(f"Is the {it.shape} {colour}?", "yes" if colour == it.colour else "no",
                     f"{it.shape} {it.colour}", say_first)


def _is_at(rng, items, say_first=False):
    it = rng.choice(items)
    cells = [(r, c) for r in range(3) for c in range(3)]
    row, col = (it.row, it.col) if rng.random() < 0.5 else rng.choice([rc for rc in cells if rc != (it.row, it.col)])
    return _said(f"Is the {it.name} at the {CELL_NAMES[row][col]}?", "yes" if (it.row, it.col) == (row, col) else "no",
                 f"{it.name} {it.cell}", say_first)


def _is_count(rng, items, say_first=False):
    shape = rng.choice(sorted({it.shape for it in items}))
    count = _count_of(items, shape=shape)
    k = count if rng.random() < 0.5 and count <= 3 else rng.choice([n for n in (1, 2, 3) if n != count])
    plural = PLURALS[shape] if k > 1 else shape
    return _said(f"{'Are there' if k > 1 else 'Is there'} {k} {plural}?", "yes" if count == k else "no",
                 f"{shape} {count}", say_first)


def _two_counts(items, a: str, b: str, key: str = "shape") -> str:
    """What a total or a comparison reads first: "circle 2 square 1"."""
    return f"{a} {_count_of(items, **{key: a})} {b} {_count_of(items, **{key: b})}"


def _sum(rng, items, say_first=False):
    a, b = rng.sample(SHAPES, 2)
    total = sum(it.shape in (a, b) for it in items)
    return _said(f"How many {PLURALS[a]} and {PLURALS[b]} are there altogether?", str(total), _two_counts(items, a, b),
                 say_first)


def _by_answer(rng, subjects, answer) -> tuple:
    """(subject, its answer), the subject drawn by its answer, each count this scene allows weighted by count + 1.
    Drawn blindly, "How many red shapes?" is 0 or 1 nearly always and 3 almost never (few scenes hold three of a
    colour), and a base learns that 3 is an answer it need not give; the weights make up for the scenes without a
    large count."""
    grouped: dict = {}
    for subject in subjects:
        grouped.setdefault(answer(subject), []).append(subject)
    counts = sorted(grouped)
    count = rng.choices(counts, weights=[n + 1 for n in counts])[0]
    return rng.choice(grouped[count]), count


def _count_shape_balanced(rng, items, say_first=False):
    shape, count = _by_answer(rng, SHAPES, lambda s: sum(it.shape == s for it in items))
    return _said(f"How many {PLURALS[shape]} are there?", str(count), shape, say_first)


def _count_colour_balanced(rng, items, say_first=False):
    colour, count = _by_answer(rng, COLOUR_NAMES, lambda c: sum(it.colour == c for it in items))
    return _said(f"How many {colour} shapes are there?", str(count), colour, say_first)


def _sum_balanced(rng, items, say_first=False):
    pairs = [(a, b) for a in SHAPES for b in SHAPES if a != b]
    (a, b), total = _by_answer(rng, pairs, lambda pair: sum(it.shape in pair for it in items))
    return _said(f"How many {PLURALS[a]} and {PLURALS[b]} are there altogether?", str(total), _two_counts(items, a, b),
                 say_first)


def _more(rng, items, say_first=False):
    counts = {c: sum(it.colour == c for it in items) for c in COLOUR_NAMES}
    pairs = [(a, b) for a in COLOUR_NAMES for b in COLOUR_NAMES if a != b and counts[a] + counts[b] > 0]
    want = rng.random() < 0.5
    matching = [(a, b) for a, b in pairs if (counts[a] > counts[b]) == want]
    a, b = rng.choice(matching or pairs)
    return _said(f"Are there more {a} shapes than {b} shapes?", "yes" if counts[a] > counts[b] else "no",
                 _two_counts(items, a, b, key="colour"), say_first)


QUESTIONS = (_colour, _where, _what_at, _count_shape, _count_colour, _exists, _relation, _bigger, _is_colour, _is_at,
             _is_count, _sum, _more)
KINDS = tuple(ask.__name__.lstrip("_") for ask in QUESTIONS)  # the probe's names for them
# the same kinds with the subject drawn by answer (`conversation(balance_counts=True)`)
BALANCED = tuple({_count_shape: _count_shape_balanced, _count_colour: _count_colour_balanced,
                  _sum: _sum_balanced}.get(ask, ask) for ask in QUESTIONS)
# kinds some scenes cannot be asked (no shape alone of its kind, no two shapes apart or of different sizes)
SOMETIMES = ("colour", "relation", "bigger", "is_colour")


def parse_weights(text: str) -> dict[str, float]:
    """`relation=3,bigger=2` -> {kind: weight}; kinds not named keep weight 1. ValueError naming the bad part."""
    weights = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, _, value = part.partition("=")
        if kind not in KINDS:
            raise ValueError(f"unknown question kind {kind!r} in {part!r} (kinds: {', '.join(KINDS)})")
        try:
            weights[kind] = float(value)
        except ValueError:
            raise ValueError(f"{part!r}: the weight must be a number (kind=weight)") from None
        if weights[kind] < 0:
            raise ValueError(f"{part!r}: a weight cannot be negative")
    if weights and not any(weights.get(k, 1.0) > 0 for k in KINDS if k not in SOMETIMES):
        # a one-shape scene could then never be asked anything
        raise ValueError(f"give a weight above 0 to a kind every scene can be asked (not only {', '.join(SOMETIMES)})")
    return weights


def conversation(rng: random.Random, n_questions: int = 6, image_size: int = 96, max_items: int = 6,
                 caption_rate: float = 0.3, with_items: bool = False, weights: dict | None = None,
                 synth_scenes: float = 0.0, balance_counts: bool = False, say_first: bool = False) -> tuple:
    """One scene of 1..max_items shapes as chat messages (the image on the first user turn) and its PNG bytes:
    `n_questions` questions, after a caption in `caption_rate` of conversations. Mostly without: once the
    caption is in the context, every later answer can be copied from its words instead of read off the image.
    `with_items` adds the scene's items as a third element. `weights` ({kind: weight}, 1 where absent) draws the
    kinds unevenly, to spend a continued pre-training on the kinds its probe says are weakest. `synth_scenes` is the
    share of scenes drawn as a synthetic question's scene (`data_prep.synth`: up to 8 shapes, 1 to 3 of a kind or a
    colour), the scenes a critic's steps are about; only the scene, never a chain, step or label. `balance_counts`
    asks the count and total questions about a subject drawn by its answer, larger counts weighted up
    (`_by_answer`), so that a scene's 3s are asked too. `say_first` answers as `_said` says."""
    from stepcritic.data_prep.prompts import assistant_turn, user_turn, user_with_image

    if synth_scenes and rng.random() < synth_scenes:  # without it no draw: the default stream stays as it was
        from stepcritic.data_prep.synth import sample_question

        items = sample_question(rng).items
    else:
        items = place(rng, random_pairs(rng, rng.randint(1, max_items)))
    messages = []
    if rng.random() < caption_rate:
        messages = [user_with_image("Describe the image."), assistant_turn(caption(items))]
    for question, answer in ask_many(rng, items, n_questions, weights, balance_counts, say_first):
        messages += [user_turn(question) if messages else user_with_image(question), assistant_turn(answer)]
    return (messages, render_png(items, image_size)) + ((items,) if with_items else ())


def ask_many(rng: random.Random, items: list[Item], n: int, weights: dict | None = None, balance_counts: bool = False,
             say_first: bool = False) -> list[tuple[str, str]]:
    """`n` (question, answer) pairs about one scene, of kinds drawn as `conversation` says."""
    asked_all, mix = [], [weights.get(k, 1.0) for k in KINDS] if weights else None
    while len(asked_all) < n:
        # without weights, rng.choice: the draws (and so a base's data) stay as they were before weights existed
        kinds = BALANCED if balance_counts else QUESTIONS
        ask = rng.choices(kinds, weights=mix)[0] if mix else rng.choice(kinds)
        asked = ask(rng, items, say_first)
        if asked:
            asked_all.append(asked)
    return asked_all
