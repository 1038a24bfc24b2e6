"""Asking a generative judge many prompts of our own, every answer saved as it arrives.

The corrector of `--tasks correction` and the explanation matcher of `--matcher judge:SPEC` ask prompts that are
not critiques of a chain, so they do not go through `Judge.judge_stream`; they share this instead. Each question
has a key, a hash of everything that decides its answer (the judge's fingerprint, the template, the texts shown),
and the answers are kept in a `cache.JsonlLog` under that key: a rerun asks only what is missing, and two
questions with the same content (the gold critique of a chain, shown to one corrector for several judges) are
asked once. An answer is appended (flushed at once, fsynced in groups) before the next one is asked for, through
the judge's `generate_stream` (`GenerativeJudge`: a batch at a time; the OpenAI-compatible judge: at most `concurrency`
requests unsaved), so a killed run repeats only what was in flight. A failed request is not saved: the run
treats its question as unanswered and a rerun asks it again.

Only the standard library is imported at the top.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
from collections.abc import Callable, Iterable, Iterator

from stepcritic.eval.cache import JsonlLog
from stepcritic.eval.errors import EvalError


def content_key(*parts) -> str:
    """A stable hash of `parts` (JSON-serialisable): the cache key of one question."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()[:32]


def is_generative(judge) -> bool:
    """Whether the judge answers free prompts (hf:, openai:, vllm:, or a py: `GenerativeJudge`)."""
    return callable(getattr(judge, "generate", None))


def _replies(judge, prompts: Iterable) -> Iterator[tuple[int, object]]:
    stream = getattr(judge, "generate_stream", None)
    if callable(stream):
        yield from stream(prompts)
        return
    prompts = iter(prompts)  # a judge with `generate` only: a batch at a time
    start = 0
    while batch := list(itertools.islice(prompts, max(1, getattr(judge, "batch_size", 8)))):
        for offset, reply in enumerate(judge.generate(batch)):
            yield start + offset, reply
        start += len(batch)


def ask(judge, jobs: list[tuple[str, Callable]], log: JsonlLog, what: str, progress: bool = True,
        record: Callable[[str], dict] | None = None) -> dict:
    """Ask `judge` every job `(key, make_prompt)` whose key `log` lacks, saving each answer (`{"key", "text"}`, plus
    `record(key)`) as it arrives. `make_prompt()` builds the `Prompt` only when it is sent (images are decoded
    then). Returns {"asked", "cached", "failed", "errors": {key: error}} for this run; the answers are in `log`."""
    from tqdm.auto import tqdm  # loaded when a judge is asked, not for `--help`

    done = log.load()
    todo, seen = [], set()
    for key, make in jobs:
        if key not in done and key not in seen:
            seen.add(key)
            todo.append((key, make))
    errors: dict[str, str] = {}
    bar = tqdm(total=len(todo), desc=f"{judge.name} {what}", unit="prompt", disable=not progress, file=sys.stderr)
    stream = _replies(judge, (make() for _, make in todo))
    n_saved = 0
    try:
        while True:
            try:
                item = next(stream, None)
            except EvalError:
                raise
            except Exception as e:
                failed = f", {len(errors)} failed" if errors else ""
                raise EvalError(f"{what}: judge {judge.name!r} failed after {n_saved} of {len(todo)} prompts answered "
                                f"and saved{failed}: {type(e).__name__}: {e}") from e
            if item is None:
                break
            index, reply = item
            key = todo[index][0]
            if reply.error:
                errors[key] = reply.error
            else:
                log.append([{"key": key, "text": reply.text or "", **(record(key) if record else {})}])
                n_saved += 1
            bar.update(1)
    finally:
        close = getattr(stream, "close", None)
        if close:
            close()
        bar.close()
        log.close()
    return {"asked": len(todo), "cached": len({k for k, _ in jobs}) - len(todo), "failed": len(errors),
            "errors": errors}
