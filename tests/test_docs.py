"""The README and the guides in docs/ stay true to the code.

Every shell command they show in a ```bash block is checked without running it: `stepcritic ...`, `python -m
stepcritic...` and `python examples/...` commands parse with the command's own argument parser (a renamed or removed
flag fails here), `stepcritic train` overrides parse against their recipe's strict key set, `accelerate launch` names an
existing launcher config, `make` an existing target and `pip install` existing extras. Every relative link (and its
#anchor) resolves, every guide is linked from the README, and the README keeps the sections users come for.
"""

import argparse
import contextlib
import io
import os
import re
import runpy
import sys
import warnings

import pytest
from helpers import shell_commands

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "README.md")
DOCS = sorted(os.path.join(REPO, "docs", name) for name in os.listdir(os.path.join(REPO, "docs"))
              if name.endswith(".md"))
PAGES = [README] + DOCS
KNOWN = ("stepcritic", "python", "python3", "accelerate", "torchrun", "make", "pip", "git")


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


COMMANDS = [pytest.param(argv, id=where) for page in PAGES for where, argv in shell_commands(page)]


class _Parsed(Exception):
    pass


def _parse_module(module: str, args: list[str], script: bool = False) -> None:
    """Run `python -m module args` (or `python module args`, a script's path, with `script`) up to its argument
    parsing, and stop there: parse errors exit 2."""
    original_known, original_args = argparse.ArgumentParser.parse_known_args, argparse.ArgumentParser.parse_args

    def parse_known_then_stop(self, argv=None, namespace=None):
        namespace, extra = original_known(self, argv, namespace)
        if sys._getframe(1).f_globals.get("__name__") == "argparse":  # parse_args, or a subcommand's parser
            return namespace, extra
        raise _Parsed(extra)

    def parse_then_stop(self, argv=None, namespace=None):
        original_args(self, argv, namespace)
        raise _Parsed([])

    saved = sys.argv[:]
    argparse.ArgumentParser.parse_known_args = parse_known_then_stop
    argparse.ArgumentParser.parse_args = parse_then_stop
    try:
        sys.argv = [module] + args
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                with warnings.catch_warnings():  # a module another test imported already runs again as __main__
                    warnings.filterwarnings("ignore", message=".*found in sys.modules", category=RuntimeWarning)
                    if script:
                        runpy.run_path(os.path.join(REPO, module), run_name="__main__")
                    else:
                        runpy.run_module(module, run_name="__main__", alter_sys=True)
            except _Parsed as parsed:
                assert not parsed.args[0], f"python -m {module}: unrecognized arguments {parsed.args[0]}"
                return
            except SystemExit as e:
                assert e.code in (0, None), f"python -m {module} {' '.join(args)}: {err.getvalue().strip()}"
                return
        raise AssertionError(f"python -m {module} never parsed its arguments")
    finally:
        argparse.ArgumentParser.parse_known_args = original_known
        argparse.ArgumentParser.parse_args = original_args
        sys.argv = saved


def _check_train(args: list[str]) -> None:
    from stepcritic.train import cli as train_cli
    from stepcritic.train.config import parse_recipe

    namespace, overrides = train_cli.make_parser().parse_known_args(args)
    config = os.path.join(REPO, namespace.config)
    parse_recipe(config if os.path.exists(config) else namespace.config, overrides)


def _check_stepcritic(args: list[str]) -> None:
    from stepcritic import cli

    command = next((a for a in args if not a.startswith("-")), None)
    if command == "train":
        return _check_train(args[args.index("train") + 1:])
    parser = cli.make_parser(command)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            parser.parse_args(args)
        except SystemExit as e:
            assert e.code == 0, f"stepcritic {' '.join(args)}: {err.getvalue().strip()}"


def _check_python_m(args: list[str]) -> None:
    if args[0].endswith(".py"):  # a script of the repository (examples/)
        assert os.path.isfile(os.path.join(REPO, args[0])), f"no script {args[0]}"
        return _parse_module(args[0], args[1:], script=True)
    assert args[0] == "-m", args
    module, rest = args[1], args[2:]
    assert module.startswith("stepcritic"), module
    if module in ("stepcritic", "stepcritic.cli"):
        return _check_stepcritic(rest)
    if module == "stepcritic.train":
        return _check_train(rest)
    _parse_module(module, rest)


