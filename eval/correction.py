"""`--tasks correction`: VISCO's correction stage (Sec. 3.1.2), a corrector revising a chain's answer given a critique.

For every chain with a reference answer and a known answer label, a corrector (any generative judge) is shown the
image, the question, the chain, a review of each step and of the final answer, and is asked for the right answer
(`data_prep/templates/correction.j2`, in our own words; read back by `parse_answer`). It is asked twice per judge:
- with the gold critique (VISCO's C_Human): the data's step labels, the first reference explanation of each wrong
  step, and the answer label;
- with the judge's own critique (VISCO's C_Self when the judge corrects itself): its verdicts, explanations and
  answer verdict. A judge that gives neither step nor answer verdicts (a reward model, score mode) has no critique
  to show: its own-critique numbers are None.
The corrector is `--corrector SPEC` for every judge, or else each generative judge of the command corrects its own
critiques (VISCO's self-correction); other judges then have no corrector and their correction numbers are None.

The corrected answer a' is right when it matches the reference answer (`same_answer`: case, spacing, articles,
surrounding punctuation and option-letter forms ignored, numbers compared as numbers); an answer equal to the chain's
own final answer keeps the chain's answer label, so a corrector that changes nothing changes no score. PCR, NCR and
gain = PCR - NCR are `metrics.correction_gain`, exactly VISCO's: PCR averages Acc(a_gt, a') over chains whose
answer was wrong, NCR averages 1 - Acc(a_gt, a') over chains whose answer was right; a reply with no readable answer
is a wrong a'. A failed request leaves that chain out of that setting (counted; a rerun asks again).

Answers are cached by content (`asking.ask`) under `OUT/cache/corrections/CORRECTOR-FINGERPRINT/`: the gold
critique of a chain is asked once per corrector, however many judges share it.
"""

from __future__ import annotations

import os

from stepcritic.data_prep.answers import normalize_answer, parse_answer, same_answer  # noqa: F401 (read here)
from stepcritic.data_prep.prompts import load_template, template_hash, user_with_image
from stepcritic.data_prep.schema import chain_images
from stepcritic.eval import metrics as M
from stepcritic.eval.asking import ask, content_key, is_generative
from stepcritic.eval.cache import JsonlLog, judge_cache_dir, write_jsonl_atomic
from stepcritic.eval.errors import EvalError
from stepcritic.eval.judges.prompting import Prompt
from stepcritic.eval.scores import gives

TEMPLATE = "correction"
SETTINGS = ("gold", "own")  # the critique shown: the data's, or the judge's own


# ----------------------------------------------------------------------------- reviews and prompts

def _review(verdict: bool | None, explanation: str | None = None) -> str:
    if verdict is None:
        return "not judged"
    if verdict:
        return "correct"
    return f"incorrect: {explanation.strip()}" if explanation and explanation.strip() else "incorrect"


def gold_review(chain: dict) -> dict:
    """The data's critique of a chain (VISCO's human critique): step labels, the first reference explanation of a
    wrong step (VISCO shows one critique per step), the answer label."""
    return {"steps": [_review(s["correct"], (s["explanations"] or [None])[0]) for s in chain["steps"]],
            "answer": _review(chain["answer_correct"])}


def judge_review(pred: dict) -> dict:
    """A judge's critique of a chain, from its prediction record: verdicts, explanations, answer verdict."""
    explanations = pred.get("explanations") or [None] * len(pred["verdicts"])
    return {"steps": [_review(v, e) for v, e in zip(pred["verdicts"], explanations)],
            "answer": _review(pred.get("answer_correct"))}


def correction_messages(chain: dict, review: dict) -> list[dict]:
    """The user turn asking the corrector for the answer (`correction.j2`), the chain's images first."""
    steps = [{"text": s["text"], "review": r} for s, r in zip(chain["steps"], review["steps"])]
    text = load_template(TEMPLATE).render(question=chain["question"], steps=steps,
                                          final_answer=chain.get("final_answer") or "", answer_review=review["answer"])
    return [user_with_image(text, len(chain_images(chain)))]


