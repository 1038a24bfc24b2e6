"""LLaVA's first stage for the tiny base: image tokens pulled towards the word embeddings of what they show.

A fresh tiny language model learns to find a named shape among tokens that each hold one word, with nothing at the
empty places, as a short caption has them (docs/tiny-critic.md). An image token that reads like such a
word is found the same way; one that reads like nothing the model has seen is not. So each image token gets a target:

- one token per grid cell (32 px patches): the sum of the embeddings of the words that name the cell (" top",
  " left") and what is there (" big", " red", " circle"), `cell_words`;
- four tokens per cell (16 px patches, a 2 x 2 square): one idea each, as a caption's words are: where the cell is,
  then the size, the colour and the shape there, and nothing when the cell is empty, `word_per_token`.

The loss is a squared distance relative to the target's size, so 1.0 is as far as a zero vector. The word embeddings
are the target, not trained by it; `silent_empty` also pulls the tokens that have no word to zero.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def _word(tokenizer, w: str) -> int:
    return tokenizer.encode(" " + w, add_special_tokens=False)[0]


def cell_words(tokenizer, scenes: list) -> "torch.Tensor":
    """Per image and grid cell, the ids of the words that name where it is and, when occupied, what is there: shaped
    (images, cells, 5), -100 where there is no word."""
    import torch

    from stepcritic.data_prep.render import CELL_NAMES, GRID

    out = torch.full((len(scenes), GRID * GRID, 5), -100, dtype=torch.long)
    for b, items in enumerate(scenes):
        shown = {(it.row, it.col): (it.size, it.colour, it.shape) for it in items}
        for row in range(GRID):
            for col in range(GRID):
                ids = [_word(tokenizer, w) for w in (*CELL_NAMES[row][col].split(), *shown.get((row, col), ()))]
                out[b, row * GRID + col, :len(ids)] = torch.tensor(ids)
    return out


def word_per_token(tokenizer, scenes: list) -> "torch.Tensor":
    """With four image tokens per cell, the words each token stands for: the top-left one where the cell is (" top",
    " left"), the other three the size, colour and shape there (-100 when the cell is empty). Shaped (images, tokens,
    2), tokens in the tower's row-major patch order."""
    import torch

    from stepcritic.data_prep.render import CELL_NAMES
    from stepcritic.train.tiny.vision_pretrain import token_cells

    per_cell = cell_words(tokenizer, scenes)
    names = [[_word(tokenizer, w) for w in name.split()] for row in CELL_NAMES for name in row]
    cells = token_cells(4 * per_cell.shape[1])
    per_row = 2 * round(per_cell.shape[1] ** 0.5)  # tokens in a row of the patch grid
    out = torch.full((len(scenes), len(cells), 2), -100, dtype=torch.long)
    for t, cell in enumerate(cells.tolist()):
        side = (t // per_row % 2) * 2 + t % per_row % 2  # place in the cell's square: 0 top left ... 3 bottom right
        if side == 0:
            out[:, t, :len(names[cell])] = torch.tensor(names[cell])
        else:
            out[:, t, 0] = per_cell[:, cell, len(names[cell]) + side - 1]
    return out


def image_words(tokenizer, scenes: list, tokens_per_image: int) -> "torch.Tensor":
    """The alignment targets' word ids for a model that gives `tokens_per_image` image tokens (9 or 36)."""
    from stepcritic.data_prep.render import GRID

    if tokens_per_image == GRID * GRID:
        return cell_words(tokenizer, scenes)
    if tokens_per_image == 4 * GRID * GRID:
        return word_per_token(tokenizer, scenes)
    raise ValueError(f"alignment needs 1 or 4 image tokens per grid cell; this model gives {tokens_per_image} "
                     f"per image")


def summed_words(table, words) -> "torch.Tensor":
    """Per image token, the sum of the embeddings (`table`) of its word ids (`words`, -100 where there is none)."""
    return (table[words.clamp(min=0)] * (words != -100)[..., None]).sum(-2)


def alignment_loss(model, pixel_values, words, silent_empty: bool = False) -> "torch.Tensor":
    """Mean relative squared distance between each image token, as the projector hands it to the language model, and
    the sum of its words' embeddings, over the tokens that have words; with `silent_empty`, over every token, those
    without words pulled to zero (scaled like an average worded token), so that an empty place says nothing."""
    import torch

    from stepcritic.train.tiny.vision_pretrain import cell_features

    features = cell_features(model, pixel_values, words.shape[0])  # (images, tokens, hidden)
    target = summed_words(model.get_input_embeddings().weight.detach(), words)
    has = (words != -100).any(-1)
    scale = (target ** 2).sum(-1)
    if silent_empty:
        scale = torch.where(has, scale, scale[has].mean())
    distance = ((features - target) ** 2).sum(-1) / scale.clamp(min=1e-12)
    return distance.mean() if silent_empty else distance[has].mean()
