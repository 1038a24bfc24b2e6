"""Chains whose step labels live only in the picture: the easy signal of the learnability tests.

Every image is one plain colour, red or blue (half each), its shade jittered so that no two images are the
same and held-out images are new ones. A chain claims "The shapes are red." (or "... blue."), and the
claim is correct exactly when the picture has that colour. Every sentence is therefore correct for half
the images and wrong for the other half: the text alone predicts chance, a critic has to look.

Layouts, all from `easy_chains`:
- `claims=("red",)`: one chain per image, always the same sentence. The label is a function of the
  picture alone, which the tiny critic learns in a few dozen steps.
- `claims=("red", "blue")`: two chains per image, one true and one false (the pairs `outcome-rm` needs).
  Judging them needs text and picture together (an XOR): a pairwise loss, which compares the two chains
  of one picture, learns it in a few dozen steps; a PRM's per-step loss did not within 200.
- `n_steps=2`: a second step, "So the answer is red.", that rests on the first and is right or wrong with
  it, as errors propagate in real chains: a PRM that could see the gold verdict of step 1 would copy it.
"""

from __future__ import annotations

import io
import random

from stepcritic.data_prep import schema

COLOURS = {"red": (220, 30, 30), "blue": (30, 70, 220)}  # data_prep.render's red and blue
IMAGE_SIZE = 96  # the tiny critic's input size: nothing to resize
QUESTION = "What colour are the shapes?"

# A one-line critique prompt for `build_dataset(template=...)` and the `hf:` judge. The packaged one spends
# about 500 tokens on instructions that a model trained from scratch for a few seconds cannot read; at a
# tenth of the length each SFT/DPO/GRPO step costs a tenth. (The packaged PRM and outcome prompts, about
# 150 and 80 tokens with the image, are used as they are.)
CRITIQUE_TEMPLATE = """\
{{ question }}
{% for step in steps %}
Step {{ loop.index }}: {{ step }}
{% endfor %}
Critique each step as JSON.
"""


def plain_png(colour: str, rng: random.Random) -> bytes:
    from PIL import Image

    shade = tuple(min(255, max(0, c + rng.randint(-25, 25))) for c in COLOURS[colour])
    buf = io.BytesIO()
    Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), shade).save(buf, format="PNG")
    return buf.getvalue()


def claim_steps(claimed: str, true: str, n_steps: int) -> list[dict]:
    correct = claimed == true
    texts = [f"The shapes are {claimed}.", f"So the answer is {claimed}."][:n_steps]
    steps = []
    for i, text in enumerate(texts):
        step = {"text": text, "type": "description", "correct": correct, "premises": list(range(i)),
                "description_correctness": "correct" if correct else "unsupported", "description_relevance": "both"}
        if not correct:
            step.update(description_errors=["attribute"], explanations=[f"The shapes are {true}."])
        steps.append(step)
    return steps


def easy_chains(n_images: int, seed: int, claims: tuple[str, ...] = ("red",), n_steps: int = 1,
                label_noise: float = 0.0) -> list[dict]:
    """len(claims) validated canonical chains per image; image colours alternate, so they are balanced.

    `label_noise` is the share of images labelled by a coin flip instead of by their colour (so the label
    is right for 1 - label_noise / 2 of them): data for a critic that reads the picture but is unsure.
    """
    rng = random.Random(seed)
    chains = []
    for i in range(n_images):
        shown = tuple(COLOURS)[i % len(COLOURS)]
        true = rng.choice(tuple(COLOURS)) if rng.random() < label_noise else shown
        image = {"bytes": plain_png(shown, rng), "path": None}
        group = f"s{seed}-img{i}"  # one group per image: build splits by group, so test images are unseen
        for claimed in claims:
            chain = {"chain_id": f"{group}-{claimed}", "group_id": group, "source": "easy", "question": QUESTION,
                     "image": image, "steps": claim_steps(claimed, true, n_steps), "reference_answer": true,
                     "final_answer": None, "answer_correct": claimed == true, "category": "perception",
                     "meta": {}}
            chains.append(schema.validate_chain(chain, where=chain["chain_id"]))
    return chains
