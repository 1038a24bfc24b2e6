"""Judging 5-step chains: the PRM scorer's one forward pass vs the same model writing a full JSON critique.

    python -m stepcritic.bench.scoring [--chains N] [--batch-size B] [--model PATH]

Generation is greedy and exactly as long as the longest gold critique. Reports chains/s for both (best of 3).
"""

from __future__ import annotations

import argparse
import json

from stepcritic.bench.timing import best_of


def five_step_chains(n: int) -> list[dict]:
    """Synthetic chains, each cut or cycled to exactly 5 steps (speed only depends on the length)."""
    from stepcritic.data_prep.synth import synthesize

    chains = synthesize(n, seed=0)
    return [dict(c, steps=[dict(s) for s in (c["steps"] * 5)[:5]]) for c in chains[:n]]


def prm_vs_generate(model_path: str | None, n_chains: int, batch_size: int, rounds: int = 3) -> dict:
    import torch
    from trl.data_utils import prepare_multimodal_messages

    from stepcritic.data_prep import prompts
    from stepcritic.data_prep.images import to_rgb
    from stepcritic.train.scoring import PRMScorer
    from stepcritic.train.tiny.cache import tiny_critic_path

    path = model_path or tiny_critic_path()
    scorer = PRMScorer.from_pretrained(path, batch_size=batch_size)
    model, processor = scorer.model, scorer.processor
    chains = five_step_chains(n_chains)
    critique_tokens = max(len(processor.tokenizer.encode(prompts.critique_target(c))) for c in chains) + 1

    def generate_all():
        processor.tokenizer.padding_side = "left"  # every prompt ends where generation starts
        for start in range(0, len(chains), batch_size):
            batch = chains[start:start + batch_size]
            messages = [prepare_multimodal_messages(prompts.critique_messages(c), images=[to_rgb(c["image"])])
                        for c in batch]
            inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                   return_dict=True, return_tensors="pt",
                                                   processor_kwargs={"padding": True})
            with torch.no_grad():
                # min_new_tokens: a random model may stop early; a trained critic writes the whole critique
                model.generate(**inputs, max_new_tokens=critique_tokens, min_new_tokens=critique_tokens,
                               do_sample=False)

    scorer.score(chains[:batch_size])  # warm-up
    prm_seconds = best_of(lambda: scorer.score(chains), rounds)
    generate_seconds = best_of(generate_all, rounds)
    return {"model": path, "chains": len(chains), "steps_per_chain": 5, "batch_size": batch_size,
            "critique_tokens_generated": critique_tokens,
            "prm_chains_per_s": round(len(chains) / prm_seconds, 2),
            "generate_chains_per_s": round(len(chains) / generate_seconds, 2),
            "speedup": round(generate_seconds / prm_seconds, 1), "timing": f"best of {rounds} rounds",
            "threads": torch.get_num_threads()}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.bench.scoring", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="PRM folder (default: the tiny critic)")
    parser.add_argument("--chains", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    return parser


def main(argv=None) -> int:
    args = make_parser().parse_args(argv)
    print(json.dumps(prm_vs_generate(args.model, args.chains, args.batch_size), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
