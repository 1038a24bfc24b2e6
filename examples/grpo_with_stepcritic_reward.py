"""GRPO of a policy with a StepCritic critic as one of its rewards: TRL's `GRPOTrainer`, a tiny policy, offline.

    python examples/grpo_with_stepcritic_reward.py --critic prm:runs/prm --out runs/grpo-example

The critic (`--critic`, any judge spec: a trained `prm:` folder, `reward:`, `hf:`, `openai:`) scores every sampled
answer step by step, and `StepReward` gives TRL the aggregate (`--aggregate`, the weakest step by default), next
to a small length reward. TRL logs each reward function under its name: `rewards/stepcritic_prm_min/mean` is the
critic's, `rewards/stepcritic_prm_min/steps` the mean number of steps it judged per answer.

The policy (`--policy`):
- `tiny-text` (default): a tiny causal language model with random weights and its tokenizer, built offline here
  (`train.tiny`'s `text` arch, a few seconds); the questions describe their scene in words;
- `tiny-vlm`: the tiny vision-language base shipped with the package; each question comes with a drawn picture in
  the `images` column, which TRL shows the policy and passes on to the critic, so the critic judges the answer
  against the same picture;
- a model folder: any causal LM checkpoint (text questions).
A random policy writes noise, and a critic trained for two steps scores it near 0.5: this shows the wiring, at the
size of a test. For real runs, start from a real policy and a trained critic, on a GPU.
"""

from __future__ import annotations

import argparse
import io
import os
import warnings

from stepcritic.rewards.core import AGGREGATES

# the policy is built or read locally: nothing is downloaded
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--critic", required=True, help="judge spec of the critic, e.g. prm:runs/prm")
    parser.add_argument("--policy", default="tiny-text",
                        help="tiny-text (built offline), tiny-vlm (the shipped tiny VLM base) or a model folder")
    parser.add_argument("--out", default="runs/grpo-stepcritic-example", help="output folder")
    parser.add_argument("--aggregate", default="min", choices=AGGREGATES,
                        help="how the critic's step scores become one reward")
    parser.add_argument("--steps", type=int, default=2, help="optimiser steps")
    parser.add_argument("--num-generations", type=int, default=2, help="answers sampled per question")
    parser.add_argument("--questions-per-step", type=int, default=2)
    parser.add_argument("--max-completion-length", type=int, default=24, help="tokens per sampled answer")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    return parser


def length_reward(completions, **kwargs) -> list[float]:
    """A second, trivial reward: longer answers, up to 200 characters, score higher."""
    from stepcritic.rewards.trl import completion_text

    return [min(len(completion_text(c)) / 200, 1.0) for c in completions]


def picture(colour: str, shape: str):
    """One big shape in the middle of the synthetic scenes' 3x3 grid (what the tiny VLM base was pre-trained on)."""
    from PIL import Image

    from stepcritic.data_prep.render import Item, render_png

    return Image.open(io.BytesIO(render_png([Item(shape, colour, "big", 1, 1)], image_size=96))).convert("RGB")


def dataset(with_images: bool):
    """One question per (colour, shape): asked of the picture, or of the scene described in words."""
    from datasets import Dataset

    from stepcritic.data_prep.render import COLOURS, SHAPES

    rows = []
    for colour in COLOURS:
        for shape in SHAPES:
            if with_images:
                rows.append({"prompt": [{"role": "user", "content": "What colour is the shape?"}],
                             "images": [picture(colour, shape)]})
            else:
                rows.append({"prompt": [{"role": "user", "content": f"A {colour} {shape} is drawn on white paper. "
                                                                   f"What colour is the {shape}?"}]})
    return Dataset.from_list(rows)


def load_policy(policy: str, out: str):
    """(model, processing class, whether it reads images) for `--policy`."""
    from stepcritic.train import modality
    from stepcritic.train.loading import load_critic

    if policy == "tiny-text":
        from stepcritic.train.tiny.model import build_tiny_critic

        path = build_tiny_critic(os.path.join(out, "policy-init"), arch="text")
    elif policy == "tiny-vlm":
        from stepcritic.train.loading import resolve_model

        path = resolve_model("stepcritic:tiny/base")
    elif os.path.isdir(policy):
        path = policy
    else:
        raise SystemExit(f"--policy: {policy!r} is neither tiny-text, tiny-vlm nor a model folder")
    model, processor = load_critic(path)
    processing_class = modality.trainer_processing_class(processor)
    # generation needs the prompts padded on the left (see train/grpo.py for the VLM case)
    getattr(processing_class, "tokenizer", processing_class).padding_side = "left"
    return model, processing_class, not isinstance(processor, modality.TextProcessor)


def main(args: argparse.Namespace):
    """Run GRPO and return the trainer (its `state.log_history` holds every reward's logged mean)."""
    from trl import GRPOConfig, GRPOTrainer

    from stepcritic.rewards import StepReward

    critic = StepReward(args.critic, aggregate=args.aggregate)
    model, processing_class, reads_images = load_policy(args.policy, args.out)
    config = GRPOConfig(
        output_dir=args.out, max_steps=args.steps, learning_rate=args.learning_rate, seed=args.seed,
        per_device_train_batch_size=args.questions_per_step * args.num_generations,
        num_generations=args.num_generations, max_completion_length=args.max_completion_length,
        temperature=1.0, beta=0.0, use_cpu=True, bf16=False, logging_steps=1, save_strategy="no",
        report_to="none", dataloader_num_workers=0,
        # named as transformers 5 names it (GRPOConfig's default sets the deprecated `gradient_checkpointing`); off:
        # at this size recomputing activations only costs time
        activation_checkpointing=False)
    # TRL 1.16 reads `model.is_gradient_checkpointing` before each generation, a name transformers 5 deprecated: the
    # warning is about TRL's code, not this script's, so only that one is hidden
    warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
    trainer = GRPOTrainer(model=model, reward_funcs=[critic, length_reward], args=config,
                          train_dataset=dataset(with_images=reads_images), processing_class=processing_class)
    trainer.train()
    for entry in trainer.state.log_history:
        if f"rewards/{critic.__name__}/mean" in entry:
            print(f"step {entry['step']}: critic reward {entry[f'rewards/{critic.__name__}/mean']:.4f}, "
                  f"length reward {entry['rewards/length_reward/mean']:.4f}")
    return trainer


if __name__ == "__main__":
    main(make_parser().parse_args())
