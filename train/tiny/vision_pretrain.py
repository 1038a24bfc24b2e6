"""A few seconds of supervised pre-training for the tiny critic's vision tower: the offline stand-in for the
pretrained CLIP/SigLIP encoder every real VLM starts from.

A randomly initialised tower feeds the language model image tokens whose content is a small wiggle on a large
constant (the position embeddings); a 2.7M-parameter language model trained from scratch never learns to read
them in a CPU-sized run. Measured on "What colour is the shape?" with one shape in a random cell: 0.23
accuracy (chance 0.25) after 300 SFT steps from a random tower, 1.00 after 300 steps from a pre-trained one.

The task: every image token of a rendered scene (one token per grid cell) is classified into that cell's
shape, colour and size (or "empty"), and its row and column, by linear heads that are thrown away afterwards. The
row and column heads matter: the language model's rotary positions are relative, so an image token only says
where it is if its own features do ("Where is the circle?": 0.26 after 300 SFT steps without them). Only the vision
tower and the projector are trained; the language model learns what the image tokens mean afterwards, in the base's
vision-language pre-training (`base_pretrain.py`) or from the critic data.
"""

from __future__ import annotations

import logging
import random

logger = logging.getLogger("stepcritic.train")

BATCH = 64
LEARNING_RATE = 2e-3
HEADS = ("shape", "colour", "size", "row", "column")


def draw_scenes(rng: random.Random, n: int) -> list:
    """The items of the next `n` scenes of 1-6 shapes drawn from `rng`."""
    from stepcritic.data_prep.render import place, random_pairs

    return [place(rng, random_pairs(rng, rng.randint(1, 6))) for _ in range(n)]


def scenes_seen(steps: int, seed: int = 0) -> list:
    """Every scene `pretrain_vision(..., steps, seed)` trains on, drawn again (its first batch, of one scene, is the
    first of these too)."""
    rng = random.Random(seed)
    return [items for _ in range(steps) for items in draw_scenes(rng, BATCH)]


def _scene_batch(rng: random.Random, processor, n: int):
    """n rendered scenes of 1-6 shapes as pixel values, and per-cell labels (cells, [shape, colour, size, row, col])."""
    import torch

    from stepcritic.data_prep.images import to_rgb
    from stepcritic.data_prep.render import COLOURS, GRID, SHAPES, SIZES, render_png

    colours = list(COLOURS)
    images, labels = [], torch.zeros(n, GRID * GRID, len(HEADS), dtype=torch.long)  # 0 = empty cell
    labels[..., 3] = torch.arange(GRID * GRID) // GRID
    labels[..., 4] = torch.arange(GRID * GRID) % GRID
    for b, items in enumerate(draw_scenes(rng, n)):
        images.append(to_rgb(render_png(items)))
        for it in items:
            labels[b, it.row * GRID + it.col, :3] = torch.tensor(
                [1 + SHAPES.index(it.shape), 1 + colours.index(it.colour), 1 + SIZES.index(it.size)]
            )
    return processor.image_processor(images, return_tensors="pt")["pixel_values"], labels


def cell_features(model, pixel_values, n_images: int):
    """Image tokens as the language model receives them, shaped (images, tokens, hidden)."""
    import torch

    features = model.model.get_image_features(pixel_values=pixel_values)
    features = getattr(features, "pooler_output", features)
    if isinstance(features, (list, tuple)):
        features = torch.stack(list(features))
    return features.reshape(n_images, -1, model.config.text_config.hidden_size)


def token_cells(n_tokens: int):
    """The grid cell of each image token, in the tower's row-major patch order, when each cell is a square of tokens
    (one token per cell with 32 px patches, a 2 x 2 square with 16 px patches)."""
    import torch

    from stepcritic.data_prep.render import GRID

    side = round((n_tokens / (GRID * GRID)) ** 0.5)
    if side < 1 or side * side * GRID * GRID != n_tokens:
        raise ValueError(f"vision pre-training needs a square of image tokens per grid cell; this model gives "
                         f"{n_tokens} per image (set patch_size to image_size / {GRID} or a divisor of it)")
    per_row = GRID * side
    token = torch.arange(n_tokens)
    return (token // per_row // side) * GRID + (token % per_row) // side


def pretrain_vision(model, processor, steps: int, seed: int = 0) -> dict:
    """Train `model`'s vision tower and projector in place; returns the last step's loss and the heads'
    per-cell accuracy on a batch of fresh scenes.

    Needs a square of image tokens per grid cell: one (the tiny LLaVA's default: 96 px images, 32 px patches) or
    more (16 px patches: four), each token then classified as its cell.
    """
    import torch

    from stepcritic.data_prep.render import COLOURS, GRID, SHAPES, SIZES

    rng = random.Random(seed)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    device = next(model.parameters()).device
    pixel_values, _ = _scene_batch(random.Random(seed), processor, 1)
    n_tokens = cell_features(model, pixel_values.to(device), 1).shape[1]
    cells = token_cells(n_tokens).to(device)

    hidden = model.config.text_config.hidden_size
    classes = (1 + len(SHAPES), 1 + len(COLOURS), 1 + len(SIZES), GRID, GRID)
    heads = torch.nn.ModuleList([torch.nn.Linear(hidden, n) for n in classes])
    heads.to(device)
    language = {id(p) for p in (*model.get_decoder().parameters(), *model.get_output_embeddings().parameters())}
    trained = [p for p in model.parameters() if id(p) not in language]  # vision tower + projector/connector
    optimizer = torch.optim.AdamW([*trained, *heads.parameters()], lr=LEARNING_RATE)
    model.train()
    for _ in range(steps):
        pixel_values, labels = _scene_batch(rng, processor, BATCH)
        pixel_values, labels = pixel_values.to(device), labels.to(device)
        features = cell_features(model, pixel_values, BATCH)
        logits = [head(features) for head in heads]
        labels = labels[:, cells]  # each token is labelled as its cell
        loss = sum(torch.nn.functional.cross_entropy(lg.flatten(0, 1), labels[..., k].flatten())
                   for k, lg in enumerate(logits))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():  # accuracy on fresh scenes, not on the last training batch
        pixel_values, labels = _scene_batch(rng, processor, BATCH)
        pixel_values, labels = pixel_values.to(device), labels.to(device)[:, cells]
        logits = [head(cell_features(model, pixel_values, BATCH)) for head in heads]
        accuracy = {name: float((lg.argmax(-1) == labels[..., k]).float().mean())
                    for k, (name, lg) in enumerate(zip(HEADS, logits))}
    torch.random.set_rng_state(generator_state)
    logger.info("vision pre-training: %d steps, loss %.4f, cell accuracy %s", steps, loss.item(), accuracy)
    return {"loss": float(loss.item()), "accuracy": accuracy}
