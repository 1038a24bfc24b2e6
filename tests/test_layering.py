"""The one-way flow data_prep -> train -> eval, checked: judges that need no trained artifact import no training
module, and no shipped module imports test code."""

import ast
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, "tests")
SHIPPED_FOLDERS = ("data_prep", "train", "eval", "recipes")


@pytest.mark.parametrize("module", [
    "stepcritic.eval.judges.openai_judge",
    "stepcritic.eval.judges.baselines",
    "stepcritic.eval.cli",
])
def test_module_imports_no_training_code(module):
    # a fresh interpreter: this test process has imported training modules through other tests
    code = (f"import sys, json, {module}; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('stepcritic.train'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


@pytest.mark.parametrize("module", ["stepcritic.cli", "stepcritic.data_prep.cli", "stepcritic.eval.cli",
                                    "stepcritic.train.cli"])
def test_command_modules_import_only_the_standard_library(module):
    # what `--help` and the choices lists cost: the task, kind and format lists they import must stay stdlib-only
    code = ("import sys, json; before = set(sys.modules); "
            f"import {module}; "
            "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before} "
            "- set(sys.stdlib_module_names) - {'stepcritic'})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def shipped_sources() -> list[str]:
    top = [os.path.join(REPO, name) for name in os.listdir(REPO) if name.endswith(".py")]
    nested = [os.path.join(root, name) for folder in SHIPPED_FOLDERS
              for root, _, names in os.walk(os.path.join(REPO, folder)) for name in names if name.endswith(".py")]
    return sorted(top + nested)


def test_no_shipped_module_imports_tests():
    test_modules = {"tests"} | {name[:-3] for name in os.listdir(TESTS) if name.endswith(".py")}
    offenders = []
    for path in shipped_sources():
        with open(path, encoding="utf-8") as f:
            source = f.read()
        for node in ast.walk(ast.parse(source, path)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            offenders += [f"{os.path.relpath(path, REPO)}:{node.lineno} imports {name}" for name in names
                          if name.split(".")[0] in test_modules or name.startswith("stepcritic.tests")]
        if "sys.path" in source:  # the back door: putting tests/ on the path and importing by bare name
            offenders.append(f"{os.path.relpath(path, REPO)} changes sys.path")
    assert shipped_sources() and offenders == []
