"""What a tiny critic's base has learnt to read off its images: held-out accuracy per kind of scene question.

    python -m stepcritic.experiments.base_probe --model DIR [--per-question 48] [--caption] [--scenes synth]
    python -m stepcritic.experiments.base_probe --model DIR --checks CHAINS_DIR [--limit 400]

Each question of `train.tiny.scene_qa` is asked about fresh scenes of 1-6 shapes (with --scenes synth: the scenes of
fresh standard-level synthetic questions, those the critic's steps are about, up to 8 shapes), alone with the image
(or, with --caption, after the gold caption, when the answer can be copied from the caption's words instead). An answer
counts when every one of its tokens is the model's argmax (teacher-forced). Yes/no checks are true half of the
time, so 0.5 is chance for them; a critic has to make exactly these checks against the picture.

With --checks, the questions are the step checks of synthetic chains (`meta.step_checks`, what `data build
--prm-notes check` writes): every question a chain's steps need, asked alone with the chain's image, scored the same
way and grouped by kind. These are harder than the random questions: they ask about the counts a question is built
on (1 to 3 of a kind, totals up to 6) in scenes of up to 8 shapes.
"""

from __future__ import annotations

import argparse
import json
import re

CHECK = re.compile(r"([^?]+\?) ([^.?]+)\.")
# a check question's kind, by its words (first match): the probe's names where the question is one of its kinds
CHECK_KINDS = (("altogether", "sum"), ("Are there more", "more"), ("shapes are there", "count_colour"),
               ("How many", "count_shape"), ("What colour", "colour"), ("Where is", "where"),
               ("Is there a", "exists"), ("bigger than", "bigger"), ("Is the", "relation"))


def check_kind(question: str) -> str:
    return next(kind for words, kind in CHECK_KINDS if words in question)


def check_probe(model, processor, chains, limit: int = 400, batch_size: int = 16) -> dict:
    """{kind: {"accuracy", "n"}} over the first `limit` check questions of `chains` (each asked once per scene)."""
    from trl.data_utils import prepare_multimodal_messages

    from stepcritic.data_prep.images import rgb_images
    from stepcritic.data_prep.prompts import assistant_turn, user_with_image
    from stepcritic.data_prep.schema import chain_meta
    from stepcritic.train.tiny.base_pretrain import answered

    asked, seen = [], set()
    for chain in chains:
        pairs = {qa for check in chain_meta(chain).get("step_checks") or [] if check for qa in CHECK.findall(check)}
        for question, answer in sorted(pairs):
            # the chains of a group share their scene and most checks: each is asked once per scene
            key = (chain.get("group_id") or chain["chain_id"], question.strip())
            if key not in seen:
                seen.add(key)
                asked.append((chain, question.strip(), answer))
        if len(asked) >= limit:
            break
    hits: dict[str, list[bool]] = {}
    for start in range(0, min(len(asked), limit), batch_size):
        batch = asked[start:min(start + batch_size, limit)]
        conversations = [prepare_multimodal_messages([user_with_image(q), assistant_turn(a)], images=rgb_images(c))
                         for c, q, a in batch]
        for (_, question, _), hit in zip(batch, answered(model, processor, conversations)):
            hits.setdefault(check_kind(question), []).append(hit)
    return {kind: {"accuracy": round(sum(h) / len(h), 3), "n": len(h)} for kind, h in sorted(hits.items())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.experiments.base_probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a tiny critic folder (e.g. a cached build with base steps)")
    parser.add_argument("--per-question", type=int, default=48)
    parser.add_argument("--caption", action="store_true", help="ask after the gold caption")
    parser.add_argument("--say-first", action="store_true",
                        help="answers first say what they are about and what they read (a base pre-trained with "
                             "base_pretrain --say-first): \"circle red\", \"circle blue no\"")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast (faster on CPUs with avx512_bf16)")
    parser.add_argument("--scenes", choices=("random", "synth"), default="random",
                        help="random: 1-6 shapes, as in pre-training (default); synth: the synthetic chains' scenes")
    parser.add_argument("--after", type=int, default=0, metavar="N",
                        help="ask each question after N other questions about its scene, answered right (a "
                             "critic's checks come that deep in its conversation)")
    parser.add_argument("--checks", metavar="CHAINS_DIR",
                        help="ask the step checks of these synthetic chains instead (e.g. a held-out synth folder)")
    parser.add_argument("--limit", type=int, default=400, help="--checks: questions asked at most (default 400)")
    args = parser.parse_args(argv)
    import torch

    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.base_pretrain import probe

    model, processor = load_critic(args.model)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
        if args.checks:
            from stepcritic.data_prep.schema import load_chains

            print(json.dumps(check_probe(model, processor, load_chains(args.checks), args.limit), indent=2))
            return 0
        print(json.dumps(probe(model, processor, args.per_question, args.caption, scenes=args.scenes,
                               say_first=args.say_first, after=args.after), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
