"""Seconds a training step of one of the demo's stages takes on a finished demo's own rows, under settings to compare.

    python -m stepcritic.bench.demo_stage --demo demo_out [--stage prm|writer] [--steps 150] [--rounds 2] \
        [--variant KEY=VALUE[,KEY=VALUE ...]] ...

Each round trains `--steps` steps of the stage as the demo trains it (its recipe and plan: `demo.prm_overrides`, or
`demo.writer_overrides` from the demo's PRM) once per variant, each in a child `stepcritic train` writing into a
temporary folder; the variants alternate within a round, so that a slow spell of a shared machine falls on all of them.
A variant is recipe settings on top of the demo's (`--variant dataloader_num_workers=0`; none: the stage as the demo
runs it). Reports per variant the trainer's own training time (`train_runtime`: loading and saving left out), as
seconds a step, median over the rounds and each round, with the final training loss: the same batches give the same
loss, so a setting that changes the loss changes what is learnt, not only how fast. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.bench.demo_stage", description=__doc__.splitlines()[0])
    parser.add_argument("--demo", required=True, help="a finished `stepcritic demo --out` folder")
    parser.add_argument("--stage", choices=("prm", "writer"), default="prm")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                        help="recipe settings to time against the others (repeatable; default: the demo's own)")
    return parser


def parse_variant(text: str) -> dict:
    """`a=1,b=x` as {"a": "1", "b": "x"}: the values go to `stepcritic train` as given, which checks them."""
    pairs = [part.split("=", 1) for part in text.split(",") if part]
    if not pairs or any(len(pair) != 2 or not pair[0] for pair in pairs):
        raise SystemExit(f"--variant {text!r}: expected KEY=VALUE[,KEY=VALUE]")
    return dict(pairs)


def stage_command(demo_dir: str, stage: str, steps: int, variant: dict, output_dir: str) -> list[str]:
    """`stepcritic train` arguments for `steps` steps of the demo's stage into `output_dir`, with `variant` on top."""
    from stepcritic import demo

    plan = demo.finished_plan(demo_dir)
    base_kind, data = demo.BASES[plan["base"]], os.path.join(demo_dir, "data")
    if stage == "prm":
        recipe, overrides = "prm", demo.prm_overrides(plan, plan["seed"], base_kind, data, output_dir)
    else:
        prm = os.path.join(demo_dir, "models", "prm")
        prm = os.path.join(prm, "merged") if os.path.isdir(os.path.join(prm, "merged")) else prm
        recipe = "critique-sft"
        overrides = demo.writer_overrides(plan, plan["seed"], base_kind, data, output_dir, prm)
    overrides.update(variant, max_steps=steps, logging_steps=steps)
    return ["train", "--config", f"{base_kind.folder}/{recipe}", *(f"--{k}={v}" for k, v in overrides.items())]


def train_once(argv: list[str], output_dir: str) -> tuple[float, float]:
    """(seconds a step, final training loss) of one child run, from its trainer state."""
    subprocess.run([sys.executable, "-m", "stepcritic", *argv], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(output_dir, "trainer_state.json")) as f:
        state = json.load(f)
    last = state["log_history"][-1]
    return last["train_runtime"] / state["global_step"], last["train_loss"]


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    variants = [parse_variant(v) for v in args.variant] or [{}]
    runs: list[list[tuple[float, float]]] = [[] for _ in variants]
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for i, variant in enumerate(variants):
                out = os.path.join(tmp, f"v{i}-r{round_}")
                runs[i].append(train_once(stage_command(args.demo, args.stage, args.steps, variant, out), out))
                print(f"round {round_ + 1}, variant {i + 1}: {runs[i][-1][0]:.3f} s a step", flush=True)
    first = statistics.median(t for t, _ in runs[0])
    print(f"\n{args.stage} stage of {args.demo}, {args.steps} steps a run, {args.rounds} rounds; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print("| variant | s a step (median) | each round | final loss | ratio to the first |\n|---|---|---|---|---|")
    for text, results in zip(args.variant or ["the demo's"], runs):
        median = statistics.median(t for t, _ in results)
        print(f"| {text} | {median:.3f} | {', '.join(f'{t:.3f}' for t, _ in results)} | "
              f"{', '.join(f'{loss:.4f}' for _, loss in results)} | {median / first:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
