"""The training recipes shipped with the package, by name: `tiny/prm` is `tiny/prm.yaml` in this folder.

`stepcritic train --config` takes a recipe file or one of these names, so the shipped recipes work from any
folder, not only from a clone's root. `accelerate/` holds launcher configs, not recipes. Standard library only
at module level: `stepcritic train --list-recipes` and a mistyped name answer before torch is imported.
"""

from __future__ import annotations

import difflib
import os
from importlib.resources import files

from stepcritic.errors import UserError

LAUNCHER_FOLDER = "accelerate"
SUFFIXES = (".yaml", ".yml")


class UnknownRecipe(UserError):
    """`--config` is neither a file nor the name of a shipped recipe."""


def _root():
    return files(__name__)


def names() -> list[str]:
    """Every shipped recipe's name (`folder/file` without `.yaml`), sorted."""
    found = []
    for folder in _root().iterdir():
        if not folder.is_dir() or folder.name == LAUNCHER_FOLDER or folder.name.startswith(("_", ".")):
            continue
        found += [f"{folder.name}/{entry.name.rsplit('.', 1)[0]}" for entry in folder.iterdir()
                  if entry.name.endswith(SUFFIXES)]
    return sorted(found)


def _as_name(config: str) -> str:
    """`recipes/tiny/prm.yaml`, `./tiny/prm.yml` or `tiny/prm` -> `tiny/prm` (the name it would have if shipped)."""
    name = config.replace(os.sep, "/").strip("/")
    while name.startswith("./"):
        name = name[2:]
    for suffix in SUFFIXES:
        name = name.removesuffix(suffix)
    # a clone's path to a shipped recipe (what the README shows) names it from any folder too
    parts = name.split("/")
    if len(parts) > 2 and parts[-3] == "recipes":
        name = "/".join(parts[-2:])
    return name.removeprefix("recipes/")


def path_of(name: str) -> str | None:
    """The file of the shipped recipe `name` (`tiny/prm`, `tiny/prm.yaml`, `recipes/tiny/prm.yaml`), or None."""
    name = _as_name(name)
    if name not in names():
        return None
    folder, stem = name.split("/")
    for suffix in SUFFIXES:
        entry = _root().joinpath(folder, stem + suffix)
        if entry.is_file():
            return str(entry)
    return None


def _closest(name: str, known: list[str]) -> list[str]:
    """The known names nearest to `name`; names share their folder, so only those as near as the nearest count."""
    if "/" not in name:  # a bare file name: the recipes of that name in every folder
        same = [other for other in known if other.rsplit("/", 1)[1] == name]
        if same:
            return same[:3]
    scored = sorted(((difflib.SequenceMatcher(None, name, other).ratio(), other) for other in known), reverse=True)
    if not scored or scored[0][0] < 0.6:
        return []
    return [other for ratio, other in scored[:3] if ratio >= scored[0][0] - 0.05]


def resolve(config: str) -> str:
    """The recipe file `--config` means: the file itself when it exists, else the shipped recipe of that name.

    Raises UnknownRecipe (one line, with the closest shipped names) for anything else.
    """
    if os.path.isfile(config):
        return config
    shipped = path_of(config)
    if shipped is not None:
        return shipped
    close = _closest(_as_name(config), names())
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise UnknownRecipe(f"recipe {config!r} not found: no such file and no shipped recipe of that name{hint} "
                        "(`stepcritic train --list-recipes` lists them)")


def describe(values: dict) -> tuple[str, str, str]:
    """(method, model, data) of a recipe's YAML values, in words, for the listing."""
    method = str(values.get("method", "?"))
    model = str(values.get("model_name_or_path", "?")) + (", LoRA" if values.get("use_peft") else ", full")
    return method, model, str(values.get("dataset_path", "?"))


def listing() -> list[str]:
    """One line per shipped recipe: name, method, model (and how it is trained), data it reads."""
    import yaml

    rows = [("name", "method", "model", "data")]
    for name in names():
        with open(path_of(name)) as f:
            rows.append((name, *describe(yaml.safe_load(f) or {})))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return [f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]}".rstrip()
            for row in rows]
