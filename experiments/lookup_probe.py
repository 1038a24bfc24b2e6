"""Which look-ups can the tiny language model learn, and how fast? A rerunnable diagnostic, not a test.

Trains a fresh tiny model (random language model, vision tower pre-trained as in every tiny build) on one kind of
scene question (`train/tiny/scene_qa.py`: "Is there a circle in the image?", "What colour is the square?"...) over
scenes of 2 to 4 shapes, and prints the held-out exact-match accuracy of its answers as it goes. `--scene text`
gives the scene as its caption in words instead of a picture: the same look-up, with nothing to read off an image;
`--scene text-all` names all nine cells, the empty ones too, so that the words hold as many places as the picture.
`--induction-steps N` first trains N steps of next-token prediction on word lists said twice ("red circle top
blue red circle top blue", `train/tiny/scene_qa.repeated_words`), the classic task on which a transformer learns to
find an earlier copy of the current word; it shows whether that ability is what the look-up is waiting for.

    python -m stepcritic.experiments.lookup_probe --question exists --steps 800
    python -m stepcritic.experiments.lookup_probe --question exists --steps 800 --scene text
    python -m stepcritic.experiments.lookup_probe --question colour --steps 800
    python -m stepcritic.experiments.lookup_probe --question exists --steps 600 --scene text --induction-steps 300
    python -m stepcritic.experiments.lookup_probe --question exists --steps 1300 --induction-steps 300 --align-steps 200

`--align-steps N` then trains the projector alone for N steps to hand the language model each image token as the sum
of the word embeddings that name its cell and content (`alignment.py`, LLaVA's first stage), so that a
word's earlier "copy" can be an image token. `--tokens-per-cell 4` (16 px patches) gives each grid cell a 2 x 2 square
of image tokens, each aligned to one word (where, size, colour, shape), as a caption's tokens are.

`--scene words` is the alignment made perfect: no picture, each image token is exactly the sum of the current word
embeddings of its cell's words (with `--tokens-per-cell 4`, one word each; a token with no word is a zero vector).
It asks whether the look-up is slow because of the picture or because of the form of its tokens (the form:
docs/tiny-critic.md).
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m stepcritic.experiments.lookup_probe",
                                               description=__doc__.splitlines()[0])
    parser.add_argument("--question", default="exists", help="a question kind of scene_qa (exists, colour, where...)")
    parser.add_argument("--scene", choices=("image", "text", "text-all", "describe", "words"), default="image",
                        help="image: the picture; text: its caption in the prompt instead; text-all: a caption of "
                             "all nine cells, the empty ones holding nothing; describe: the picture, and "
                             "the answer starts by describing it (the caption, then the answer); words: the image "
                             "tokens are the exact word embeddings of what each cell shows")
    parser.add_argument("--echo", action="store_true",
                        help="the answer first repeats the question's last word, its subject: \"What colour is the "
                             "circle?\" is answered \"circle red\": the colour is predicted right after the shape "
                             "to look for (use with --question colour)")
    parser.add_argument("--steps", type=int, default=800, help="training steps on the question (batch 16)")
    parser.add_argument("--induction-steps", type=int, default=0, help="steps on repeated word lists first")
    parser.add_argument("--align-steps", type=int, default=0,
                        help="then steps that pull image tokens towards the words of their cell (the projector alone)")
    parser.add_argument("--keep-aligned", type=float, default=0.0, metavar="WEIGHT",
                        help="while training on the question, add the alignment loss times WEIGHT (image scenes)")
    parser.add_argument("--freeze-words", action="store_true",
                        help="freeze the word embeddings (and the tied output layer) once the question steps start, so "
                             "that the image tokens' alignment to them cannot drift")
    parser.add_argument("--silent-empty", action="store_true",
                        help="with --tokens-per-cell 4, align an empty cell's three content tokens to zero instead of "
                             "leaving them free")
    parser.add_argument("--tokens-per-cell", type=int, choices=(1, 4), default=1,
                        help="image tokens per grid cell: 1 (32 px patches, the tiny default) or 4 (16 px patches), "
                             "each of the four then aligned to one word: where, size, colour, shape")
    parser.add_argument("--items", type=int, nargs=2, default=(2, 4), metavar=("MIN", "MAX"), help="shapes a scene")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="where the fresh tiny model is built (default: a temporary one)")
    return parser


def conversations(ask, rng: random.Random, n: int, items: tuple, scene_as: str,
                  scenes: list | None = None, echo: bool = False) -> list:
    """`n` single questions of one kind, each with its scene as a picture or as its caption (`--scene`); the scenes'
    items are appended to `scenes` when given. With `echo` each answer starts with the question's last word."""
    from trl.data_utils import prepare_multimodal_messages

    from stepcritic.data_prep.images import to_rgb
    from stepcritic.data_prep.render import place, random_pairs, render_png
    from stepcritic.train.tiny.scene_qa import caption

    out = []
    while len(out) < n:
        scene = place(rng, random_pairs(rng, rng.randint(*items)))
        asked = ask(rng, scene)
        if not asked:
            continue
        question, answer = asked
        if echo:
            answer = f"{question.split()[-1].rstrip('?')} {answer}"
        if scenes is not None:
            scenes.append(scene)
        if scene_as == "describe":  # look first, in words the model writes itself; then answer from them
            answer = f"{caption(scene)} {answer}"
        answer_turn = {"role": "assistant", "content": [{"type": "text", "text": answer}]}
        if scene_as in ("text", "text-all"):  # no image token at all: the chat template of a text-only conversation
            said = caption(scene) if scene_as == "text" else every_cell(scene)
            out.append([{"role": "user", "content": [{"type": "text", "text": f"{said} {question}"}]}, answer_turn])
        else:
            out.append(prepare_multimodal_messages(
                [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}, answer_turn],
                images=[to_rgb(render_png(scene))]))
    return out


