"""`python -m stepcritic.data_prep ...` is `stepcritic data ...` (same parser, same one-line errors)."""

import sys

from stepcritic.cli import main

raise SystemExit(main(["data", *sys.argv[1:]]))
