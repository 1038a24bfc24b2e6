"""`pip install .` and `pip install -e .` both work from a fresh venv and install only the `stepcritic` namespace."""

import os
import subprocess
import venv

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# what the stage modules import at their top must work without torch/transformers installed
PROBE = ("import stepcritic, stepcritic.data_prep.schema, stepcritic.data_prep.cli, stepcritic.train.cli, "
         "stepcritic.eval, stepcritic.cli, importlib.resources as r; "
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
    assert not {"train", "eval", "data_prep", "recipes", "tests"} & top_level
    if editable:
        assert location == os.path.join(REPO, "__init__.py")
    else:
        assert location.startswith(site) and os.path.isdir(os.path.join(site, "stepcritic", "eval"))
    help_out = subprocess.run([str(env_dir / "bin" / "stepcritic"), "--help"], capture_output=True, text=True)
    assert help_out.returncode == 0 and "demo" in help_out.stdout
