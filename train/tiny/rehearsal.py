"""The tiny base's own scene questions, written as rows a critic's training can rehearse (`rehearsal_path`).

    python -m stepcritic.train.tiny.rehearsal --out data/rehearsal [--rows 1600] [--seed 0]

Each row is one fresh scene of a synthetic question's kind (`scene_qa.conversation` with `synth_scenes=1`: the
scenes a critic's steps are about) and a few of the questions the shipped base was pre-trained on, answered as it
answers them (what it reads first, then the answer), drawn with the weights of its last pre-training phase.
Pre-training data, not critic data: no chain, step or judgement, and never a scene of the demo's held-out chains
(`base_pretrain.excluded_scenes`). Row k depends only on (seed, k), so fewer rows are a prefix of more.
"""

from __future__ import annotations

import argparse
import json
import os
import random

DEFAULT_ROWS = 1600
QUESTIONS = 6  # per row, as in pre-training


def base_settings() -> dict:
    """How the shipped base was pre-trained (its `stepcritic_base.json`): whether it says what it reads first, and
    the question weights of its last phase; the defaults of pre-training when the base is absent."""
    from stepcritic.train.tiny import shipped

    meta = shipped.TINY.folder / shipped.META
    settings = json.loads(meta.read_text()).get("settings", {}) if meta.is_file() else {}
    return {"say_first": bool(settings.get("say_first", True)), "weights": settings.get("question_weights") or ""}


def draw(seed: int, k: int, weights: dict | None, say_first: bool) -> tuple:
    """Row k's scene conversation: (messages, png bytes, items)."""
    from stepcritic.train.tiny import scene_qa

    rng = random.Random(f"stepcritic-rehearsal/{seed}/{k}")
    return scene_qa.conversation(rng, n_questions=QUESTIONS, caption_rate=0.0, with_items=True, weights=weights,
                                 synth_scenes=1.0, say_first=say_first)


def drawn(n: int, seed: int = 0, weights: str | None = None, say_first: bool | None = None):
    """The `n` scene conversations of rows 0..n-1 as (messages, png bytes, items), the held-out chains' scenes left
    out."""
    from stepcritic.train.tiny import base_pretrain, scene_qa

    settings = base_settings()
    weights = scene_qa.parse_weights(settings["weights"] if weights is None else weights) or None
    say_first = settings["say_first"] if say_first is None else say_first
    excluded = base_pretrain.excluded_scenes()
    k = 0
    while n > 0:
        messages, png, items = draw(seed, k, weights, say_first)
        k += 1
        if base_pretrain.scene_key(items) in excluded:
            continue
        n -= 1
        yield messages, png, items


def rows(n: int, seed: int = 0, weights: str | None = None, say_first: bool | None = None):
    """`n` rehearsal rows ({"messages", "images"})."""
    for messages, png, _ in drawn(n, seed, weights, say_first):
        yield {"messages": messages, "images": [{"bytes": png, "path": None}]}


def write(out: str, n: int = DEFAULT_ROWS, seed: int = 0, weights: str | None = None) -> dict:
    """Save `n` rows at `out` (a `train` split and `rehearsal.json`, what made them); returns that record."""
    from datasets import Dataset, DatasetDict, Features, Image, List, Value

    from stepcritic.data_prep import outputs

    text = {"type": Value("string"), "text": Value("string")}
    features = Features({"messages": List({"role": Value("string"), "content": List(text)}), "images": List(Image())})
    made = list(rows(n, seed, weights))
    record = {"rows": n, "seed": seed, "questions_per_row": QUESTIONS, **base_settings(),
              **({"weights": weights} if weights is not None else {})}
    with outputs.staged(out, True) as target:
        DatasetDict(train=Dataset.from_list(made, features=features)).save_to_disk(target)
        with open(os.path.join(target, "rehearsal.json"), "w") as f:
            json.dump(record, f, indent=2)
    return record


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m stepcritic.train.tiny.rehearsal",
                                               description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder (a recipe's rehearsal_path)")
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help=f"rows to write (default {DEFAULT_ROWS})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--question-weights", default=None,
                        help="question kinds drawn unevenly, e.g. bigger=3 (default: the shipped base's last phase)")
    return parser


def main(args: argparse.Namespace) -> int:
    if args.rows < 1:
        raise SystemExit(f"--rows must be at least 1, got {args.rows}")
    from stepcritic.train.tiny import scene_qa

    try:
        scene_qa.parse_weights(args.question_weights or "")
    except ValueError as error:
        raise SystemExit(f"--question-weights: {error}") from None
    record = write(args.out, args.rows, args.seed, args.question_weights)
    print(f"wrote {record['rows']} rehearsal rows of {QUESTIONS} scene questions -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(make_parser().parse_args()))
