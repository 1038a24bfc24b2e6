"""One error style at the command line: a user error is one line `stepcritic <command>: error: ...` and exit 2,
whichever stage raised it; `--debug` shows its traceback instead."""

import pytest

from stepcritic import cli
from stepcritic.data_prep.schema import SchemaError
from stepcritic.errors import UserError
from stepcritic.train.config import RecipeError


def test_every_stage_error_is_a_user_error():
    from stepcritic.data_prep.contract import DataContractError
    from stepcritic.data_prep.ingest import IngestError
    from stepcritic.train.common import ModelNotFound

    for error in (SchemaError, RecipeError, DataContractError, IngestError, ModelNotFound):
        assert issubclass(error, UserError), error


def test_a_data_error_is_one_prefixed_line(tmp_path, capsys):
    code = cli.main(["data", "build", "--chains", str(tmp_path / "missing"), "--kind", "prm-sft",
                     "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("stepcritic data: error: "), err


def test_a_user_error_from_any_command_exits_2_and_debug_shows_it(monkeypatch, capsys):
    def fail(args):
        raise SchemaError("expected a list", "chains.jsonl:3", "steps")

    monkeypatch.setattr(cli.importlib.import_module("stepcritic.data_prep.cli"), "main", fail)
    assert cli.main(["data", "synth", "--n", "1", "--out", "x"]) == 2
    assert capsys.readouterr().err == "stepcritic data: error: chains.jsonl:3, field 'steps': expected a list\n"
    with pytest.raises(SchemaError):
        cli.main(["--debug", "data", "synth", "--n", "1", "--out", "x"])


def test_python_m_demo_is_the_demo_command_with_its_one_line_errors(monkeypatch, capsys):
    import runpy
    import sys
    import warnings

    import stepcritic.demo

    def fail(args):
        raise UserError("out of disk")

    monkeypatch.setattr(stepcritic.demo, "main", fail)
    monkeypatch.setattr(sys, "argv", ["stepcritic.demo", "--quick"])
    with pytest.raises(SystemExit) as exit_, warnings.catch_warnings():
        # imported above to patch it, so it runs again as __main__: what `python -m` does in a fresh process
        warnings.filterwarnings("ignore", message=".*found in sys.modules", category=RuntimeWarning)
        runpy.run_module("stepcritic.demo", run_name="__main__")
    assert exit_.value.code == 2 and capsys.readouterr().err == "stepcritic demo: error: out of disk\n"
