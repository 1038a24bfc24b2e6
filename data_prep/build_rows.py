"""Rows of each built dataset kind from validated chains: one function per kind, and each kind's columns.

`build.py` reads the chains, splits them and hands each split's chains to these functions a batch at a time; a
function appends rows to `_SplitRows.rows` and counts what it skipped and the labels it wrote. Kinds whose rows
depend on a whole split (critique-pref's corruption plan, outcome-rm's pairs within a group) take what they need
of the split from the caller, computed in a labels-only pass (`build.py`), so they too see one batch at a time.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from stepcritic.data_prep import contract, critique, labels, pairs, prompts, schema


@dataclass
class _SplitRows:
    """What one kind produced from one split: rows, chains skipped by reason, label counts, and (critique
    kinds) how many incorrect steps' target explanations are reference critiques or the placeholder."""

    rows: list = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    labels: Counter = field(default_factory=Counter)
    explanations: Counter = field(default_factory=Counter)
    n_rows: int = 0  # rows written so far (streamed kinds hand their rows to the writer batch by batch)


def _critique_skip_reason(chain: dict, notes: bool = False) -> str | None:
    open_steps = [s for s in chain["steps"] if s["correct"] is None]
    if open_steps:
        return "neutral_step" if all(labels.is_neutral(s) for s in open_steps) else "unknown_step_label"
    if chain.get("answer_correct") is None:
        return "unknown_answer_label"
    if notes and any(note is None for note in critique.chain_notes(chain, notes)):
        return "no_note"  # an incorrect step with neither a correction nor an explanation, or no checks
    return None


def _count_explanations(chain: dict, out: _SplitRows) -> None:
    """The gold critique explains each incorrect step with its first reference critique, or a placeholder."""
    for s in chain["steps"]:
        if s["correct"] is False:
            out.explanations["reference" if s.get("explanations") else "placeholder"] += 1


def _ids(chain: dict) -> dict:
    return {"images": schema.chain_images(chain), "chain_id": chain["chain_id"], "group_id": chain["group_id"]}


# ----------------------------------------------------------------------------- one function per kind

def _critique_sft(chains, template, out: _SplitRows, critique_notes: bool = False, **_) -> None:
    for chain in chains:
        reason = _critique_skip_reason(chain, critique_notes)
        if reason:
            out.skipped[reason] += 1
            continue
        messages = prompts.critique_messages(chain, template, critique_notes) + [
            prompts.assistant_turn(prompts.critique_target(chain, critique_notes))]
        out.rows.append({"messages": messages, **_ids(chain)})
        out.labels.update(f"step/{'correct' if s['correct'] else 'incorrect'}" for s in chain["steps"])
        out.labels[f"answer/{'correct' if chain['answer_correct'] else 'incorrect'}"] += 1
        _count_explanations(chain, out)


# How verifier-sft lays out its (task, step) questions: "rows", one single-turn row each (the image in every row);
# "task", one conversation per chain and task (the image once per task); "chain", one conversation per chain (the
# image once). The conversations ask exactly the rows' questions, the first turn with the image and the others
# after it, and train on every answer, as prm-sft does.
VERIFIER_LAYOUTS = contract.VERIFIER_LAYOUTS


def _verifier_items(chain: dict) -> list[tuple[str, int | None, str]]:
    """(task, step index, gold label) of every question the chain can answer, task by task, steps in order."""
    items = []
    for task in prompts.VERIFIER_TASKS:
        for index in [None] if task in prompts.CHAIN_LEVEL_TASKS else range(len(chain["steps"])):
            label = prompts.verifier_target(task, chain, index)
            if label is not None:
                items.append((task, index, label))
    return items


