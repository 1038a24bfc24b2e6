"""The one-way flow data_prep -> train -> eval -> rewards -> serve, checked: judges that need no trained artifact
import no training module, no shipped module imports test code, nothing the command can reach imports the test doubles
of testing/, no stage's modules import each other in a cycle, and no test module imports another (what tests share
lives in tests/helpers.py and the other modules of tests/ without the test_ prefix)."""

import ast
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, "tests")
SHIPPED_FOLDERS = ("data_prep", "train", "eval", "rewards", "serve", "policy", "recipes", "bench", "experiments",
                   "testing")
# what the `stepcritic` command never runs: benchmarks and experiments may use the test doubles, nothing else may
OUTSIDE_THE_COMMAND = ("bench", "experiments", "testing")


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
                                    "stepcritic.train.cli", "stepcritic.serve.cli", "stepcritic.policy.cli"])
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


def import_statements(path: str, module: str):
    """The parsed file of `module` and each of its imports as (line, module named, names imported from it), relative
    imports resolved against the package: `import a.b` gives ("a.b", []), `from .x import y` ("<package>.x", ["y"])."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    statements = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            statements += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            statements.append((node.lineno, base, [alias.name for alias in node.names]))
    return tree, statements


def imports_of_test_doubles(path: str, module: str) -> list[str]:
    """Where the file of `module` names `stepcritic.testing`: imports (relative ones resolved) and any string, such
    as a name handed to importlib, as the command table does."""
    tree, statements = import_statements(path, module)
    named = [(line, f"{base}.{name}" if names else base) for line, base, names in statements for name in names or [""]]
    named += [(node.lineno, node.value) for node in ast.walk(tree)
              if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    return [f"{line} imports {name}" for line, name in sorted(named, key=lambda item: item[0])
            if name == "stepcritic.testing" or name.startswith("stepcritic.testing.")]


def test_the_test_double_scan_sees_relative_imports_and_names_for_importlib(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    from ..testing import fake_openai_server\n")
    (tmp_path / "b.py").write_text("import importlib\nimportlib.import_module('stepcritic.testing.x')\n")
    (tmp_path / "c.py").write_text("from stepcritic import testing_notes\nfrom . import testing\n")
    assert imports_of_test_doubles(str(tmp_path / "a.py"), "stepcritic.eval.a") == [
        "2 imports stepcritic.testing.fake_openai_server"]
    assert imports_of_test_doubles(str(tmp_path / "b.py"), "stepcritic.b") == ["2 imports stepcritic.testing.x"]
    assert imports_of_test_doubles(str(tmp_path / "c.py"), "stepcritic.c") == ["2 imports stepcritic.testing"]


def test_nothing_the_command_can_reach_imports_the_test_doubles():
    # a test double on a shipped code path would answer in place of the real thing; every module is scanned, not
    # one run's sys.modules, so that an import inside a rarely taken branch counts too
    reachable = [path for path in shipped_sources()
                 if os.path.relpath(path, REPO).split(os.sep)[0] not in OUTSIDE_THE_COMMAND]
    offenders = []
    for path in reachable:
        parts = os.path.relpath(path, REPO)[:-3].split(os.sep)
        module = ".".join(["stepcritic", *(parts[:-1] if parts[-1] == "__init__" else parts)])
        offenders += [f"{os.path.relpath(path, REPO)}:{where}" for where in imports_of_test_doubles(path, module)]
    assert len(reachable) > 50 and offenders == []


STAGES = ("data_prep", "train", "eval", "rewards", "serve", "policy", "bench", "experiments", "testing")


def stage_modules() -> dict[str, str]:
    """Every module of the stages, by dotted name (`stepcritic.eval.runner`), to its file."""
    modules = {}
    for stage in STAGES:
        for root, _, names in os.walk(os.path.join(REPO, stage)):
            for name in names:
                if name.endswith(".py"):
                    parts = os.path.relpath(os.path.join(root, name[:-3]), REPO).split(os.sep)
                    if parts[-1] == "__init__":
                        parts = parts[:-1]
                    modules[".".join(["stepcritic", *parts])] = os.path.join(root, name)
    return modules


def imported_modules(path: str, module: str, known) -> set[str]:
    """The stage modules `module` imports anywhere in its file: at the top, inside functions and classes, under
    TYPE_CHECKING; an import inside a function hides a cycle from the interpreter, not from the design."""
    found = set()
    for _, base, names in import_statements(path, module)[1]:
        # `from package import module` imports the module; `from module import name` the module itself
        targets = [f"{base}.{name}" if f"{base}.{name}" in known else base for name in names] or [base]
        for target in targets:
            while target and target not in known:  # `import stepcritic.eval.tasks.X` -> the module it names
                target = target.rpartition(".")[0]
            if target and target != module:
                found.add(target)
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted, largest first."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components, key=lambda c: (-len(c), c))


def test_the_cycle_finder_sees_imports_inside_functions(tmp_path):
    # the cycles it must catch are the ones the interpreter tolerates: one side imports inside a function
    (tmp_path / "a.py").write_text("from stepcritic.eval import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from stepcritic.eval.a import g\n")
    (tmp_path / "c.py").write_text("from . import a\n")
    known = {"stepcritic.eval.a": str(tmp_path / "a.py"), "stepcritic.eval.b": str(tmp_path / "b.py"),
             "stepcritic.eval.c": str(tmp_path / "c.py")}
    graph = {name: imported_modules(path, name, known) for name, path in known.items()}
    assert graph["stepcritic.eval.c"] == {"stepcritic.eval.a"}
    assert import_cycles(graph) == [["stepcritic.eval.a", "stepcritic.eval.b"]]


KNOWN_CYCLES: dict[str, list] = {"across stages": []}  # none stand: a new one fails the test


def import_graph() -> dict[str, set[str]]:
    modules = stage_modules()
    return {name: imported_modules(path, name, modules) for name, path in modules.items()}


def stage_of(module: str) -> str:
    return module.split(".")[1]


@pytest.mark.parametrize("stage", STAGES)
def test_no_import_cycle_inside_a_stage(stage):
    # each stage is a pipeline whose data flows one way (for eval: config -> what to ask -> judges -> each task's
    # scores -> results -> report); a cycle means two modules can only be understood, changed and tested together
    graph = {name: {t for t in targets if stage_of(t) == stage}
             for name, targets in import_graph().items() if stage_of(name) == stage}
    assert graph
    assert import_cycles(graph) == KNOWN_CYCLES.get(stage, [])


def test_no_import_cycle_across_stages():
    # data flows data_prep -> train -> eval, bench and experiments measuring them: a stage importing a later one
    # closes a loop
    spanning = [cycle for cycle in import_cycles(import_graph()) if len({stage_of(m) for m in cycle}) > 1]
    assert spanning == KNOWN_CYCLES["across stages"]


def imports_of_test_modules(path: str) -> list[str]:
    """Where the file at `path` imports a test module (`test_x`, `tests.test_x`), inside functions too."""
    _, statements = import_statements(path, "tests." + os.path.basename(path)[:-3])
    named = sorted((line, f"{base}.{name}" if base == "tests" else base) for line, base, names in statements
                   for name in names or [""])
    return [f"{line} imports {name.strip('.')}" for line, name in named
            if any(part.startswith("test_") for part in name.split(".")[:2])]


def test_the_test_module_scan_sees_imports_inside_functions(tmp_path):
    (tmp_path / "a.py").write_text("import helpers\nfrom helpers import step\n\ndef f():\n    from test_x import y\n")
    (tmp_path / "b.py").write_text("import test_x\nfrom tests import helpers, test_y\nfrom tests.test_z import w\n")
    assert imports_of_test_modules(str(tmp_path / "a.py")) == ["5 imports test_x"]
    assert imports_of_test_modules(str(tmp_path / "b.py")) == ["1 imports test_x", "2 imports tests.test_y",
                                                             "3 imports tests.test_z"]


def test_no_test_module_imports_another():
    # a test module imported by another ties the two together (trimming one breaks the other, and a test function
    # imported by name runs twice): what both need belongs in helpers.py or another module of tests/ without test_
    sources = sorted(os.path.join(TESTS, name) for name in os.listdir(TESTS) if name.endswith(".py"))
    offenders = [f"tests/{os.path.basename(path)}:{where}" for path in sources
                 for where in imports_of_test_modules(path)]
    assert len(sources) > 50 and offenders == []
