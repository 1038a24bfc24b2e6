"""`stepcritic data {ingest,synth,build}`: the data stage's commands (stdlib-only imports at module top)."""

from __future__ import annotations

import argparse
import json
import sys

from stepcritic.data_prep.contract import KIND_NAMES as BUILD_KINDS
from stepcritic.data_prep.contract import KINDS, SPLITS, VERIFIER_LAYOUTS
from stepcritic.data_prep.ingest import FORMATS
from stepcritic.data_prep.labels import NEUTRAL_POLICIES, SOFT_THRESHOLD, STEP_TARGETS
from stepcritic.data_prep.synth import LEVELS
from stepcritic.policy.cli import add_label_parser, run_label


def _output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overwrite", action="store_true",
                   help="replace what --out already holds (only once the new output is complete); without it a "
                        "non-empty --out is refused")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar (there is none when stderr is not a terminal either)")


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="stepcritic data", description="Build StepCritic datasets.")
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION", required=True)

    p = sub.add_parser("ingest", help="convert annotated chains into the canonical chain dataset",
                       description="Convert annotated chains (MiCEval, VISCO, VisualProcessBench, stepwise PRM rows, "
                                   "Monte-Carlo scored steps in the VisualPRM400K layout, canonical jsonl) into a "
                                   "canonical chains dataset plus stats.json and a README card.",
                       epilog="example: stepcritic data ingest --format miceval "
                              "--input ../shared/data/miceval/dataset/MiCEval_Normal.jsonl --out data/miceval")
    p.add_argument("--format", required=True, choices=FORMATS, help="input format")
    p.add_argument("--input", required=True, help="input file (.jsonl, .json or .parquet)")
    p.add_argument("--image-root", default=None,
                   help="folder image paths are relative to "
                        "(default: the format's convention, e.g. the MiCEval release root)")
    p.add_argument("--out", required=True,
                   help="output folder for the chains dataset and stats.json (not the input's or the image root's)")
    p.add_argument("--on-error", choices=("fail", "skip"), default="fail",
                   help="fail: stop at the first bad record (default); skip: keep going and list every skipped record")
    p.add_argument("--num-proc", type=int, default=1,
                   help="worker processes that convert and check records, images included (default 1); the output "
                        "is the same for any number")
    p.add_argument("--soft-threshold", type=float, default=SOFT_THRESHOLD,
                   help="a step with a soft label (a Monte-Carlo score in [0, 1]) and no boolean label is correct when "
                        f"its score is above this (default {SOFT_THRESHOLD}: at least one sampled continuation reached "
                        "the right answer, the labels VisualPRM400K and Math-Shepherd were published with)")
    _output_options(p)

    p = sub.add_parser("synth", help="generate synthetic step-annotated chains (the offline default dataset)",
                       description="Render shape images and write labelled reasoning chains with injected errors.",
                       epilog="example: stepcritic data synth --n 2000 --seed 0 --out data/synth")
    p.add_argument("--n", type=int, default=1000, help="number of chains (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--image-size", type=int, default=96, help="image side in pixels (default 96)")
    p.add_argument("--level", choices=LEVELS, default="standard",
                   help="standard: 3-5 shapes per scene, every question kind (default); easy: 1-2 shapes, "
                        "perception questions only (what a from-scratch critic learns on a CPU)")
    p.add_argument("--error-rate", type=float, default=None,
                   help="mean chance that a step of a faulty chain goes wrong on its own (default about 0.3; the "
                        "per-template rates are rescaled to it, 0 gives clean chains only). Training data with more "
                        "wrong steps keeps a note-writing critic from copying a step's value into its note")
    p.add_argument("--fault-rates", default=None, metavar="TEMPLATE=RATE,...",
                   help="replace some step templates' own chance of going wrong, e.g. bigger=0.75 (size claims wrong "
                        "about half of the time, so that a claim's words say nothing about the sizes it claims)")
    p.add_argument("--out", required=True, help="output folder for the chains dataset")
    _output_options(p)

    p = sub.add_parser("build", help="build a training dataset (SFT, preference, reward) from canonical chains",
                       description=f"Build one training dataset kind, split by group_id into {' / '.join(SPLITS)}, "
                                   "with a dataset card and build_stats.json (its kind, read back by `stepcritic "
                                   "train`). Kinds and the training method each feeds: "
                                   + "; ".join(f"{k}: {'/'.join(v.methods)}" for k, v in KINDS.items()) + ".",
                       epilog="example: stepcritic data build --chains data/synth --kind critique-sft "
                              "--out data/critique-sft")
    p.add_argument("--chains", required=True, help="a canonical chains dataset folder (from ingest or synth) or .jsonl")
    p.add_argument("--kind", required=True, choices=BUILD_KINDS)
    p.add_argument("--out", required=True, help="output folder for the dataset (not the chains' folder)")
    p.add_argument("--test-fraction", type=float, default=0.1,
                   help="share of groups held out in the 'test' split, which recipes evaluate on (default 0.1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--template", default=None, help="a Jinja template file to use instead of the packaged one")
    p.add_argument("--pref-mix", default=None,
                   help='critique-pref corruption weights as JSON, e.g. \'{"reluctant": 2, "answer_flip": 1}\'')
    p.add_argument("--neutral", choices=NEUTRAL_POLICIES, default="skip",
                   help="steps rated neutral (VisualProcessBench's 0): skip (default; prm-sft keeps the step with no "
                        "loss on its judgement, kinds that need every verdict skip the chain), or count them as "
                        "correct or incorrect")
    p.add_argument("--step-targets", choices=STEP_TARGETS, default="hard",
                   help="prm-sft only: hard (default) trains on +/-; soft trains each step with a soft label towards "
                        "that probability of + (cross-entropy against the score)")
    p.add_argument("--verifier-layout", choices=VERIFIER_LAYOUTS, default="rows",
                   help="verifier-sft only: rows (default) is one single-turn row per task and step, each with the "
                        "chain's image; task is one conversation per chain and task, chain one conversation per chain "
                        "(the image once: MiCEval Normal writes 96 MB instead of 967 MB), asking the same questions "
                        "turn by turn. The conversation layouts have list columns tasks/labels/step_indices: "
                        "SFT trains on every answer, GRPO asks each turn's question on its own")
    p.add_argument("--prm-notes", nargs="?", const="rewrite", default=False,
                   choices=("rewrite", "check", "check-said", "claims-said"), metavar="STYLE",
                   help="prm-sft only: before each +/- the PRM writes a note; scoring then generates the note first. "
                        "rewrite (the default STYLE): the step as it should read (the step itself when correct, its "
                        "correction or else its first reference critique when not), scored by P(step as its note); "
                        "check: questions that check the step against the image, answered from it (the synthetic "
                        "chains' meta.step_checks: \"What colour is the cross? blue.\"), scored by the verdict; "
                        "check-said: the same, each answer after what it reads (\"What colour is the cross? cross "
                        "blue.\"), for a base pre-trained with --say-first; claims-said: what the step says, asked "
                        "yes/no and answered so (\"Is the cross blue? cross red no.\")")
    p.add_argument("--critique-notes", nargs="?", const="rewrite", default=False,
                   choices=("rewrite", "check", "check-said", "claims-said"), metavar="STYLE",
                   help="critique-sft / critique-pref only: every step of the critique first says what the image shows "
                        "about it under \"shows\", then its verdict. rewrite (the default STYLE): the step itself "
                        "when correct, its correction or else its first reference critique when not, judged with "
                        "hf:...,notes=true; check: the questions that check it, answered from the image (synthetic "
                        "chains), judged with hf:...,notes=check; check-said: the same, answered as a --say-first "
                        "base answers, judged with notes=check; claims-said: what the step says, asked yes/no and "
                        "answered so, judged with notes=check")
    p.add_argument("--num-proc", type=int, default=1,
                   help="worker processes that check the chains and make and encode the rows (default 1); the "
                        "dataset and build_stats.json are the same for any number")
    _output_options(p)
    add_label_parser(sub)
    return parser