# ----------------------------------------------------------------------------- answers

def correct_after(chain: dict, answer: str | None) -> bool | None:
    """Acc(a_gt, a') of VISCO: None for no usable answer (scored wrong by `metrics.correction_gain`); the chain's
    own label when the answer is its own final answer unchanged; else whether it matches the reference answer."""
    if answer is None:
        return None
    if chain.get("final_answer") is not None and same_answer(answer, chain["final_answer"]):
        return chain["answer_correct"]
    return same_answer(answer, chain["reference_answer"])


# ----------------------------------------------------------------------------- asking the corrector

def eligible(chain: dict) -> bool:
    """A chain can be scored after correction: its answer label and a reference answer are known."""
    return chain["answer_correct"] is not None and bool(chain.get("reference_answer"))


def corrector_fingerprint(corrector) -> str:
    return content_key(corrector.fingerprint(), template_hash(TEMPLATE))[:16]


def can_critique(preds: list[dict]) -> bool:
    return bool(preds) and (gives(preds, "verdicts") or gives(preds, "answer_correct"))


def check(judges, corrector) -> None:
    """Before any judging: the corrector can be asked for answers, or some judge of the command can correct itself."""
    if corrector is not None and not is_generative(corrector):
        raise EvalError(f"--corrector {corrector.name!r} is not a generative judge (hf:, openai:, vllm: or a py: "
                        "GenerativeJudge): it cannot be asked for an answer")
    if corrector is None and not any(is_generative(j) for j in judges):
        raise EvalError("--tasks correction needs a corrector: give --corrector SPEC (any generative judge), or a "
                        "generative judge, which then corrects its own critiques")


def plan(runs: dict, judges: dict, corrector) -> dict:
    """Judge name -> its corrector: `--corrector` for all, else the judge itself when it is generative (a judge
    read back from an earlier command has none)."""
    check(judges.values(), corrector)
    return {name: corrector if corrector is not None else
            (judges[name] if name in judges and is_generative(judges[name]) else None) for name in runs}


def run(gold: list[dict], runs: dict, judges: dict, corrector, rows, out_dir: str, progress: bool = True) -> dict:
    """Ask each judge's corrector (`plan`) for the answer after the gold critique and after the judge's own, for every
    `eligible` chain; `rows(i)` is chain i of the dataset (with its image). Returns, per judge, what
    `section` reads, and writes every corrected answer to OUT/corrections.jsonl."""
    chosen = plan(runs, judges, corrector)
    keep = [i for i, g in enumerate(gold) if eligible(g)]
    out, lines = {}, []
    by_corrector: dict[int, list[str]] = {}
    for name, c in chosen.items():
        if c is not None:
            by_corrector.setdefault(id(c), []).append(name)
    for names in by_corrector.values():
        c = chosen[names[0]]
        fingerprint = corrector_fingerprint(c)
        folder = os.path.join(out_dir, "cache", "corrections",
                              os.path.basename(judge_cache_dir(out_dir, c.cache_name, fingerprint)))
        log = JsonlLog(os.path.join(folder, "answers.jsonl"), "key")
        reviews: dict[tuple[str, str], list] = {}  # (judge, setting) -> per chain (key, review) or None
        jobs = []
        for name in names:
            preds = runs[name]["predictions"]
            for setting in SETTINGS:
                if setting == "own" and not can_critique(preds):
                    reviews[name, setting] = None
                    continue
                per_chain = [None] * len(gold)
                for i in keep:
                    review = gold_review(gold[i]) if setting == "gold" else judge_review(preds[i])
                    # the chain's id as well as its text: the image is not in the digest
                    key = content_key(fingerprint, gold[i]["chain_id"], gold[i]["digest"], review)
                    per_chain[i] = (key, review)
                    jobs.append((key, lambda i=i, review=review: _prompt(rows(i), review)))
                reviews[name, setting] = per_chain
        asked = ask(c, jobs, log, "correction", progress)
        answers = {k: r["text"] for k, r in log.load().items()}
        for name in names:
            result = {"corrector": c.name, "requests": {k: asked[k] for k in ("asked", "cached", "failed")}}
            for setting in SETTINGS:
                per_chain = reviews[name, setting]
                if per_chain is None:
                    result[setting] = None
                    continue
                records = []
                for i, item in enumerate(per_chain):
                    if item is None:
                        records.append({"answered": False, "answer": None, "after": None})
                        continue
                    key, _ = item
                    answered = key in answers
                    answer = parse_answer(answers[key]) if answered else None
                    records.append({"answered": answered, "answer": answer,
                                    "after": correct_after(gold[i], answer) if answered else None})
                    lines.append({"judge": name, "critique": setting, "corrector": c.name,
                                  "chain_id": gold[i]["chain_id"], "answer_before": gold[i].get("final_answer"),
                                  "answer_correct_before": gold[i]["answer_correct"], "answer_after": answer,
                                  "answer_correct_after": records[-1]["after"],
                                  "failed": asked["errors"].get(key) if not answered else None})
                result[setting] = records
            out[name] = result
    for name in chosen:
        out.setdefault(name, None)
    write_jsonl_atomic(os.path.join(out_dir, "corrections.jsonl"), lines)
    return out