def every_cell(items: list) -> str:
    """The caption of all nine cells in reading order, as the picture has them: "top left: nothing. top middle: a
    big red circle. ..." A look-up in it is a search among nine places, as in the picture."""
    from stepcritic.data_prep.render import CELL_NAMES, GRID

    shown = {(it.row, it.col): f"a {it.size} {it.colour} {it.shape}" for it in items}
    return " ".join(f"{CELL_NAMES[r][c]}: {shown.get((r, c), 'nothing')}." for r in range(GRID) for c in range(GRID))


def encode(processor, convs: list, scene_as: str, scenes: list | None = None) -> dict:
    """Tokenised batch with `labels` on the answers; with `--scene words` it keeps the pictures' `words` (each image
    token's, `alignment.image_words`) for `model_inputs`, which embeds them with the current word table."""
    import torch

    from stepcritic.train.tiny.base_pretrain import encode as encode_with_image

    if scene_as in ("image", "describe"):
        return encode_with_image(processor, convs)
    if scene_as == "words":
        from stepcritic.train.tiny.alignment import image_words

        batch = encode_with_image(processor, convs)
        del batch["pixel_values"]  # the picture is replaced by its words
        image_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
        per_image = int((batch["input_ids"][0] == image_id).sum())
        return {**batch, "words": image_words(processor.tokenizer, scenes, per_image)}
    batch = processor.tokenizer.apply_chat_template(convs, tokenize=True, return_dict=True, return_tensors="pt",
                                                    return_assistant_tokens_mask=True, padding=True)
    mask = torch.as_tensor(batch.pop("assistant_masks")).bool()
    return {**batch, "labels": batch["input_ids"].masked_fill(~mask, -100)}


def model_inputs(model, batch: dict) -> dict:
    """The batch as the model takes it: with `words`, each image token replaced by the sum of the word embeddings it
    stands for (the table as it is now, so that the picture keeps up with the words as they train)."""
    from stepcritic.train.tiny.alignment import summed_words

    if "words" not in batch:
        return batch
    table = model.get_input_embeddings().weight
    embeds = table[batch["input_ids"]]
    tokens = summed_words(table, batch["words"])  # (images, image tokens, hidden)
    slots = (batch["input_ids"] == model.config.image_token_index)[..., None]
    return {"inputs_embeds": embeds.masked_scatter(slots, tokens.to(embeds.dtype)),
            "attention_mask": batch["attention_mask"], "labels": batch["labels"]}


