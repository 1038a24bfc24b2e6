"""Encoding PRM conversations with assistant-token masks, as TRL's collator does every training step:
transformers' own mask loop vs `train.fast_masks` (median of 5, same process).

    python -m stepcritic.bench.masks [--batch-size B]
"""

from __future__ import annotations

import argparse
import json

from stepcritic.bench.scoring import five_step_chains
from stepcritic.bench.timing import median_of


def assistant_masks(n_rows: int, rounds: int = 5) -> dict:
    """Encoding `n_rows` PRM conversations (5-step chains) with their assistant-token masks, as TRL's collator
    does every step: transformers' own mask loop vs `fast_masks` (median of `rounds`, same process)."""
    from transformers.processing_utils import ProcessorMixin
    from trl.data_utils import prepare_multimodal_messages

    from stepcritic.data_prep import prompts
    from stepcritic.data_prep.images import to_rgb
    from stepcritic.train import fast_masks
    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.cache import tiny_critic_path

    _, processor = load_critic(tiny_critic_path())
    conversations = [prepare_multimodal_messages(prompts.prm_messages(c), images=[to_rgb(c["image"])])
                     for c in five_step_chains(n_rows)]

    def encode():
        processor.apply_chat_template(conversations, tokenize=True, return_dict=True, return_tensors="pt",
                                      return_assistant_tokens_mask=True, processor_kwargs={"padding": True})

    fast_masks.install()
    fast, slow = ProcessorMixin._adjust_assistant_masks_indices, ProcessorMixin._slow_adjust_assistant_masks_indices
    seconds = {}
    for name, method in (("transformers", slow), ("fast_masks", fast)):
        ProcessorMixin._adjust_assistant_masks_indices = method
        seconds[name] = median_of(encode, rounds)
    ProcessorMixin._adjust_assistant_masks_indices = fast
    return {"rows": n_rows, "steps_per_row": 5, "timing": f"median of {rounds}",
            **{f"{k}_s": round(v, 4) for k, v in seconds.items()},
            "speedup": round(seconds["transformers"] / seconds["fast_masks"], 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.bench.masks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=8, help="PRM rows per batch")
    args = parser.parse_args(argv)
    print(json.dumps(assistant_masks(args.batch_size), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