def _verifier_conversations(items: list[tuple], layout: str) -> list[list[tuple]]:
    if layout == "task":
        by_task: dict[str, list[tuple]] = {}
        for item in items:
            by_task.setdefault(item[0], []).append(item)
        return list(by_task.values())
    # "chain": the chain-level questions first, answered from the image and the chain alone as at evaluation (after
    # the steps' gold labels they could be read off them), then step by step, each step's tasks in task order
    return [sorted(items, key=lambda item: (item[1] is not None, item[1] or 0))]  # a stable sort keeps task order


def _verifier_sft(chains, template, out: _SplitRows, verifier_layout: str = "rows", **_) -> None:
    for chain in chains:
        items = _verifier_items(chain)
        if not items:
            out.skipped["no_verifier_labels"] += 1
            continue
        out.labels.update(f"{task}/{label}" for task, _, label in items)
        if verifier_layout == "rows":
            for task, index, label in items:
                messages = prompts.verifier_messages(task, chain, index, template) + [prompts.assistant_turn(label)]
                out.rows.append({"messages": messages, "task": task, "label": label, "step_index": index,
                                 **_ids(chain)})
            continue
        for conversation in _verifier_conversations(items, verifier_layout):
            messages = []
            for task, index, label in conversation:
                (turn,) = prompts.verifier_messages(task, chain, index, template)
                if messages:  # the image goes with the first question only
                    turn = prompts.user_turn("".join(p["text"] for p in turn["content"] if p["type"] == "text"))
                messages += [turn, prompts.assistant_turn(label)]
            out.rows.append({"messages": messages, "tasks": [t for t, _, _ in conversation],
                             "labels": [label for _, _, label in conversation],
                             "step_indices": [i for _, i, _ in conversation], **_ids(chain)})


def _prm_sft(chains, template, out: _SplitRows, step_targets: str = "hard", prm_notes: bool = False, **_) -> None:
    for chain in chains:
        if any(s["correct"] is None and not labels.is_neutral(s) for s in chain["steps"]):
            out.skipped["unknown_step_label"] += 1
            continue
        if prm_notes and any(note is None for note in prompts.prm_notes_of(chain, prm_notes)):
            out.skipped["no_note"] += 1  # an incorrect step with neither a correction nor an explanation, or no checks
            continue
        targets = labels.step_targets(chain, step_targets)
        # A neutral step left open gets the scorer's placeholder judgement: its target is null, so the collator
        # takes it out of the loss, and the input never shows a judgement anyway (`train.prm`).
        shown = dict(chain, steps=[dict(s, correct=True) if labels.is_neutral(s) else s for s in chain["steps"]])
        out.rows.append({"messages": prompts.prm_messages(shown, template, notes=prm_notes), "step_targets": targets,
                         **_ids(chain)})
        out.labels.update("neutral" if labels.is_neutral(s) else prompts.PRM_POSITIVE if s["correct"]
                          else prompts.PRM_NEGATIVE for s in chain["steps"])
        if step_targets == "soft":
            out.labels["soft target"] += sum(t is not None and 0 < t < 1 for t in targets)


def _critique_pref(chains, template, out: _SplitRows, seed: int, pref_mix: dict, pool=None, plan=None,
                   critique_notes: bool = False, **_) -> None:
    """`chains` is a whole split, or one batch of it with the split's explanation `pool` and corruption `plan`."""
    pool = pairs.ExplanationPool(chains) if pool is None else pool
    usable = []
    for chain in chains:
        reason = _critique_skip_reason(chain, critique_notes)
        if reason:
            out.skipped[reason] += 1
        else:
            usable.append(chain)
    # Which corruption each chain gets is planned over the split, so the realised mix is the requested one
    # (chains over the quota are skipped and counted); the plan and each corruption's choices are seeded.
    plan = pairs.plan_corruptions(usable, pref_mix, pool, seed) if plan is None else plan
    for chain in usable:
        corruption = plan[chain["chain_id"]]
        if corruption in (pairs.NO_CORRUPTION, pairs.OVER_QUOTA):
            out.skipped[corruption] += 1
            continue
        rejected = pairs.apply_corruption(chain, corruption, pool, random.Random(f"{seed}:{chain['chain_id']}"),
                                          notes=critique_notes)
        _count_explanations(chain, out)
        out.rows.append({
            "prompt": prompts.critique_messages(chain, template, critique_notes),
            "chosen": [prompts.assistant_turn(prompts.critique_target(chain, critique_notes))],
            "rejected": [prompts.assistant_turn(critique.format_critique(rejected))],
            "corruption": corruption, **_ids(chain),
        })
        out.labels[corruption] += 1