def _prompt(row: dict, review: dict):
    return Prompt(correction_messages(row, review), chain_images(row))


# ----------------------------------------------------------------------------- the task's section

def _before_after(gold: list[dict], records: list[dict]) -> tuple[list, list]:
    """Per chain, whether its answer was right before (None when the corrector was not asked) and after."""
    before = [g["answer_correct"] if r["answered"] else None for g, r in zip(gold, records)]
    return before, [r["after"] for r in records]


def own_gain(gold: list[dict], corrections: dict | None, weights=None):
    """VISCO's gain after the judge's own critiques, `metrics.correction_gain` (per resample with `weights`)."""
    before, after = _before_after(gold, (corrections or {}).get("own") or [])
    return M.correction_gain(before, after, [g["group_id"] for g in gold[:len(before)]], weights)["gain"]


def _setting(gold: list[dict], records: list[dict] | None) -> dict:
    if records is None:
        return {"pcr": None, "ncr": None, "gain": None, "accuracy_before": None, "accuracy_after": None,
                "n_incorrect_before": 0, "n_correct_before": 0, "n_failed": 0, "n_no_answer": 0}
    before, after = _before_after(gold, records)
    scored = [(b, a) for b, a in zip(before, after) if b is not None]
    result = M.correction_gain(before, after)
    return {**result,
            "accuracy_before": sum(b for b, _ in scored) / len(scored) if scored else None,
            "accuracy_after": sum(a is True for _, a in scored) / len(scored) if scored else None,
            "n_failed": sum(eligible(g) and not r["answered"] for g, r in zip(gold, records)),
            "n_no_answer": sum(r["answered"] and r["answer"] is None for r in records)}


def section(gold: list[dict], corrections: dict | None) -> dict:
    """The correction section of one judge: PCR, NCR, gain and accuracy before/after, with the gold critique and
    with the judge's own; None throughout where the judge has no corrector or no critique."""
    corrections = corrections or {}
    return {"corrector": corrections.get("corrector"), "n_chains": sum(eligible(g) for g in gold),
            **{setting: _setting(gold, corrections.get(setting)) for setting in SETTINGS}}


def slice_chains(corrections: dict | None, keep: list[int]) -> dict | None:
    if not corrections:
        return corrections
    return {**corrections, **{s: None if corrections.get(s) is None else [corrections[s][i] for i in keep]
                              for s in SETTINGS}}
