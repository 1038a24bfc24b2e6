"""What `generate` and `label` share: the generative model behind a spec, with the sampling settings of the command,
and an output folder that holds the saved answers while a run is unfinished.

An output folder is a chains folder (`schema.save_chains`, `stats.json`, a card) with a `cache/` of every answer the
model gave. While a run is going the folder holds only `cache/`, so the same command run again finds it and asks only
what is missing; the chains are written beside it and put in place once complete (`data_prep.outputs.staged`), with
the cache copied into them, so an `--overwrite` later reuses every answer too.
"""

from __future__ import annotations

import os
import shutil
import time

from stepcritic.data_prep import outputs
from stepcritic.errors import UserError
from stepcritic.eval.errors import EvalError

CACHE = "cache"


class PolicyError(UserError, ValueError):
    """Options or a model that `generate` or `label` cannot use."""


def check_out(out_dir: str, overwrite: bool, inputs: dict[str, str | None]) -> bool:
    """Refuse an --out that is an input or holds something else; True when it holds an unfinished run to resume."""
    outputs.check_inputs(out_dir, inputs)
    if not os.path.lexists(out_dir):
        return False
    if not os.path.isdir(out_dir):
        raise outputs.OutputError(f"--out {out_dir} is an existing file; choose a folder")
    entries = set(os.listdir(out_dir))
    if entries <= {CACHE}:
        return bool(entries)
    if not overwrite:
        raise outputs.OutputError(f"--out {out_dir} already holds {outputs._holds(out_dir)}; pass --overwrite to "
                                  "write it again (every saved answer is reused), or choose another --out")
    return CACHE in entries


def where_of(chains_path: str):
    """How an error names a chain: file:line of a .jsonl input (one chain a line), else its chain id."""
    if os.path.isfile(chains_path):
        return lambda chain, i: f"{chains_path}:{i + 1}"
    return lambda chain, i: chain["chain_id"]


def cache_dir(out_dir: str, name: str, fingerprint: str) -> str:
    from stepcritic.eval.cache import judge_cache_dir

    return judge_cache_dir(out_dir, name, fingerprint)


def generative_model(spec: str, temperature: float | None, max_new_tokens: int | None, what: str,
                     continues: bool = False):
    """The generative judge a spec names, its temperature and reply length set by the command's flags (they win over
    the spec's own options). `continues`: it must go on writing an assistant turn begun in the prompt."""
    from stepcritic.eval.asking import is_generative
    from stepcritic.eval.judges.registry import JudgeSpec, build_judge, judge_class, parse_spec

    if temperature is not None and temperature < 0:
        raise PolicyError(f"--temperature must be 0 or more, got {temperature}")
    if max_new_tokens is not None and max_new_tokens < 1:
        raise PolicyError(f"--max-new-tokens must be at least 1, got {max_new_tokens}")
    try:
        parsed = parse_spec(spec)
        cls = judge_class(parsed.kind, parsed.target)
    except (ValueError, UserError) as e:
        raise EvalError(f"{what} {spec!r}: {e}") from None
    if not is_generative(cls):
        raise EvalError(f"{what} {spec!r} does not generate text: give a generative spec (hf:, vllm:, openai: or a "
                        "py: GenerativeJudge)")
    length = "max_new_tokens" if "max_new_tokens" in (getattr(cls, "OPTIONS", None) or {}) else "max_tokens"
    options = dict(parsed.options)
    if temperature is not None:
        options["temperature"] = float(temperature)
    if max_new_tokens is not None:
        options[length] = int(max_new_tokens)
    # `continues=true`: a server that says it continues a begun turn (the openai judge's option)
    if continues and not getattr(cls, "CONTINUES", False) and options.get("continues") is not True:
        raise EvalError(f"{what} {spec!r} cannot go on writing a chain from a step prefix ({parsed.kind}: local "
                        "models do, hf:MODEL_DIR or vllm:MODEL_DIR on a GPU, and an OpenAI-compatible server that "
                        "continues a begun turn, as vLLM's does, with openai:MODEL,base_url=...,continues=true)")
    return build_judge(str(JudgeSpec(parsed.kind, parsed.target, options)))


def sampling(model) -> dict:
    """The settings that decide what the model writes, for the stats and the card."""
    return {"temperature": getattr(model, "temperature", None), "max_new_tokens": getattr(model, "max_tokens", None)}


def seed_everything(seed: int, asked=()) -> None:
    """Seed the samplers a local model draws from (a resumed run's new samples differ from the ones a run without the
    kill would have drawn; what was saved stays as it was). `asked`: the keys of the answers about to be drawn, mixed
    into the seed, so that a run asking for other answers than an earlier one (more rollouts or samples added to a
    finished folder, a resumed run) does not draw the earlier one's random numbers again, which would repeat its
    answers under new keys."""
    import hashlib
    import random

    if asked:
        seed = int(hashlib.sha256(repr((seed, sorted(asked))).encode()).hexdigest()[:15], 16)
    random.seed(seed)
    try:
        import torch
    except ImportError:  # pragma: no cover (torch is a dependency)
        return
    torch.manual_seed(seed)


def ask_saved(model, jobs: list, log, seed: int, what: str, progress: bool, desc: str | None = None):
    """Ask `model` for the `jobs` ([(key, make_prompt)]) that `log` lacks, seeded by the keys asked
    (`seed_everything`), each answer saved as it arrives. Returns eval's `ask` counts and {key: text} of every saved
    answer; a request with no answer stops the command, the others kept for the rerun that asks only it."""
    from stepcritic.eval.asking import ask
    from stepcritic.eval.errors import FailedRequests

    saved = log.load()
    seed_everything(seed, [key for key, _ in jobs if key not in saved])
    asked = ask(model, jobs, log, desc or what, progress=progress)
    if asked["failed"]:
        raise FailedRequests(f"{asked['failed']} of {len(jobs)} {what} got no answer (the others are saved); run the "
                             f"same command again to ask only those (first error: "
                             f"{next(iter(asked['errors'].values()))})")
    return asked, {key: record["text"] for key, record in log.load().items()}


def ask_on_ranks(world, ask_share, path: str) -> set | None:
    """Under several ranks (`distributed.World`), `ask_share(shard)` asks this rank's share of the answers into its own
    shard of the log at `path` (`shard`: its name, for `JsonlLog`). Rank 0 first merges the shards a killed run left
    there and, once every rank is done, those of this run. Returns, on rank 0, the keys that were saved before this
    run (what one process would have counted as cached), and None on the others: rank 0 alone writes the chains."""
    from stepcritic import distributed
    from stepcritic.eval.cache import JsonlLog, merge_shards

    before = None
    if world.main:
        merge_shards(os.path.dirname(path))
        before = set(JsonlLog(path, "key").load())
    distributed.barrier(world)
    ask_share(world.shard)
    distributed.barrier(world)
    if world.main:
        merge_shards(os.path.dirname(path))
    return before


def install(out_dir: str, inputs: dict[str, str | None], write) -> None:
    """`write(target)` writes the finished chains folder; it replaces --out with the cache copied in."""
    with outputs.staged(out_dir, True, inputs) as target:
        write(target)
        saved = os.path.join(out_dir, CACHE)
        if os.path.isdir(saved):
            shutil.copytree(saved, os.path.join(target, CACHE))


class Clock:
    def __init__(self):
        self.start = time.perf_counter()

    def seconds(self) -> float:
        return round(time.perf_counter() - self.start, 2)