def _make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", _read(os.path.join(REPO, "Makefile")), flags=re.M))


@pytest.mark.parametrize("argv", COMMANDS)
def test_every_shown_command_parses(argv):
    program = os.path.basename(argv[0])
    assert program in KNOWN, f"a command this test does not know how to check: {argv[0]}"
    if program == "stepcritic":
        _check_stepcritic(argv[1:])
    elif program in ("python", "python3"):
        _check_python_m(argv[1:])
    elif program == "accelerate":
        assert argv[1] == "launch"
        config = argv[argv.index("--config_file") + 1]
        assert os.path.isfile(os.path.join(REPO, config)), f"no launcher config {config}"
        _check_python_m(argv[argv.index("-m"):])
    elif program == "torchrun":
        _check_python_m(argv[argv.index("-m"):])
    elif program == "make":
        assert set(argv[1:]) <= _make_targets(), argv
    elif program == "pip":
        extras = re.search(r"\[([a-z,]+)\]", " ".join(argv)).group(1).split(",")
        pyproject = _read(os.path.join(REPO, "pyproject.toml"))
        section = pyproject.split("[project.optional-dependencies]")[1].split("\n[")[0]
        assert set(extras) <= set(re.findall(r"^([a-z]+) =", section, flags=re.M)), extras
        if "-c" in argv:
            assert os.path.isfile(os.path.join(REPO, argv[argv.index("-c") + 1]))


def test_a_wrong_flag_is_caught():
    """The checks above fail on a flag the command does not take, and on an unknown recipe key."""
    with pytest.raises(AssertionError, match="unrecognized arguments"):
        _check_stepcritic(["data", "synth", "--n", "10", "--out", "x", "--no-such-flag"])
    with pytest.raises(AssertionError):
        _check_python_m(["-m", "stepcritic.bench.masks", "--no-such-flag"])
    with pytest.raises(AssertionError):
        _check_python_m(["examples/grpo_with_stepcritic_reward.py", "--critic", "prm:x", "--no-such-flag"])
    from stepcritic.train.config import RecipeError
    with pytest.raises(RecipeError, match="no_such_key"):
        _check_train(["--config", "recipes/tiny/prm.yaml", "--no_such_key", "1"])


def test_the_walks_write_each_output_folder_once():
    """`stepcritic data` refuses a non-empty --out without --overwrite, so no page may write one folder twice."""
    for page in PAGES:
        outs = [argv[argv.index(flag) + 1] for _, argv in shell_commands(page) for flag in ("--out", "--output_dir")
                if flag in argv and argv[0] == "stepcritic" and "--overwrite" not in argv]
        assert len(outs) == len(set(outs)), (os.path.relpath(page, REPO), sorted(o for o in outs if outs.count(o) > 1))


def _slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: os.path.relpath(p, REPO))
def test_relative_links_and_anchors_resolve(page):
    text = _read(page)
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(#[^)\s]*)?\)", text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path = os.path.normpath(os.path.join(os.path.dirname(page), target)) if target else page
        assert os.path.exists(path), f"{os.path.relpath(page, REPO)}: broken link {target}"
        if anchor and path.endswith(".md"):
            slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", _read(path), flags=re.M)}
            assert anchor[1:] in slugs, f"{os.path.relpath(page, REPO)}: no heading for {target}{anchor}"


def test_readme_links_every_guide_and_keeps_its_sections():
    readme = _read(README)
    for doc in DOCS:
        assert f"(docs/{os.path.basename(doc)})" in readme, f"README does not link docs/{os.path.basename(doc)}"
    headings = re.findall(r"^## (.+)$", readme, flags=re.M)
    for section in ("Install", "Quick start", "What the demo shows", "Fine-tune a critic on your GPUs",
                    "Produce a reward model and use it", "Benchmark trained against prompted judges", "Data formats",
                    "Documentation", "Development"):
        assert headings.count(section) == 1, section
    assert len(readme.splitlines()) <= 375
