"""`stepcritic eval` / `python -m stepcritic.eval`: instant help, clear errors for bad input."""

import importlib.util
import os
import subprocess
import sys

import helpers
import pytest

from stepcritic import cli as stepcritic_cli
from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval import cli
from stepcritic.eval.judges.base import Critique, Judge

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class UnreachableJudge(Judge):
    """Stands in for an API judge whose endpoint stays down after its retries."""

    kind = "test-unreachable"
    needs_images = False

    def judge_batch(self, chains):
        raise ConnectionError("http://127.0.0.1:9/v1 refused the connection after 3 retries")


@pytest.fixture
def chains_dir(tmp_path):
    path = str(tmp_path / "chains")
    save_chains([validate_chain(c) for c in helpers.chains(4)], path)
    return path


def run_main(argv):
    return stepcritic_cli.main(["eval", *argv])


def test_help_lists_the_options_without_loading_heavy_libraries():
    code = ("import sys; from stepcritic.eval import cli; cli.make_parser().format_help(); "
            "print(sorted(m for m in ('datasets', 'numpy', 'torch', 'matplotlib') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert loaded.stdout.strip() == "[]"
    result = subprocess.run([sys.executable, "-m", "stepcritic.eval", "--help"], capture_output=True, text=True,
                            cwd=REPO, timeout=20)
    assert result.returncode == 0
    for option in ("--chains", "--judge", "--out", "--tasks", "--limit", "--matcher"):
        assert option in result.stdout
    # the epilog's example specs are real: each builds a judge of the kind it names, with the options it shows
    from stepcritic.eval.judges.registry import make_judge

    examples = result.stdout.split("judge specs (repeat --judge to compare judges side by side):\n", 1)[1]
    specs = [line.split()[0] for line in examples.splitlines()[:3]]
    assert specs == ["always-correct", "random,rate=0.3,seed=0", "majority"]
    judges = [make_judge(spec) for spec in specs]
    assert [j.kind for j in judges] == ["always-correct", "random", "majority"]
    assert (judges[1].rate, judges[1].seed) == (0.3, 0)


def test_list_judges_needs_no_other_option(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.make_parser().parse_args(["--list-judges"])
    assert exit_info.value.code == 0
    from stepcritic.eval.judges.registry import KINDS

    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line and not line.startswith(" ")]
    assert listed == [*KINDS, "py"]  # every kind, in the registry's order, each once


def test_list_judges_shows_every_option_and_mode_the_registry_accepts(capsys):
    """The listing is generated from the judge classes, so a mode or option added to one cannot be left out."""
    from stepcritic.eval.judges.generative import MODES, STRATEGIES
    from stepcritic.eval.judges.registry import GENERIC_OPTIONS, KINDS, WRAPPERS, judge_class

    with pytest.raises(SystemExit):
        cli.make_parser().parse_args(["--list-judges"])
    blocks, kind = {}, None
    for line in capsys.readouterr().out.splitlines():
        if not line.startswith(" "):
            kind = line.split()[0]
        blocks[kind] = blocks.get(kind, "") + line.strip()
    assert set(blocks) == set(KINDS) | {"py"}
    for kind in set(KINDS) - WRAPPERS:
        for option in {**judge_class(kind).OPTIONS, **GENERIC_OPTIONS}:
            assert f"{option}=" in blocks[kind], (kind, option)
    for kind in ("hf", "openai", "vllm"):
        assert f"mode={'|'.join(MODES)} (critique)" in blocks[kind] and "step-score" in blocks[kind]
        assert f"strategy={'|'.join(STRATEGIES)}" in blocks[kind]
    assert "aggregate=min|mean|prod (min)" in blocks["prm"]


def test_reusing_an_output_folder_for_other_chains_names_the_judges_left_out(chains_dir, tmp_path, capsys):
    out = str(tmp_path / "o")
    assert run_main(["--chains", chains_dir, "--judge", "majority", "--out", out, "--no-progress"]) == 0
    other = str(tmp_path / "other")
    save_chains([validate_chain(dict(c, question="Which shape is it?")) for c in helpers.chains(4)], other)
    capsys.readouterr()
    assert run_main(["--chains", other, "--judge", "always-correct", "--out", out, "--no-progress"]) == 0
    left = [line for line in capsys.readouterr().out.splitlines() if line.startswith("left out of the report")]
    assert left == [f"left out of the report: majority (from earlier commands into {out}; their cache lacks some "
                    "of these chains or questions)"]


def test_make_parser_fills_a_given_subparser():
    import argparse

    top = argparse.ArgumentParser(prog="stepcritic")
    sub = top.add_subparsers(dest="command")
    cli.make_parser(sub.add_parser("eval"))
    args = top.parse_args(["eval", "--chains", "c", "--judge", "majority", "--judge", "always-correct",
                           "--out", "o", "--tasks", "choice", "--limit", "5"])
    assert (args.judges, args.tasks, args.limit, args.matcher) == (["majority", "always-correct"], ["choice"], 5,
                                                                   "lexical")


def test_missing_chains_dir_fails_with_a_clear_message(tmp_path, capsys):
    assert run_main(["--chains", str(tmp_path / "nope"), "--judge", "majority", "--out", str(tmp_path / "o")]) != 0
    assert "chains not found" in capsys.readouterr().err


def test_unknown_judge_spec_fails_with_a_clear_message(chains_dir, tmp_path, capsys):
    assert run_main(["--chains", chains_dir, "--judge", "oracle-of-delphi", "--out", str(tmp_path / "o")]) != 0
    err = capsys.readouterr().err
    assert "oracle-of-delphi" in err and "unknown judge kind" in err


def test_unimportable_python_judge_fails_with_a_clear_message(chains_dir, tmp_path, capsys):
    assert run_main(["--chains", chains_dir, "--judge", "py:no_such_module.Judge", "--out", str(tmp_path / "o")]) != 0
    assert "cannot import 'no_such_module.Judge'" in capsys.readouterr().err


class DyingJudge(Judge):
    """Judges one chain at a time and goes away after the second."""

    kind = "test-dying"
    needs_images = False
    batch_size = 1
    calls = 0

    def judge_batch(self, chains):
        DyingJudge.calls += 1
        if DyingJudge.calls > 2:
            raise ConnectionError("http://127.0.0.1:9/v1 went away")
        return [Critique(c["chain_id"], [True] * len(c["steps"])) for c in chains]


def test_an_error_before_anything_was_saved_gives_no_resume_hint(chains_dir, tmp_path, capsys):
    """Nothing was judged, so rerunning would resume nothing: the error names the cause and a true count only."""
    argv = ["--chains", chains_dir, "--judge", "py:test_eval_cli.UnreachableJudge", "--out", str(tmp_path / "o"),
            "--no-progress"]
    assert run_main(argv) == 2
    err = capsys.readouterr().err
    assert "refused the connection" in err and "(0 of 4 judged and saved)" in err
    assert "rerun" not in err
    assert run_main(argv) == 2  # an earlier command's cache folder makes no difference
    assert "rerun" not in capsys.readouterr().err


def test_an_error_after_some_judgments_were_saved_says_a_rerun_resumes(chains_dir, tmp_path, capsys):
    DyingJudge.calls = 0
    argv = ["--chains", chains_dir, "--judge", "py:test_eval_cli.DyingJudge", "--out", str(tmp_path / "o"),
            "--no-progress", "--tasks", "critique"]
    assert run_main(argv) == 2
    err = capsys.readouterr().err
    assert "went away" in err and "(2 of 4 judged and saved)" in err and "rerun the same command to resume" in err
    DyingJudge.calls = -10
    assert run_main(argv) == 0
    assert "DyingJudge: 2 chains judged, 2 from cache, 0 invalid, 0 failed;" in capsys.readouterr().out


def test_limit_judges_only_the_first_chains(chains_dir, tmp_path, capsys):
    out = str(tmp_path / "o")
    assert run_main(["--chains", chains_dir, "--judge", "majority", "--out", out, "--limit", "2",
                     "--tasks", "critique", "--no-progress"]) == 0
    with open(os.path.join(out, "predictions.jsonl")) as f:
        assert len(f.readlines()) == 2
    assert "majority: 2 chains judged" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["missing chains", "bad limit", "unknown kind", "bad option", "no module",
                                  "not chains", "out is a file", "unreachable", "no vllm"])
