"""`python -m stepcritic.eval ...` is `stepcritic eval ...`."""

from stepcritic.eval.cli import main, make_parser

raise SystemExit(main(make_parser().parse_args()))
