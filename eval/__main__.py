"""`python -m stepcritic.eval ...` is `stepcritic eval ...` (same parser, same one-line errors)."""

import sys

from stepcritic.cli import main

raise SystemExit(main(["eval", *sys.argv[1:]]))
