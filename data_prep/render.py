"""Scenes for the synthetic dataset: a few large, flat shapes on a white 3x3 grid, sampled and drawn.

Everything a synthetic step talks about (shape, colour, size, cell) is chosen so that a tiny vision
model at 64-128 px can see it: four silhouettes that differ in outline, four saturated colours far
apart in RGB, two sizes that differ by almost a factor of two, one shape per cell.
"""

from __future__ import annotations

import io
import itertools
from dataclasses import asdict, dataclass

SHAPES = ("circle", "square", "triangle", "cross")
PLURALS = {"circle": "circles", "square": "squares", "triangle": "triangles", "cross": "crosses"}
COLOURS = {"red": (220, 30, 30), "green": (20, 150, 40), "blue": (30, 70, 220), "yellow": (235, 185, 0)}
COLOUR_NAMES = tuple(COLOURS)
SIZES = ("big", "small")
GRID = 3
CELL_NAMES = (
    ("top left", "top middle", "top right"),
    ("middle left", "centre", "middle right"),
    ("bottom left", "bottom middle", "bottom right"),
)
# half-extent of a shape as a fraction of its cell; "small" must stay clearly visible at 64 px
_HALF_EXTENT = {"big": 0.42, "small": 0.24}
_GRID_LINE = (225, 225, 225)
# below this a small shape is under 4 px across (a cross's arms under 1.5 px): shapes no longer tell apart
MIN_IMAGE_SIZE = 24


# the words of a relation along each axis: (the first item's is less than the second's, greater)
AXES = {"horizontal": ("to the left of", "to the right of"), "vertical": ("above", "below")}


@dataclass(frozen=True)
class Item:
    """One shape in one grid cell. (shape, colour) is unique within a scene, so it names the item."""

    shape: str
    colour: str
    size: str
    row: int
    col: int

    @property
    def cell(self) -> str:
        return CELL_NAMES[self.row][self.col]

    @property
    def name(self) -> str:
        return f"{self.colour} {self.shape}"

    def as_dict(self) -> dict:
        return {**asdict(self), "cell": self.cell}


ALL_PAIRS = tuple(itertools.product(SHAPES, COLOURS))


def random_pairs(rng, k: int, shapes=SHAPES, colours=tuple(COLOURS), taken=()) -> list[tuple[str, str]]:
    """k distinct (shape, colour) pairs from the allowed ones, none of them in `taken`."""
    pool = [p for p in ALL_PAIRS if p[0] in shapes and p[1] in colours and p not in taken]
    return rng.sample(pool, k)


def place(rng, pairs: list[tuple[str, str]]) -> list[Item]:
    """Put each (shape, colour) in its own random cell with a random size, in reading order."""
    cells = rng.sample(range(GRID * GRID), len(pairs))
    items = [Item(shape, colour, rng.choice(SIZES), cell // GRID, cell % GRID)
             for (shape, colour), cell in zip(pairs, cells)]
    return sorted(items, key=lambda it: (it.row, it.col))


def _draw_item(draw, item: Item, cell_px: float) -> None:
    cx, cy = (item.col + 0.5) * cell_px, (item.row + 0.5) * cell_px
    r = _HALF_EXTENT[item.size] * cell_px
    fill = COLOURS[item.colour]
    if item.shape == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
    elif item.shape == "square":
        draw.rectangle((cx - 0.85 * r, cy - 0.85 * r, cx + 0.85 * r, cy + 0.85 * r), fill=fill)
    elif item.shape == "triangle":
        draw.polygon([(cx, cy - r), (cx + r, cy + 0.8 * r), (cx - r, cy + 0.8 * r)], fill=fill)
    elif item.shape == "cross":
        arm = r / 3
        draw.rectangle((cx - r, cy - arm, cx + r, cy + arm), fill=fill)
        draw.rectangle((cx - arm, cy - r, cx + arm, cy + r), fill=fill)
    else:
        raise ValueError(f"unknown shape {item.shape!r}")


def render_png(items: list[Item], image_size: int = 96) -> bytes:
    """The scene as PNG bytes (deterministic: same items and size give the same bytes)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (image_size, image_size), "white")
    draw = ImageDraw.Draw(image)
    cell_px = image_size / GRID
    # faint cell borders make "top left" / "centre" easy to read off without adding clutter
    for k in range(1, GRID):
        at = round(k * cell_px)
        draw.line((at, 0, at, image_size), fill=_GRID_LINE)
        draw.line((0, at, image_size, at), fill=_GRID_LINE)
    for item in items:
        _draw_item(draw, item, cell_px)
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()