def exact_match(model, batch: dict) -> float:
    """Share of held-out answers whose every token is the model's first choice (teacher-forced)."""
    import torch

    model.eval()
    with torch.no_grad():
        inputs = {k: v for k, v in model_inputs(model, batch).items() if k != "labels"}
        predicted = model(**inputs).logits[:, :-1].argmax(-1)
    model.train()
    gold = batch["labels"][:, 1:]
    kept = gold != -100
    return float(((predicted == gold) | ~kept).all(-1).float().mean())


def main(args: argparse.Namespace) -> list[dict]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from stepcritic.train import archs
    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny import scene_qa
    from stepcritic.train.tiny.alignment import alignment_loss, image_words
    from stepcritic.train.tiny.base_pretrain import repeated_word_batch
    from stepcritic.train.tiny.model import build_tiny_critic

    torch.set_num_threads(args.threads)
    ask = getattr(scene_qa, "_" + args.question, None)
    if ask not in scene_qa.QUESTIONS:
        names = ", ".join(scene_qa.KINDS)
        raise SystemExit(f"--question {args.question!r} is not a scene question; choose one of {names}")
    out = args.out or tempfile.mkdtemp(prefix="lookup-probe-")
    model, processor = load_critic(build_tiny_critic(os.path.join(out, "init"), vision_pretrain_steps=400,
                                                     patch_size=32 if args.tokens_per_cell == 1 else 16))
    shown: list = []
    held_out = encode(processor, conversations(ask, random.Random(999), 128, tuple(args.items), args.scene, shown,
                                               args.echo), args.scene, shown)
    archs.freeze_vision_tower(model)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=args.learning_rate, betas=(0.9, 0.98))
    torch.manual_seed(0)
    model.train()
    start, rows = time.perf_counter(), []
    aligned = args.induction_steps + args.align_steps

    def align(pixel_values, scenes):
        words = image_words(processor.tokenizer, scenes, 9 * args.tokens_per_cell)
        return alignment_loss(model, pixel_values, words, args.silent_empty)
    for step in range(aligned + args.steps):
        rng = random.Random(f"lookup-probe/{step}")
        induction = step < args.induction_steps
        if induction:
            loss = model(**repeated_word_batch(processor.tokenizer, rng, 16)).loss
        elif step < aligned:  # scenes as pictures, whatever --scene says: this stage trains the projector
            scenes = []
            batch = encode(processor, conversations(ask, rng, 16, tuple(args.items), "image", scenes), "image")
            loss = align(batch["pixel_values"], scenes)
        else:
            if step == aligned and args.freeze_words:  # AdamW skips a parameter that gets no gradient
                model.get_input_embeddings().weight.requires_grad_(False)
            shown = []
            asked = conversations(ask, rng, 16, tuple(args.items), args.scene, shown, args.echo)
            batch = encode(processor, asked, args.scene, shown)
            loss = model(**model_inputs(model, batch)).loss
            if args.keep_aligned and "pixel_values" in batch:  # the words move as they train: keep the picture on them
                loss = loss + args.keep_aligned * align(batch["pixel_values"], shown)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        if (step + 1) % args.eval_every == 0:
            stage = "repeated words" if induction else "alignment" if step < aligned else args.question
            rows.append({"step": step + 1, "stage": stage,
                         "loss": round(loss.item(), 3), "accuracy": round(exact_match(model, held_out), 3),
                         "seconds": round(time.perf_counter() - start)})
            print(rows[-1], flush=True)
    print(f"\n{args.question}, scene as {args.scene}, {args.items[0]}-{args.items[1]} shapes, batch 16:")
    print("| step | trained on | loss | held-out accuracy |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['step']} | {r['stage']} | {r['loss']} | {r['accuracy']:.3f} |")
    return rows


if __name__ == "__main__":
    main(make_parser().parse_args())
