"""Captions and questions about rendered scenes: pre-training data for a vision-language base, not critic data.

Every real critic starts from a VLM that can already say what is in a picture; the offline tiny critic starts
from nothing. These conversations are the offline stand-in for that VLM's pre-training (LLaVA's caption and
visual-question stages): one rendered scene, a caption listing every cell, then short questions about colours,
positions, counts, kinds, relations and sizes, each answered from the scene. They never contain a reasoning
chain, a step or a correctness label, so a base trained on them has learnt to look, not to judge.

    conversation(rng) -> (messages, png_bytes)
"""

from __future__ import annotations

import random

from stepcritic.data_prep.render import CELL_NAMES, COLOURS, PLURALS, SHAPES, Item, place, random_pairs, render_png

COLOUR_NAMES = tuple(COLOURS)
AXES = {"horizontal": ("to the left of", "to the right of"), "vertical": ("above", "below")}


def caption(items: list[Item]) -> str:
    """Every occupied cell in reading order: "top left: a big red circle. centre: a small blue cross." """
    return " ".join(f"{it.cell}: a {it.size} {it.colour} {it.shape}." for it in items)


def _unique(items: list[Item], shape: str) -> bool:
    return sum(it.shape == shape for it in items) == 1


def _colour(rng, items):
    once = [it for it in items if _unique(items, it.shape)]
    if once:
        it = rng.choice(once)
        return f"What colour is the {it.shape}?", it.colour


def _where(rng, items):
    it = rng.choice(items)
    return f"Where is the {it.name}?", f"at the {it.cell}"


def _what_at(rng, items):
    row, col = rng.randrange(3), rng.randrange(3)
    found = [it for it in items if (it.row, it.col) == (row, col)]
    return (f"What is at the {CELL_NAMES[row][col]}?",
            f"a {found[0].size} {found[0].colour} {found[0].shape}" if found else "nothing")


def _count_shape(rng, items):
    shape = rng.choice(SHAPES)
    return f"How many {PLURALS[shape]} are there?", str(sum(it.shape == shape for it in items))


def _count_colour(rng, items):
    colour = rng.choice(COLOUR_NAMES)
    return f"How many {colour} shapes are there?", str(sum(it.colour == colour for it in items))


def _exists(rng, items):
    shape = rng.choice(SHAPES)
    return f"Is there a {shape} in the image?", "yes" if any(it.shape == shape for it in items) else "no"


def _relation(rng, items):
    axis = rng.choice(sorted(AXES))
    key = (lambda it: it.col) if axis == "horizontal" else (lambda it: it.row)
    pairs = [(a, b) for a in items for b in items if key(a) != key(b)]
    if pairs:
        a, b = rng.choice(pairs)
        word = rng.choice(AXES[axis])
        truth = AXES[axis][0] if key(a) < key(b) else AXES[axis][1]
        return f"Is the {a.name} {word} the {b.name}?", "yes" if word == truth else "no"


def _bigger(rng, items):
    pairs = [(a, b) for a in items for b in items if a.size != b.size]
    if pairs:
        a, b = rng.choice(pairs)
        return f"Is the {a.name} bigger than the {b.name}?", "yes" if a.size == "big" else "no"


def _is_colour(rng, items):
    once = [it for it in items if _unique(items, it.shape)]
    if once:
        it, colour = rng.choice(once), rng.choice(COLOUR_NAMES)
        return f"Is the {it.shape} {colour}?", "yes" if colour == it.colour else "no"


def _is_at(rng, items):
    it, row, col = rng.choice(items), rng.randrange(3), rng.randrange(3)
    return f"Is the {it.name} at the {CELL_NAMES[row][col]}?", "yes" if (it.row, it.col) == (row, col) else "no"


def _is_count(rng, items):
    shape, k = rng.choice(SHAPES), rng.randint(1, 3)
    plural = PLURALS[shape] if k > 1 else shape
    return f"{'Are there' if k > 1 else 'Is there'} {k} {plural}?", "yes" if sum(it.shape == shape for it in items) == k else "no"


def _sum(rng, items):
    a, b = rng.sample(SHAPES, 2)
    total = sum(it.shape in (a, b) for it in items)
    return f"How many {PLURALS[a]} and {PLURALS[b]} are there altogether?", str(total)


def _more(rng, items):
    c1, c2 = rng.sample(COLOUR_NAMES, 2)
    more = sum(it.colour == c1 for it in items) > sum(it.colour == c2 for it in items)
    return f"Are there more {c1} shapes than {c2} shapes?", "yes" if more else "no"


QUESTIONS = (_colour, _where, _what_at, _count_shape, _count_colour, _exists, _relation, _bigger, _is_colour, _is_at,
             _is_count, _sum, _more)


def conversation(rng: random.Random, n_questions: int = 6, image_size: int = 96,
                 max_items: int = 6) -> tuple[list[dict], bytes]:
    """One scene of 1..max_items shapes: [image] caption request, then `n_questions` questions, as chat messages
    (the image on the first user turn) and the scene's PNG bytes."""
    from stepcritic.data_prep.prompts import assistant_turn, user_turn, user_with_image

    items = place(rng, random_pairs(rng, rng.randint(1, max_items)))
    messages = [user_with_image("Describe the image."), assistant_turn(caption(items))]
    while len(messages) < 2 + 2 * n_questions:
        asked = rng.choice(QUESTIONS)(rng, items)
        if asked:
            messages += [user_turn(asked[0]), assistant_turn(asked[1])]
    return messages, render_png(items, image_size)
