"""Asking one judge for the critiques its cache lacks, each saved as it arrives. The runner asks this of the chains
of every task, the verifier of each of its questions (`verifier.ask`), so neither imports the other.

Stdlib at the top; tqdm loads when a judge is asked.
"""

from __future__ import annotations

import sys
from dataclasses import fields, is_dataclass

from stepcritic.eval.cache import JudgeCache, is_judgment
from stepcritic.eval.errors import EvalError
from stepcritic.eval.judges.base import Judge


def batch_rows(batch: dict) -> list[dict]:
    return [dict(zip(batch, values)) for values in zip(*batch.values())]


def _streamed_rows(dataset, batch_size: int = 64):
    """The dataset's rows one by one, read (and images decoded) a few at a time, as the judge asks for them."""
    for batch in dataset.iter(batch_size=batch_size):
        yield from batch_rows(batch)


def is_current(record: dict | None, chain: dict) -> bool:
    """Whether a cached record is a judgment of this chain as it is now (not of other content, not a failure)."""
    return is_judgment(record) and record.get("digest") == chain["digest"]


def cache_record(critique, digest: str) -> dict:
    """What the cache keeps of a judgment: `Critique.to_json()` with the digest of the chain judged. Made without
    to_json's deep copy when it would copy plain data only: the record is written out as JSON at once, and copying
    every list of every judgment took a tenth of a 100,000-chain run."""
    if any(is_dataclass(v) for v in (critique.extra or {}).values()):
        return dict(critique.to_json(), digest=digest)
    out = {f.name: getattr(critique, f.name) for f in fields(critique)}
    if not out["failed"]:  # as `to_json`: only failures carry the flag
        del out["failed"]
    out["digest"] = digest
    return out


def judge_chains(judge: Judge, dataset, gold: list[dict], cache: JudgeCache, progress: bool) -> dict:
    """Judge the chains missing from the cache. Returns counts: `cached`, `judged` (saved now), `invalid` (of all
    these chains' judgments, cached or new), `failed`, and `failures` ({chain_id: error}).

    Each critique is written (flushed; fsynced in groups, `cache.SYNC_SECONDS`) to the cache as soon as
    `judge.judge_stream` hands it over, before the next one is asked for: a killed run loses only the judgments
    that were not finished.
    A critique whose requests got no answer (`Critique.failed`) is no judgment: it is not saved, so the next
    run asks it again.
    """
    from tqdm.auto import tqdm  # loaded when a judge is asked, not for `--help`

    done = cache.critiques.load()
    missing = [i for i, g in enumerate(gold) if not is_current(done.get(g["chain_id"]), g)]
    asked = set(missing)
    n_invalid = sum(done[g["chain_id"]].get("valid") is False for i, g in enumerate(gold) if i not in asked)
    bar = tqdm(total=len(missing), desc=f"{judge.name} critique", unit="chain", disable=not progress,
               file=sys.stderr)
    handed = [False] * len(missing)
    n_saved = 0
    failures: dict[str, str] = {}
    stream = judge.judge_stream(_streamed_rows(dataset.select(missing)))
    try:
        while True:
            try:
                item = next(stream, None)
            except Exception as e:
                first = next((gold[missing[k]]["chain_id"] for k, h in enumerate(handed) if not h), None)
                failed = f", {len(failures)} failed" if failures else ""
                raise EvalError(f"judge {judge.name!r} failed on the chains from {first!r} on ({n_saved} of "
                                f"{len(missing)} judged and saved{failed}): {type(e).__name__}: {e}") from e
            if item is None:
                break
            index, critique = item
            if not isinstance(index, int) or not 0 <= index < len(missing) or handed[index]:
                raise EvalError(f"judge {judge.name!r} returned a critique for no chain asked (index {index!r})")
            expected = gold[missing[index]]
            if critique.chain_id != expected["chain_id"] or len(critique.verdicts) != len(expected["steps"]):
                raise EvalError(f"judge {judge.name!r} returned a critique of the wrong chain or step count "
                                f"for {expected['chain_id']!r}")
            handed[index] = True
            if critique.failed:
                failures[expected["chain_id"]] = critique.error or "no answer"
            else:
                cache.critiques.append([cache_record(critique, expected["digest"])])
                n_saved += 1
                n_invalid += not critique.valid
            bar.update(1)
    finally:
        stream.close()
        bar.close()
    if not all(handed):
        raise EvalError(f"judge {judge.name!r} returned {sum(handed)} critiques for {len(missing)} chains")
    return {"cached": len(gold) - len(missing), "judged": n_saved, "invalid": n_invalid, "failed": len(failures),
            "failures": failures}