SYNTH_SUMMARY = ("chains", "groups", "steps", "steps_incorrect", "step_error_rate", "chains_fully_correct",
                 "groups_identical_chains", "groups_without_faulty_chain")


def _summary(stats: dict, keys: tuple[str, ...]) -> str:
    return ", ".join(f"{k}={stats[k]}" for k in keys if k in stats)


def main(args: argparse.Namespace) -> int:
    """Run one data command. Bad input raises a `UserError`, which `stepcritic` prints as one line (exit 2).

    No command writes over its input, or over an earlier output without --overwrite, and each writes its output
    beside --out and renames it there once complete (`outputs.py`)."""
    import datasets

    # the command's own bar replaces theirs, which count the empty placeholder a save writes first ("0 examples")
    datasets.disable_progress_bars()
    progress = not args.quiet and sys.stderr.isatty()
    if args.data_command == "ingest":
        from stepcritic.data_prep.ingest import ingest, summary_lines

        stats = ingest(args.format, args.input, args.out, args.image_root, args.on_error,
                       log=lambda m: print(m, file=sys.stderr), soft_threshold=args.soft_threshold,
                       num_proc=args.num_proc, overwrite=args.overwrite, progress=progress)
        for line in summary_lines(stats, args.out):
            print(line)
        return 0
    if args.data_command == "synth":
        from stepcritic.data_prep.synth import check_options, parse_fault_rates, synthesize_to_disk

        check_options(args.n, args.image_size, args.level, error_rate=args.error_rate)
        rates = parse_fault_rates(args.fault_rates)
        stats = synthesize_to_disk(args.n, args.seed, args.out, image_size=args.image_size, level=args.level,
                                   error_rate=args.error_rate, overwrite=args.overwrite, progress=progress,
                                   fault_rates=rates)
        print(f"synthesised {_summary(stats, SYNTH_SUMMARY)} -> {args.out}")
        return 0
    if args.data_command == "build":
        from stepcritic.data_prep import outputs
        from stepcritic.data_prep.build import BuildError, build_dataset, check_options
        from stepcritic.data_prep.schema import load_chains
        from stepcritic.data_prep.sizes import size_line

        if not 0 < args.test_fraction < 1:
            raise BuildError(f"--test-fraction must be between 0 and 1 (the share of groups held out for the "
                             f"'test' split), got {args.test_fraction}")
        options = dict(template=args.template, pref_mix=args.pref_mix, neutral=args.neutral,
                       step_targets=args.step_targets,
                       prm_notes=True if args.prm_notes == "rewrite" else args.prm_notes,
                       verifier_layout=args.verifier_layout,
                       num_proc=args.num_proc,
                       critique_notes=True if args.critique_notes == "rewrite" else args.critique_notes)
        check_options(args.kind, args.test_fraction, **options)  # before reading any chain
        outputs.check_out(args.out, args.overwrite, {"--chains": args.chains, "--template": args.template})
        chains = load_chains(args.chains)
        stats = build_dataset(chains, args.kind, args.out, test_fraction=args.test_fraction, seed=args.seed,
                              overwrite=args.overwrite, allow_empty=False, progress=progress, **options)
        print(f"built {args.kind}: {json.dumps(stats['rows'])} -> {args.out}")
        print(size_line(stats, chains, args.chains, args.out))
        if stats["chains_skipped"].get("over_mix_quota"):
            print(f"note: {stats['chains_skipped']['over_mix_quota']} chains left out to keep the corruption mix "
                  "(see the card)")
        if stats["neutral"]["steps"]:
            neutral = stats["neutral"]
            print(f"note: {neutral['steps']} neutral steps, --neutral {neutral['policy']} (see the card)")
        if stats.get("explanations", {}).get("placeholder"):
            print(f"note: {stats['explanations']['placeholder']} incorrect steps have no reference critique; "
                  "their target explanation is a placeholder (see the card)")
        return 0
    if args.data_command == "label":
        return run_label(args)
    raise AssertionError(args.data_command)
