"""`stepcritic eval`: score judges on a chains dataset and write predictions, metrics, a report and plots.

Only the standard library loads with this module (the eval modules it imports are stdlib-only at their top too),
so `--help` is instant; datasets, numpy and the judges' libraries load when the job runs.
"""

from __future__ import annotations

import argparse
import os

from stepcritic import distributed
from stepcritic.eval.best_of_n import DEFAULT_MAX_SUBSETS
from stepcritic.eval.cache import saved_sizes
from stepcritic.eval.config import EvalConfig
from stepcritic.eval.errors import EvalError, FailedRequests
from stepcritic.eval.judge_matcher import build as build_matcher
from stepcritic.eval.judges.registry import build_judge, describe_kinds
from stepcritic.eval.judges.rpts_scorer import RPTSScorerJudge
from stepcritic.eval.matchers import MATCHERS
from stepcritic.eval.metrics import DEFAULT_RPTS_LAMBDA, DEFAULT_RPTS_THRESHOLD
from stepcritic.eval.pairwise import DEFAULT_SELECTOR as PAIRWISE_DEFAULT
from stepcritic.eval.pairwise import SELECTORS as PAIRWISE_SELECTORS
from stepcritic.eval.rpts import Settings
from stepcritic.eval.rpts_tree import CLUE_MATCHERS
from stepcritic.eval.runner import DEFAULT_TASKS, TASKS, evaluate
from stepcritic.eval.sweep import DEFAULT_DEV_FRACTION, DEFAULT_SEED
from stepcritic.eval.tasks import check_options as check_task_options

EPILOG = """\
judge specs (repeat --judge to compare judges side by side):
  always-correct                 every step judged correct (baseline)
  random,rate=0.3,seed=0         each step judged incorrect with probability `rate` (baseline)
  majority                       the majority label of the data (baseline)
  py:package.module.Class[,k=v]  any Judge subclass importable from PYTHONPATH
  --list-judges shows every kind (trained models, prompted VLMs, OpenAI-compatible APIs, ...).

Re-running with the same arguments resumes: judgments already in OUT/cache/ are reused, only the
missing ones are made. Changing a judge's spec changes its fingerprint and re-judges only that judge.
The report in OUT covers every judge whose cache there holds these chains, not only this command's.

Choice ranking uses each judge's chain score; a judge without one is scored by the fraction of
steps it judged correct. --tasks verifier asks MiCEval's nine verifier questions of every judge that
can answer them (generative judges, each as itself in mode=verifier); the others show "–".
--tasks correction asks a corrector (--corrector SPEC, else each generative judge itself) for the answer
after the gold critique and after each judge's own; --tasks best-of-n asks nothing new.
"""


class ListJudges(argparse.Action):
    """`--list-judges`: print the judge kinds and exit, like --help (no other option needed)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(describe_kinds())
        parser.exit()


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="stepcritic eval",
        description="Score judges (trained, prompted, API, baselines) on chains and write a report.")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("--chains", required=True, metavar="PATH",
                        help="chains dataset folder (saved by `stepcritic data`) or canonical .jsonl file")
    parser.add_argument("--judge", required=True, action="append", dest="judges", metavar="SPEC",
                        help="a judge spec; repeat for several judges")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output folder: predictions.jsonl, metrics.json, report.md, plots/, cache/")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(DEFAULT_TASKS), metavar="TASK",
                        help=f"which evaluations to run, from {', '.join(TASKS)} (default: "
                             f"{' '.join(DEFAULT_TASKS)}; verifier, nine more prompts per step, only on request)")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="judge only the first N chains")
    parser.add_argument("--matcher", default="lexical", choices=MATCHERS, metavar="lexical|embedding|judge:SPEC",
                        help="explanation matcher for explanation F1: token overlap (default), MiniLM embeddings "
                             "(needs the `embed` extra), or judge:SPEC, VISCO's LLM judge (any generative judge spec; "
                             "replies cached in OUT/cache/matches/)")
    parser.add_argument("--corrector", metavar="SPEC",
                        help="--tasks correction: the generative judge that revises answers after a critique, for "
                             "every judge (default: each generative judge corrects its own critiques)")
    parser.add_argument("--sweep-dev", type=float, default=DEFAULT_DEV_FRACTION, metavar="FRACTION",
                        help=f"threshold sweep: the share of questions whose chains choose the best-F1 threshold, "
                             f"the rest scoring it (default {DEFAULT_DEV_FRACTION})")
    parser.add_argument("--sweep-seed", type=int, default=DEFAULT_SEED, metavar="N",
                        help=f"threshold sweep: the seed of the question split (default {DEFAULT_SEED})")
    parser.add_argument("--bon-subsets", type=int, default=DEFAULT_MAX_SUBSETS, metavar="K",
                        help=f"best-of-n: N-subsets per question, all when there are at most K, else K drawn with a "
                             f"fixed seed (default {DEFAULT_MAX_SUBSETS})")
    parser.add_argument("--pairwise-score", default=PAIRWISE_DEFAULT, choices=PAIRWISE_SELECTORS,
                        help=f"pairwise: the score a judge that scores chains prefers a response by: its chain score, "
                             f"or its step scores' min, mean or last, as best-of-n aggregates them (default "
                             f"{PAIRWISE_DEFAULT}); a generative judge is asked in both orders instead")
    rpts = parser.add_argument_group("RPTS (--tasks rpts; docs/methods.md)")
    rpts.add_argument("--tree-builder", metavar="SPEC",
                      help="a generative judge spec that restates chains without premises as RPTS trees (cached); "
                           "without it such chains get no RPTS")
    rpts.add_argument("--rpts-scorer", metavar="SPEC",
                      help="a generative judge spec asked whether each step follows from its premises (RPTS's "
                           "scorer), reported as the judge rpts-scorer:SPEC")
    rpts.add_argument("--rpts-lambda", type=float, default=DEFAULT_RPTS_LAMBDA, metavar="L",
                      help=f"weight decay per tree level away from h_f, in (0, 1] (default {DEFAULT_RPTS_LAMBDA})")
    rpts.add_argument("--rpts-hf", default="final", metavar="H",
                      help="the tree height weighted most: a positive integer, or final (default: the height of "
                           "each chain's final step)")
    rpts.add_argument("--rpts-threshold", type=float, default=DEFAULT_RPTS_THRESHOLD, metavar="T",
                      help=f"the filter: a right answer whose RPTS is below T is dropped (default "
                           f"{DEFAULT_RPTS_THRESHOLD})")
    rpts.add_argument("--rpts-clues", default="off", choices=CLUE_MATCHERS,
                      help="score conclusions read off the image by agreement with the data's reference clues "
                           "(meta.clues) instead of the judge (default off)")
    parser.add_argument("--allow-failures", action="store_true",
                        help="report even when some requests got no answer (connection errors, timeouts, HTTP errors "
                             "after the retries): the chains and questions they leave unjudged are left out of every "
                             "judge's metrics and named in the report (default: stop with exit 2; a rerun asks them "
                             "again)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="ask up to N judges at once, each in a worker process with its share of the cores: a "
                             "small local critic keeps about one core busy (default 1)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument("--list-judges", action=ListJudges, help="list the judge kinds and exit")
    return parser


def rpts_settings(args: argparse.Namespace):
    """RPTS's options, checked before anything slow is loaded."""
    if not 0 < args.rpts_lambda <= 1:
        raise EvalError(f"--rpts-lambda must be in (0, 1], got {args.rpts_lambda:g}")
    if not 0 <= args.rpts_threshold <= 1:
        raise EvalError(f"--rpts-threshold must be in [0, 1], got {args.rpts_threshold:g}")
    h_f = None if args.rpts_hf == "final" else int(args.rpts_hf) if args.rpts_hf.isdigit() else 0
    if h_f is not None and h_f < 1:
        raise EvalError(f"--rpts-hf must be a positive integer or final, got {args.rpts_hf!r}")
    return Settings(lam=args.rpts_lambda, h_f=h_f, threshold=args.rpts_threshold, clues=args.rpts_clues)


