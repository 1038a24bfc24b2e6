"""`stepcritic generate` and `stepcritic data label`: their options and what they run (stdlib-only imports at module
top, so `--help` stays instant; `data_prep/cli.py` adds `label` to the data commands)."""

from __future__ import annotations

import argparse
import sys

from stepcritic import distributed

METHODS = ("mc", "binary")  # policy/label.py's, here without importing it


def _common(p: argparse.ArgumentParser, what: str, temperature: float, max_new_tokens: int) -> None:
    p.add_argument("--chains", required=True, help="a canonical chains folder (from ingest or synth) or .jsonl")
    p.add_argument("--temperature", type=float, default=temperature,
                   help=f"sampling temperature of the {what} (default {temperature:g}; wins over the spec's own)")
    p.add_argument("--max-new-tokens", type=int, default=max_new_tokens,
                   help=f"longest reply of the {what}, in tokens (default {max_new_tokens})")
    p.add_argument("--seed", type=int, default=0, help="seeds a local model's sampling and keys its saved answers")
    p.add_argument("--template", default=None,
                   help="the policy prompt: a packaged template (policy, the default; policy_brief, the question "
                        "alone, for a small policy trained on it) or a Jinja file; the one the policy was trained with")
    p.add_argument("--out", required=True, help="output chains folder; an unfinished run's folder is resumed")
    p.add_argument("--overwrite", action="store_true",
                   help="write a finished --out again (its saved answers are reused); without it one is refused")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar (there is none when stderr is not a terminal either)")


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """`stepcritic generate`."""
    p = parser or argparse.ArgumentParser(prog="stepcritic generate")
    p.description = ("Sample a policy's own chains for the questions of a chains folder: N per question, grouped "
                     "by question (group_id), cut into steps as the reward splitter cuts them, the answer read off "
                     "each and its outcome label from the gold answer; written as a chains folder. Every sample is "
                     "saved as it arrives: the same command run again after a kill asks only for what is missing.")
    p.epilog = ("example: stepcritic generate --policy hf:runs/policy --template policy_brief --chains data/synth "
                "--samples 4 --out data/policy-chains")
    p.add_argument("--policy", required=True, metavar="SPEC",
                   help="a generative model spec, as `stepcritic eval --judge` takes it: hf:MODEL_DIR, "
                        "vllm:MODEL_DIR, openai:MODEL,base_url=... or py:module.Class")
    p.add_argument("--samples", type=int, required=True, metavar="N", help="chains sampled per question")
    p.add_argument("--limit", type=int, default=None, help="the first N questions only")
    _common(p, "policy", 1.0, 256)
    return p


def add_label_parser(sub) -> None:
    """`stepcritic data label`, among the data commands."""
    p = sub.add_parser("label", help="label every step of chains by rollouts (Math-Shepherd, OmegaPRM)",
                       description="Label every step of chains without human labels: a completer writes the rest of "
                                   "each chain from a step prefix N times, and a step's soft label is the share of "
                                   "continuations that reach the gold answer (hard label: above 0). --method mc rolls "
                                   "out every prefix (Math-Shepherd, VisualPRM400K); binary searches for the first "
                                   "wrong step (OmegaPRM). The labels land in each step's soft_label and correct, so "
                                   "`data build --kind prm-sft` reads them; labels the chains had move to "
                                   "meta.true_labels, never seen by the labeller. Every rollout is saved as it "
                                   "arrives: a killed run resumes.",
                       epilog="example: stepcritic data label --chains data/policy-chains --completer hf:runs/policy "
                              "--template policy_brief --method mc --rollouts 8 --out data/policy-labelled")
    p.add_argument("--completer", required=True, metavar="SPEC",
                   help="a generative model spec that can go on writing a begun answer: hf:MODEL_DIR, vllm:MODEL_DIR, "
                        "openai:MODEL,base_url=URL,continues=true (a vLLM or SGLang server) or py:module.Class; "
                        "usually the policy itself")
    p.add_argument("--method", choices=METHODS, default="mc",
                   help="mc: every step's prefix (default); binary: binary search for the first wrong step")
    p.add_argument("--rollouts", type=int, default=8, metavar="N", help="continuations per prefix (default 8)")
    p.add_argument("--max-steps", type=int, default=None, metavar="K",
                   help="merge the steps beyond K into the K-th (VisualPRM400K: 12)")
    p.add_argument("--stop-after-zero", action="store_true",
                   help="mc: stop a chain at its first step scored 0; the steps after it are incorrect")
    p.add_argument("--rollout-budget", type=int, default=None, metavar="B",
                   help="binary: at most B rollouts per chain; a chain whose search needs more is left out (counted)")
    p.add_argument("--consensus", default=None, metavar="JUDGE",
                   help="keep only the chains whose first step JUDGE (any `stepcritic eval` judge spec) finds wrong "
                        "is the rollouts' first wrong step (Qwen2.5-Math-PRM's consensus filtering)")
    _common(p, "completer", 1.0, 128)


def main(args: argparse.Namespace) -> int:
    """Run `stepcritic generate`."""
    from stepcritic.policy.generate import generate

    progress = not args.quiet and sys.stderr.isatty()
    world = distributed.detect()
    with distributed.joined(world, "generate"):  # under torchrun / accelerate launch: this rank's questions
        stats = generate(args.chains, args.policy, args.out, args.samples, temperature=args.temperature,
                         max_new_tokens=args.max_new_tokens, seed=args.seed, template=args.template,
                         overwrite=args.overwrite, progress=progress, limit=args.limit, world=world)
    if stats is None:  # another rank than 0: rank 0 writes the folder
        return 0
    print(f"generated questions={stats['questions']}, samples={stats['samples']}, parsed={stats['parsed']}, "
          f"unparsed={stats['unparsed']} ({stats['answers_correct']} right answers, {stats['asked']} asked, "
          f"{stats['cached']} saved before) -> {args.out}")
    return 0


def run_label(args: argparse.Namespace) -> int:
    """Run `stepcritic data label`."""
    from stepcritic.policy.label import LabelSettings, label

    progress = not args.quiet and sys.stderr.isatty()
    settings = LabelSettings(method=args.method, rollouts=args.rollouts, max_steps=args.max_steps,
                             stop_after_zero=args.stop_after_zero, rollout_budget=args.rollout_budget, seed=args.seed)
    world = distributed.detect()
    with distributed.joined(world, "data label"):  # under torchrun / accelerate launch: this rank's questions
        stats = label(args.chains, args.completer, args.out, settings, temperature=args.temperature,
                      max_new_tokens=args.max_new_tokens, template=args.template, consensus=args.consensus,
                      overwrite=args.overwrite, progress=progress, world=world)
    if stats is None:  # another rank than 0: rank 0 writes the folder
        return 0
    r = stats["rollouts"]
    left = ", ".join(f"{k} {v}" for k, v in stats["left_out"].items() if v)
    print(f"labelled chains={stats['chains_out']} of {stats['chains_in']}, steps={stats['steps']} "
          f"({stats['steps_incorrect']} incorrect), rollouts={r['total']} ({r['per_chain']} per chain, "
          f"{r['per_step']} per step; {r['asked']} asked, {r['cached']} saved before)"
          f"{f', left out: {left}' if left else ''} in {stats['wall_seconds']} s -> {args.out}")
    return 0
