"""Requests that got no answer: what a run does with the chains and ShiftCheck questions they leave unjudged.

A failed request (refused, timed out, an HTTP error after the retries) is no judgment: nothing of it is cached,
and the next run asks it again (`judging.judge_chains`, `runner.judge_picks`). When a run ends with failures,
`stepcritic eval` stops with one line saying how many and why (`message`), before writing any result; with
`--allow-failures` it reports without them instead: every chain that failed for any judge, and every ShiftCheck
group with a shift that failed or that shows such a chain, is left out of every judge's metrics (`keep`), so the
judges are still compared on the same chains and questions, and the report names what was left out.

Only the standard library is imported here.
"""

from __future__ import annotations

SHOWN_IDS = 3  # chain ids named in the one-line error; metrics.json lists them all


def any_failed(failures: dict) -> bool:
    return any(f["chains"] or f["questions"] for f in failures.values())


def last_error(failure: dict) -> str | None:
    errors = list(failure["chains"].values()) + list(failure["questions"].values())
    return errors[-1] if errors else None


def _ids(ids: list[str]) -> str:
    shown = ", ".join(ids[:SHOWN_IDS])
    return shown + (f" and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else "")


def message(failures: dict, n_chains: int, n_questions: int, allowed: bool = False) -> str:
    """The one line `stepcritic eval` stops with: per judge, how many chains and questions failed and why. `allowed`:
    the run was already told to report without them (and had nothing left)."""
    parts = []
    for name, failure in failures.items():
        counts = []
        if failure["chains"]:
            counts.append(f"{len(failure['chains'])} of {n_chains} chains failed ({_ids(sorted(failure['chains']))})")
        if failure["questions"]:
            counts.append(f"{len(failure['questions'])} of {n_questions} ShiftCheck questions failed")
        if counts:
            parts.append(f"judge {name!r}: {' and '.join(counts)}, last error: {last_error(failure)}")
    hint = "" if allowed else ", or add --allow-failures to report without them"
    return "; ".join(parts) + f"; failed requests are not cached: rerun the same command to ask them again{hint}"


def keep(gold: list[dict], questions: list[dict], failures: dict) -> tuple[list[dict], list[int], list[dict]]:
    """(the gold chains no judge failed on, their positions in `gold`, the questions of the groups where no judge
    failed on any shift and no shift shows a left-out chain: ShiftCheck scores a group over all its shifts)."""
    dropped = {cid for f in failures.values() for cid in f["chains"]}
    failed_ids = {qid for f in failures.values() for qid in f["questions"]}
    failed_groups = {q["group_id"] for q in questions
                     if q["question_id"] in failed_ids or dropped.intersection(q["options"])}
    positions = [i for i, g in enumerate(gold) if g["chain_id"] not in dropped]
    kept_questions = [q for q in questions if q["group_id"] not in failed_groups]
    return [gold[i] for i in positions], positions, kept_questions


def summary(failures: dict, gold: list[dict], questions: list[dict]) -> dict:
    """metrics.json's `failed` section: per judge the chains and questions that failed and the last error, and what
    was left out of every judge's metrics for them."""
    kept_gold, _, kept_questions = keep(gold, questions, failures)
    kept_ids, kept_qids = {g["chain_id"] for g in kept_gold}, {q["question_id"] for q in kept_questions}
    return {"judges": {name: {"chains": sorted(f["chains"]), "questions": sorted(f["questions"]),
                              "last_error": last_error(f)}
                       for name, f in failures.items() if f["chains"] or f["questions"]},
            "left_out_chains": sorted(g["chain_id"] for g in gold if g["chain_id"] not in kept_ids),
            "left_out_questions": sorted(q["question_id"] for q in questions if q["question_id"] not in kept_qids)}
