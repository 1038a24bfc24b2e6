"""Each list of names lives once: the command line offers exactly the names the code behind it accepts, taken
from the module that owns them (no copy that could drift)."""

import argparse

from stepcritic.data_prep import build, contract, ingest, synth
from stepcritic.data_prep import cli as data_cli
from stepcritic.eval import cli as eval_cli
from stepcritic.eval import matchers, runner


def choices(parser: argparse.ArgumentParser, path: tuple[str, ...], option: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and path:
            return choices(action.choices[path[0]], path[1:], option)
        if option in action.option_strings:
            return action.choices
    raise KeyError(option)


def test_data_command_choices_are_the_owners_lists():
    parser = data_cli.make_parser()
    assert choices(parser, ("ingest",), "--format") is ingest.FORMATS
    assert choices(parser, ("synth",), "--level") is synth.LEVELS
    assert choices(parser, ("build",), "--kind") is contract.KIND_NAMES


def test_eval_command_choices_are_the_owners_lists():
    parser = eval_cli.make_parser()
    assert choices(parser, (), "--tasks") is runner.TASKS
    assert choices(parser, (), "--matcher") is matchers.MATCHERS


def test_every_kind_has_a_builder_and_a_template():
    assert list(build.BUILDERS) == list(build.TEMPLATE_ROLE) == list(contract.KIND_NAMES)
