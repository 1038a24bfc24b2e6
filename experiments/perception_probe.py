"""Can the tiny critic learn to read its image at all? A rerunnable diagnostic, not a test.

Trains the tiny critic with SFT on one visual question, "What colour is the <shape>?", over rendered scenes of
`k` shapes (the asked shape occurs once), and reports exact-match accuracy on held-out scenes. With k = 1 the
answer only needs the image tokens to carry colour; with k >= 2 the language model must also find the right
token (bind shape to colour), which is what judging a synthetic step needs. Each row is run once from a tower
that is random and once from one given `--vision-steps` of pre-training (see `train/tiny/vision_pretrain.py`).

    python -m stepcritic.experiments.perception_probe --items 1 3 --steps 300
    python -m stepcritic.experiments.perception_probe --items 3 --steps 300 --text   # the same lookup, in words
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
from importlib.resources import files


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m stepcritic.experiments.perception_probe",
                                               description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[1, 3], help="shapes per scene, one run each")
    parser.add_argument("--steps", type=int, default=300, help="SFT steps per run (batch 8)")
    parser.add_argument("--vision-steps", type=int, default=200, help="vision pre-training steps of the 2nd run")
    parser.add_argument("--n-test", type=int, default=200)
    parser.add_argument("--pretrained-only", action="store_true", help="skip the random-tower run")
    parser.add_argument("--text", action="store_true",
                        help="control: describe the scene in the prompt's text and show a blank image instead")
    parser.add_argument("--out", default=None, help="working folder (default: a temporary one)")
    return parser


def colour_questions(k: int, n: int, seed: int, as_text: bool = False):
    """A dataset of n single-turn conversations asking the colour of a shape that occurs once in the scene;
    `as_text` puts the scene into the prompt as words ("top left: red circle.") over a blank image."""
    from datasets import Dataset
    from PIL import Image

    from stepcritic.data_prep.images import to_rgb
    from stepcritic.data_prep.render import place, random_pairs, render_png

    rng, rows = random.Random(seed), []
    while len(rows) < n:
        items = place(rng, random_pairs(rng, k))
        shapes = [it.shape for it in items]
        once = [it for it in items if shapes.count(it.shape) == 1]
        if not once:
            continue
        target = rng.choice(once)
        asked = f"What colour is the {target.shape}?"
        if as_text:
            asked = "Scene: " + " ".join(f"{it.cell}: {it.colour} {it.shape}." for it in items) + " " + asked
        question = [{"type": "image", "text": None}, {"type": "text", "text": asked}]
        rows.append({"messages": [{"role": "user", "content": question},
                                  {"role": "assistant", "content": [{"type": "text", "text": target.colour}]}],
                     "images": [Image.new("RGB", (96, 96), "white") if as_text
                                else to_rgb(render_png(items))]})
    return Dataset.from_list(rows)


def accuracy(model_dir: str, test) -> float:
    import torch
    from trl.data_utils import prepare_multimodal_messages

    from stepcritic.train.loading import load_critic

    model, processor = load_critic(model_dir)
    model.eval()
    hits = 0
    for row in test:
        conversation = prepare_multimodal_messages(row["messages"][:1], images=row["images"])
        inputs = processor.apply_chat_template([conversation], add_generation_prompt=True, tokenize=True,
                                               return_dict=True, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=6, do_sample=False)
        said = processor.tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        hits += said.strip() == row["messages"][1]["content"][0]["text"]
    return hits / len(test)


def main(args: argparse.Namespace) -> list[dict]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from datasets import DatasetDict

    from stepcritic.train.config import parse_recipe
    from stepcritic.train.run import train

    out = args.out or tempfile.mkdtemp(prefix="perception-probe-")
    recipe_path = str(files("stepcritic.recipes").joinpath("tiny", "critique-sft.yaml"))
    results = []
    for k in args.items:
        data = os.path.join(out, f"colour-k{k}")
        DatasetDict(train=colour_questions(k, args.steps * 8, seed=0, as_text=args.text)).save_to_disk(data)
        test = colour_questions(k, args.n_test, seed=1, as_text=args.text)
        for vision_steps in ((args.vision_steps,) if args.text or args.pretrained_only else (0, args.vision_steps)):
            run_dir = os.path.join(out, f"k{k}-vision{vision_steps}")
            train(parse_recipe(recipe_path, {
                "dataset_path": data, "output_dir": run_dir, "max_steps": args.steps, "save_strategy": "no",
                "model_name_or_path": f"stepcritic:tiny/llava,vision_pretrain_steps={vision_steps}",
                "freeze_vision_tower": vision_steps > 0,
                "report_to": "none", "disable_tqdm": True, "logging_steps": max(args.steps // 5, 1)}))
            results.append({"items": k, "scene_as_text": args.text, "vision_pretrain_steps": vision_steps,
                            "sft_steps": args.steps, "accuracy": accuracy(run_dir, test), "chance": 0.25})
            print(results[-1], flush=True)
    print("\n| shapes per scene | scene given as | vision pre-training steps | SFT steps | held-out accuracy |")
    print("|---|---|---|---|---|")
    for r in results:
        given = "text" if r["scene_as_text"] else "image"
        print(f"| {r['items']} | {given} | {r['vision_pretrain_steps']} | {r['sft_steps']} | {r['accuracy']:.2f} |")
    return results


if __name__ == "__main__":
    main(make_parser().parse_args())