def test_user_errors_exit_2_with_one_line_and_no_traceback(case, chains_dir, tmp_path, capsys):
    out = str(tmp_path / "o")
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "bad.jsonl").write_text('{"chain_id": "x"}\n')
    argv = {
        "missing chains": ["--chains", str(tmp_path / "nope"), "--judge", "majority"],
        "bad limit": ["--chains", chains_dir, "--judge", "majority", "--limit", "0"],
        "unknown kind": ["--chains", chains_dir, "--judge", "oracle"],
        "bad option": ["--chains", chains_dir, "--judge", "random,rate=high"],
        "no module": ["--chains", chains_dir, "--judge", "py:no_such_module.Judge"],
        "not chains": ["--chains", str(tmp_path / "bad.jsonl"), "--judge", "majority"],
        "out is a file": ["--chains", chains_dir, "--judge", "majority", "--out", str(tmp_path / "file")],
        "unreachable": ["--chains", chains_dir, "--judge", "py:test_eval_cli.UnreachableJudge"],
        "no vllm": ["--chains", chains_dir, "--judge", "vllm:some/model"],
    }[case]
    if case == "no vllm" and importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    argv = argv if "--out" in argv else [*argv, "--out", out]
    assert run_main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("stepcritic eval: error: ") and "Traceback" not in err[0], err
    assert err[0].count("judge spec") <= 1  # the spec is named once, not once per layer


def test_debug_shows_the_traceback_of_a_user_error(chains_dir, tmp_path):
    from stepcritic.eval.runner import EvalError

    with pytest.raises(EvalError, match="unknown judge kind"):
        stepcritic_cli.main(["--debug", "eval", "--chains", chains_dir, "--judge", "oracle", "--out", str(tmp_path)])


def test_python_m_eval_reports_a_user_error_like_the_command(tmp_path):
    result = subprocess.run([sys.executable, "-m", "stepcritic.eval", "--chains", str(tmp_path / "nope"),
                             "--judge", "majority", "--out", str(tmp_path / "o")],
                            capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 2
    assert result.stderr == f"stepcritic eval: error: chains not found: {tmp_path / 'nope'}\n"
