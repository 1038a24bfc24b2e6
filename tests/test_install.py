"""`pip install .` and `pip install -e .` both work from a fresh venv and install only the `stepcritic` namespace."""

import os
import subprocess
import venv

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# what the stage modules import at their top must work without torch/transformers installed
PROBE = ("import stepcritic, stepcritic.data_prep.schema, stepcritic.data_prep.cli, stepcritic.train.cli, "
         "stepcritic.eval, stepcritic.cli, stepcritic.demo, stepcritic.bench, stepcritic.testing.fake_openai_server, "
         "importlib.resources as r; "
         "print(stepcritic.__file__); "
         "print(sorted(p.name for p in r.files('stepcritic.data_prep').joinpath('templates').iterdir())[:1]); "
         "print(sorted(p.name for p in r.files('stepcritic.recipes').iterdir()))")


@pytest.mark.slow
@pytest.mark.parametrize("editable", [False, True], ids=["wheel", "editable"])
def test_fresh_venv_install(tmp_path, editable):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = str(env_dir / "bin" / "python")
    target = ["-e", REPO] if editable else [REPO]
    r = subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", *target], capture_output=True, text=True,
                       cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = subprocess.run([py, "-c", PROBE], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    location, templates, recipes = out.stdout.splitlines()
    assert templates != "[]", "prompt templates missing from the installed package"
    assert "tiny" in recipes, "recipes missing from the installed package"
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True).stdout.strip()
    top_level = set(os.listdir(site))
    assert not {"train", "eval", "data_prep", "recipes", "tests", "bench", "experiments", "testing",
                "demo.py"} & top_level
    if editable:
        assert location == os.path.join(REPO, "__init__.py")
    else:
        assert location.startswith(site) and os.path.isdir(os.path.join(site, "stepcritic", "eval"))
    help_out = subprocess.run([str(env_dir / "bin" / "stepcritic"), "--help"], capture_output=True, text=True)
    assert help_out.returncode == 0 and "demo" in help_out.stdout


def package_folders(folder: str = REPO) -> set[str]:
    """Every folder of the package tree, relative to the repository root: a folder with an __init__.py inside one."""
    found = {os.path.relpath(folder, REPO)}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(os.path.join(path, "__init__.py")):
            found |= package_folders(path)
    return found


def test_every_package_folder_is_declared_for_installation():
    # setuptools installs only the packages pyproject.toml names: a folder left out imports from a checkout and an
    # editable install, and is missing from a wheel
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        setup = tomllib.load(f)["tool"]["setuptools"]
    declared = {os.path.normpath(setup["package-dir"][name]) for name in setup["packages"]}
    assert declared == package_folders()
