"""A note-writing PRM's scoring time per step: a long chain against a short one (the cost must stay linear).

    python -m stepcritic.bench.prm_notes [--model PATH] [--steps 10 200] [--note-tokens 8] [--rounds 3] [--threads 1]

A note-writing PRM (`data build --prm-notes`) writes a note before every verdict, so it is scored step by step; the
model's cache carries from one step to the next (`train.scoring`), so a step reads about the same number of tokens
wherever it lies in the chain. What still grows with the chain is each token's attention over the cached context: a
model of real width spends most of a token's time in its matrices, which do not grow; the tiny critic (width 192) spends
it in attention and cache copies once the context reaches thousands of tokens, so its ratio is the pessimistic one.
Each length is one synthetic chain cycled to that many steps and scored `--rounds` times; the report gives
the median seconds per step of each and the ratio of the longest to the shortest (1.0 is linear; the step limit
`train.limits.MAX_STEPS` bounds how long a chain may be). Without `--model`, the tiny critic stands in for a trained
notes PRM: its config is marked as writing notes, which is all the scorer reads to score that way. Notes are capped
at `--note-tokens` tokens so that every step writes about as much; pass the scorer's own cap (48) to time full notes.
"""

from __future__ import annotations

import argparse
import json
import platform

from stepcritic.bench.timing import median_of


def cycled_chain(steps: int) -> dict:
    """A synthetic chain whose steps repeat until there are `steps` of them (speed depends on the length only)."""
    from stepcritic.data_prep.synth import synthesize

    chain = synthesize(1, seed=0)[0]
    return dict(chain, chain_id=f"cycled-{steps}", steps=[dict(s) for s in (chain["steps"] * steps)[:steps]])


def notes_scorer(model_path: str | None, note_tokens: int | None):
    from stepcritic.train.loading import load_critic
    from stepcritic.train.scoring import PRMScorer
    from stepcritic.train.tiny.cache import tiny_critic_path

    model, processor = load_critic(model_path or tiny_critic_path(), dtype="float32", merged=True)
    if model_path is None:
        model.config.stepcritic_prm_notes = True
    scorer = PRMScorer(model, processor)
    if not scorer.notes:
        raise SystemExit(f"{model_path}: not a note-writing PRM (its config has no stepcritic_prm_notes)")
    if note_tokens:
        scorer.MAX_NOTE_TOKENS = scorer.MAX_CHECK_TOKENS = note_tokens
    return scorer


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                        platform.processor())
    except OSError:
        return platform.processor()


def has_avx512_bf16() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return "avx512_bf16" in f.read()
    except OSError:
        return False


def per_step(model_path: str | None, lengths: list[int], note_tokens: int | None, rounds: int) -> dict:
    import torch

    scorer = notes_scorer(model_path, note_tokens)
    tokenizer = scorer.processor.tokenizer
    scorer.score([cycled_chain(2)])  # warm-up: the first pass pays for lazy initialisation
    rows = {}
    for steps in lengths:
        chain = cycled_chain(steps)
        seconds = median_of(lambda chain=chain: scorer.score([chain]), rounds)
        written = sum(len(tokenizer.encode(note, add_special_tokens=False)) for note in scorer.last_notes[0])
        rows[steps] = {"seconds": round(seconds, 3), "ms_per_step": round(1000 * seconds / steps, 2),
                       "note_tokens_per_step": round(written / steps, 2)}
    short, long = rows[min(lengths)], rows[max(lengths)]
    return {"model": model_path or "tiny critic, marked as writing notes", "note_tokens": note_tokens,
            "timing": f"median of {rounds} rounds", "threads": torch.get_num_threads(), "cpu": cpu_name(),
            "avx512_bf16": has_avx512_bf16(), "chains": rows,
            "per_step_ratio": round(long["ms_per_step"] / short["ms_per_step"], 2)}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.bench.prm_notes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a note-writing PRM folder (default: the tiny critic, marked as one)")
    parser.add_argument("--steps", type=int, nargs="+", default=[10, 200], help="chain lengths (default 10 200)")
    parser.add_argument("--note-tokens", type=int, default=8,
                        help="most tokens per note (default 8; 0 keeps the scorer's own cap)")
    parser.add_argument("--rounds", type=int, default=3, help="timings per length, the median reported (default 3)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: the tiny model's matrices gain nothing from more, and on "
                             "shared cores spinning threads slow every step)")
    return parser


def main(argv=None) -> int:
    args = make_parser().parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    print(json.dumps(per_step(args.model, args.steps, args.note_tokens or None, args.rounds), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
