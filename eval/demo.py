"""`stepcritic demo`: the offline end-to-end job (work in progress: data stage only for now)."""

from __future__ import annotations

import argparse


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="stepcritic demo")
    parser.add_argument("--out", default="demo_out", help="output folder (default demo_out)")
    parser.add_argument("--quick", action="store_true", help="a small, fast run (used by the tests)")
    return parser


def main(args: argparse.Namespace) -> int:
    raise SystemExit("demo: not wired yet")