def check_options(args: argparse.Namespace) -> None:
    """The options of the threshold sweep and best-of-n, and that each option serving one task alone comes with
    that task (`tasks.check_options`, as `runner.make_plan` checks a config), before anything slow is loaded."""
    if not 0 < args.sweep_dev < 1:
        raise EvalError(f"--sweep-dev must be between 0 and 1 (a share of the questions), got {args.sweep_dev:g}")
    if args.bon_subsets < 1:
        raise EvalError(f"--bon-subsets must be at least 1, got {args.bon_subsets}")
    given = {"--corrector": args.corrector, "--tree-builder": args.tree_builder, "--rpts-scorer": args.rpts_scorer}
    check_task_options(args.tasks, {flag for flag, value in given.items() if value})


def main(args: argparse.Namespace) -> int:
    """Run the evaluation. Bad input raises `EvalError`, which `stepcritic` prints as one line (exit 2)."""
    if args.limit is not None and args.limit < 1:
        raise EvalError("--limit must be at least 1")
    if args.jobs < 1:
        raise EvalError("--jobs must be at least 1")
    if not os.path.exists(args.chains):  # checked before any judge is built, for a fast answer
        raise EvalError(f"chains not found: {args.chains}")
    settings = rpts_settings(args)
    check_options(args)
    world = distributed.detect()
    with distributed.joined(world, "eval"):  # under torchrun / accelerate launch: this rank's share of the chains
        _evaluate(args, settings, world)
    if world.main:
        print(f"wrote {os.path.join(args.out, 'report.md')}")
    return 0


def _evaluate(args: argparse.Namespace, settings, world: distributed.World) -> None:
    judges, builder, corrector, matcher = [], None, None, None
    before = None  # the cache's files when judging began
    try:
        for spec in args.judges:
            judges.append(build_judge(spec))  # one at a time, so `finally` closes those already built
        if args.rpts_scorer:
            inner = build_judge(args.rpts_scorer)
            try:
                judges.append(RPTSScorerJudge(inner))
            except ValueError as e:
                inner.close()
                raise EvalError(str(e)) from None
        if args.tree_builder:
            builder = build_judge(args.tree_builder)
        if args.corrector:
            corrector = build_judge(args.corrector)
        matcher = build_matcher(args.matcher, args.out, not args.no_progress)  # a bad judge: spec fails before judging
        before = saved_sizes(args.out)
        evaluate(EvalConfig(chains=args.chains, judges=judges, out_dir=args.out, tasks=args.tasks, limit=args.limit,
                            matcher=matcher, progress=not args.no_progress, rpts=settings, tree_builder=builder,
                            corrector=corrector, sweep={"dev_fraction": args.sweep_dev, "seed": args.sweep_seed},
                            best_of_n={"max_subsets": args.bon_subsets}, allow_failures=args.allow_failures,
                            pairwise={"score": args.pairwise_score}, jobs=args.jobs, world=world))
    except FailedRequests:
        raise  # its message says what a rerun does
    except EvalError as e:
        # only when this command saved something does a rerun go on from further than this one started
        if before is not None and any(size > before.get(path, 0) for path, size in saved_sizes(args.out).items()):
            raise EvalError(f"{e} (the judgments finished before the error are saved: rerun the same command to "
                            "resume)") from e
        raise
    finally:
        for judge in judges + [j for j in (builder, corrector, matcher) if j is not None and hasattr(j, "close")]:
            judge.close()
