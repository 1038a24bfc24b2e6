"""`python -m stepcritic.train --config RECIPE.yaml [...]` (what `accelerate launch -m` runs)."""

from stepcritic.train.cli import main, make_parser

_args, _extra = make_parser().parse_known_args()
_args.overrides = _extra
raise SystemExit(main(_args))
