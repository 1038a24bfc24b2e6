"""The `stepcritic` command: one subcommand per stage, each owned by its stage.

Stage CLI modules import only the standard library at module level, so `--help` is instant;
torch/transformers load inside `main` when a command actually runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module exposing `make_parser(parser)` and `main(args)`
COMMANDS = {
    "data": ("stepcritic.data_prep.cli",
             "build datasets: ingest annotated chains, synthesise chains, build SFT/preference/reward data"),
    "train": ("stepcritic.train.cli", "train a critic (sft, dpo, prm, reward, grpo) from a YAML recipe"),
    "eval": ("stepcritic.eval.cli", "score judges (trained, prompted, API, baselines) on chains and write a report"),
    "generate": ("stepcritic.policy.cli", "sample a policy's own chains for the questions of a chains folder"),
    "search": ("stepcritic.policy.search_cli",
               "test-time search: best-of-N, weighted, beam and DVTS with a critic, as accuracy against N"),
    "serve": ("stepcritic.serve.cli", "serve a judge's step scores over HTTP, batched across requests (FastAPI)"),
    "demo": ("stepcritic.demo",
             "the offline end-to-end job: synthetic data -> trained tiny critic -> evaluation report"),
}


def make_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only `command`'s own module is imported (or all, when None)."""
    parser = argparse.ArgumentParser(
        prog="stepcritic",
        description="Turn step-annotated multimodal chains of thought into trained critics, and benchmark them.",
        epilog="Run `stepcritic COMMAND --help` for each command's options.",
    )
    from stepcritic import __version__

    parser.add_argument("--version", action="version", version=f"stepcritic {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of a user error too")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        if command in (None, name):
            mod = importlib.import_module(module)
            mod.make_parser(sp)
            sp.set_defaults(_main=mod.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = make_parser(command if command in COMMANDS else "")
    # only `train` takes free-form `--key value` overrides (recipe keys); elsewhere unknown flags are errors
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "_accepts_overrides", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.overrides = extra
    from stepcritic.errors import UserError

    try:
        return int(args._main(args) or 0)
    except UserError as e:  # bad input: one line, exit 2; a bug keeps its traceback
        if args.debug:
            raise
        print(f"stepcritic {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
