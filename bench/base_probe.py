"""What a tiny critic's base has learnt to read off its images: held-out accuracy per kind of scene question.

    python -m stepcritic.bench.base_probe --model DIR [--per-question 48] [--caption]

Each question of `data_prep.scene_qa` is asked about fresh scenes of 1-6 shapes, alone with the image (or, with
--caption, after the gold caption, when the answer can be copied from the caption's words instead). An answer
counts when every one of its tokens is the model's argmax (teacher-forced). Yes/no checks are true half of the
time, so 0.5 is chance for them; a critic has to make exactly these checks against the picture.
"""

from __future__ import annotations

import argparse
import json
import random


def probe(model, processor, per_question: int = 48, caption: bool = False, seed: int = 123) -> dict:
    """{question kind: accuracy} on `per_question` fresh scenes each."""
    import torch
    from trl.data_utils import prepare_multimodal_messages

    from stepcritic.data_prep import scene_qa
    from stepcritic.data_prep.images import to_rgb
    from stepcritic.data_prep.prompts import assistant_turn, user_turn, user_with_image
    from stepcritic.data_prep.render import place, random_pairs, render_png
    from stepcritic.train.base_pretrain import encode

    rng, accuracy = random.Random(seed), {}
    model.eval()
    for ask in scene_qa.QUESTIONS:
        conversations = []
        while len(conversations) < per_question:
            items = place(rng, random_pairs(rng, rng.randint(1, 6)))
            asked = ask(rng, items)
            if not asked:
                continue
            question, answer = asked
            messages = ([user_with_image("Describe the image."), assistant_turn(scene_qa.caption(items)),
                         user_turn(question)] if caption else [user_with_image(question)])
            conversations.append(prepare_multimodal_messages(messages + [assistant_turn(answer)],
                                                             images=[to_rgb(render_png(items))]))
        batch = encode(processor, conversations)
        labels = batch.pop("labels")
        with torch.no_grad():
            predicted = model(**batch).logits[:, :-1].argmax(-1)
        gold = labels[:, 1:]
        hits = []
        for row in range(len(conversations)):
            last = _last_run((gold[row] != -100).nonzero().flatten().tolist())  # the answer turn (+ its end)
            hits.append(bool((predicted[row, last] == gold[row, last]).all()))
        accuracy[ask.__name__.lstrip("_")] = round(sum(hits) / len(hits), 3)
    return accuracy


def _last_run(positions: list[int]) -> list[int]:
    """The last run of consecutive positions: the final assistant turn's supervised tokens."""
    start = len(positions) - 1
    while start > 0 and positions[start - 1] == positions[start] - 1:
        start -= 1
    return positions[start:]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.bench.base_probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a tiny critic folder (e.g. a cached build with base steps)")
    parser.add_argument("--per-question", type=int, default=48)
    parser.add_argument("--caption", action="store_true", help="ask after the gold caption")
    args = parser.parse_args(argv)
    from stepcritic.train.loading import load_critic

    model, processor = load_critic(args.model)
    print(json.dumps(probe(model, processor, args.per_question, args.caption), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
