"""What a tiny critic's base has learnt to read off its images: held-out accuracy per kind of scene question.

    python -m stepcritic.experiments.base_probe --model DIR [--per-question 48] [--caption]

Each question of `train.tiny.scene_qa` is asked about fresh scenes of 1-6 shapes, alone with the image (or, with
--caption, after the gold caption, when the answer can be copied from the caption's words instead). An answer
counts when every one of its tokens is the model's argmax (teacher-forced). Yes/no checks are true half of the
time, so 0.5 is chance for them; a critic has to make exactly these checks against the picture.
"""

from __future__ import annotations

import argparse
import json


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.experiments.base_probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a tiny critic folder (e.g. a cached build with base steps)")
    parser.add_argument("--per-question", type=int, default=48)
    parser.add_argument("--caption", action="store_true", help="ask after the gold caption")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast (faster on CPUs with avx512_bf16)")
    args = parser.parse_args(argv)
    import torch

    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.base_pretrain import probe

    model, processor = load_critic(args.model)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
        print(json.dumps(probe(model, processor, args.per_question, args.caption), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
