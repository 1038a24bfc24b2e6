from stepcritic.data_prep.cli import main, make_parser

raise SystemExit(main(make_parser().parse_args()))