def _outcome_rm(chains, template, out: _SplitRows, **_) -> None:
    """`chains` is a whole split, or whole groups of it (pairs never cross a group)."""
    known = [c for c in chains if c["chain_correct"] is not None]
    out.skipped["unknown_chain_label"] += len(chains) - len(known)
    chain_pairs, unpaired = pairs.outcome_pairs(known)
    out.skipped["no_contrast_in_group"] += len(unpaired)
    for good, bad in chain_pairs:
        prompt, chosen = prompts.outcome_messages(good, template)
        _, rejected = prompts.outcome_messages(bad, template)
        out.rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected, "images": schema.chain_images(good),
                         "chosen_chain_id": good["chain_id"], "rejected_chain_id": bad["chain_id"],
                         "group_id": good["group_id"]})
    out.labels["chosen_chains"] += len({g["chain_id"] for g, _ in chain_pairs})
    out.labels["rejected_chains"] += len({b["chain_id"] for _, b in chain_pairs})


def _policy_sft(chains, template, out: _SplitRows, **_) -> None:
    """Only clean chains (every step correct, the answer right) teach a policy: a wrong step it is shown, it learns to
    write. Its mistakes when sampled are then its own, which is what a critic of its chains has to judge."""
    for chain in chains:
        if any(s["correct"] is not True for s in chain["steps"]) or chain.get("answer_correct") is not True:
            out.skipped["not_clean"] += 1
            continue
        messages = prompts.policy_messages(chain, template) + [prompts.assistant_turn(prompts.policy_target(chain))]
        out.rows.append({"messages": messages, **_ids(chain)})
        out.labels["clean chains"] += 1


BUILDERS = {"critique-sft": _critique_sft, "verifier-sft": _verifier_sft, "prm-sft": _prm_sft,
            "critique-pref": _critique_pref, "outcome-rm": _outcome_rm, "policy-sft": _policy_sft}


def features(kind: str, verifier_layout: str = "rows"):
    """The `datasets.Features` of a built dataset of `kind` (messages in TRL's vision format); verifier-sft in a
    conversation layout has one list of tasks, labels and step indices per row (one per assistant turn)."""
    from datasets import Features, Image, List, Value

    if kind == "verifier-sft" and verifier_layout != "rows":
        return Features({"messages": features(kind)["messages"], "tasks": List(Value("string")),
                         "labels": List(Value("string")), "step_indices": List(Value("int32")),
                         "images": List(Image()), "chain_id": Value("string"), "group_id": Value("string")})

    part = {"type": Value("string"), "text": Value("string")}
    messages = List({"role": Value("string"), "content": List(part)})
    ids = {"images": List(Image()), "chain_id": Value("string"), "group_id": Value("string")}
    columns = {
        "critique-sft": {"messages": messages, **ids},
        "verifier-sft": {"messages": messages, "task": Value("string"), "label": Value("string"),
                         "step_index": Value("int32"), **ids},
        "prm-sft": {"messages": messages, "step_targets": List(Value("float32")), **ids},
        "critique-pref": {"prompt": messages, "chosen": messages, "rejected": messages,
                          "corruption": Value("string"), **ids},
        "outcome-rm": {"prompt": messages, "chosen": messages, "rejected": messages, "images": List(Image()),
                       "chosen_chain_id": Value("string"), "rejected_chain_id": Value("string"),
                       "group_id": Value("string")},
        "policy-sft": {"messages": messages, **ids},
    }
    return Features(columns[kind])
