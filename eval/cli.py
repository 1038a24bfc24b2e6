"""`stepcritic eval`: score judges on a chains dataset and write predictions, metrics, a report and plots.

Only the standard library is imported here (the runner's and the matchers' top levels are stdlib-only too:
they give the task and matcher names), so `--help` is instant; datasets, numpy and the judges load in `main`.
"""

from __future__ import annotations

import argparse
import os

from stepcritic.eval.matchers import MATCHERS
from stepcritic.eval.runner import TASKS, EvalError

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
"""


class ListJudges(argparse.Action):
    """`--list-judges`: print the judge kinds and exit, like --help (no other option needed)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from stepcritic.eval.judges.registry import describe_kinds

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
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS), metavar="TASK",
                        help=f"which evaluations to run, from {', '.join(TASKS)} (default: all)")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="judge only the first N chains")
    parser.add_argument("--matcher", default="lexical", choices=MATCHERS,
                        help="explanation matcher for explanation F1: token overlap (default) or MiniLM "
                             "embeddings (needs the `embed` extra)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument("--list-judges", action=ListJudges, help="list the judge kinds and exit")
    return parser


def main(args: argparse.Namespace) -> int:
    """Run the evaluation. Bad input raises `EvalError`, which `stepcritic` prints as one line (exit 2)."""
    if args.limit is not None and args.limit < 1:
        raise EvalError("--limit must be at least 1")
    if not os.path.exists(args.chains):  # checked before the slow imports below, for a fast answer
        raise EvalError(f"chains not found: {args.chains}")
    from stepcritic.eval.runner import build_judge, evaluate

    judges = []
    try:
        for spec in args.judges:
            judges.append(build_judge(spec))  # one at a time, so `finally` closes those already built
        evaluate(args.chains, judges, args.out, tasks=args.tasks, limit=args.limit, matcher=args.matcher,
                 progress=not args.no_progress)
    except EvalError as e:
        if os.path.isdir(os.path.join(args.out, "cache")):
            raise EvalError(f"{e} (finished judgments are kept in the cache: rerun the same command to resume)") from e
        raise
    finally:
        for judge in judges:
            judge.close()
    print(f"wrote {os.path.join(args.out, 'report.md')}")
    return 0
