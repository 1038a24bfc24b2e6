"""The dataset card (README.md) written next to every built dataset, rendered from its build stats."""

from __future__ import annotations

from stepcritic.data_prep.splits import HELD_OUT, SPLITS

KIND_DESCRIPTIONS = {
    "critique-sft": "Conversational SFT: the user turn asks for a step-by-step critique, the assistant turn is "
                    "the gold critique as JSON.",
    "verifier-sft": "Conversational SFT: one row per (verifier task, step where the task applies); the "
                    "assistant turn is the single gold label.",
    "prm-sft": "Multi-turn SFT for a process reward model: one step per user turn, `+` (correct) or `-` "
               "(incorrect) per assistant turn.",
    "critique-pref": "Preference pairs: chosen = gold critique, rejected = the gold critique with one realistic "
                     "mistake (the `corruption` column).",
    "outcome-rm": "Chain-level reward pairs: chosen = a fully correct chain, rejected = an incorrect chain for the "
                  "same image and question.",
    "policy-sft": "Conversational SFT for a policy: the user turn shows the image and asks the question, the "
                  "assistant turn is a clean chain (every step correct, the answer right), one step per line; "
                  "`stepcritic generate` samples the trained policy's own chains.",
}


VERIFIER_LAYOUT_DESCRIPTIONS = {
    layout: f"Conversational SFT: one multi-turn conversation per {unit}, asking the single-label verifier questions "
            "(the same ones as one row per task and step) turn by turn, the image with the first; each assistant "
            "turn is one gold label, and `tasks` / `labels` / `step_indices` list them in turn order "
            f"(`--verifier-layout {layout}`)."
    for layout, unit in (("task", "chain and verifier task"), ("chain", "chain (its chain-level question first, "
                                                                         "then step by step)"))
}


def _table(header: tuple[str, ...], rows: list[tuple]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def _images_line(stats: dict) -> str:
    parts = "TRL-style messages whose content is a list of parts"
    text_only, n = stats.get("text_only_chains", 0), stats["chains_in"]
    if not text_only:
        return f"Every row carries its image in `images` and {parts}."
    if text_only == n:
        return (f"Text only: no chain has an image, so `images` is empty and the prompts have no image placeholder; "
                f"{parts}.")
    return (f"{text_only} of the {n} chains are text only (their rows' `images` are empty, with no image placeholder); "
            f"the others' rows carry their images in `images`; {parts}.")


def card_text(stats: dict) -> str:
    balance = stats["label_balance"]
    labels = sorted(set().union(*(balance[s] for s in SPLITS)))
    lines = [
        f"# StepCritic dataset: {stats['kind']}", "",
        KIND_DESCRIPTIONS[stats["kind"]] if stats.get("verifier_layout", "rows") == "rows"
        else VERIFIER_LAYOUT_DESCRIPTIONS[stats["verifier_layout"]],
        *([f"Trains `method: {' / '.join(stats['methods'])}` (`stepcritic train`)."] if "methods" in stats else []),
        _images_line(stats), "",
        "Load with `datasets.load_from_disk(<this folder>)`.", "",
        "## Sources", "",
        *_table(("source", "chains"), list(stats["sources"].items())), "",
        "## Chains and rows", "",
        f"{stats['chains_in']} chains in, {stats['chains_used']} used. Split by group (same image and question), "
        f"test fraction {stats['test_fraction']}, seed {stats['seed']}. Training evaluates on `{HELD_OUT}` "
        f"(`eval_split` in a recipe).", "",
        *_table(("split", "groups", "chains", "rows"),
                [(s, stats["groups"][s], stats["chains"][s], stats["rows"][s]) for s in SPLITS]), "",
        "Chains skipped: " + (", ".join(f"{r} {n}" for r, n in stats["chains_skipped"].items()) or "none") + ".", "",
        "## Label balance", "",
        *_table(("label", *SPLITS), [(k, *(balance[s].get(k, 0) for s in SPLITS)) for k in labels]),
        "",
        "## Prompt template", "",
        f"`{stats['template']['name']}` (sha256 prefix `{stats['template']['hash']}`).",
    ]
    lines += step_labels_text(stats)
    if "explanations" in stats:
        lines += ["", "## Explanations", "", explanations_text(stats["explanations"])]
    if "pref_mix" in stats:
        mix = stats["pref_mix"]
        total_weight = sum(mix["weights"].values()) or 1
        total_pairs = sum(mix["realised"].values()) or 1
        lines += ["", "## Corruption mix", "",
                  *_table(("corruption", "weight", "requested share", "pairs", "realised share"),
                          [(name, w, f"{w / total_weight:.1%}", mix["realised"].get(name, 0),
                            f"{mix['realised'].get(name, 0) / total_pairs:.1%}")
                           for name, w in mix["weights"].items()])]
        left_out = stats["chains_skipped"].get("over_mix_quota", 0)
        if left_out:
            lines += ["", f"{left_out} chains were left out (`over_mix_quota`) so that the realised shares match "
                          "the requested ones: the corruptions that apply to few chains limit the others. Weight "
                          "the corruptions that apply to more chains higher to use more of them."]
    return "\n".join(lines) + "\n"


NEUTRAL_EFFECT = {
    "skip": "left open: prm-sft keeps the step in the conversation with no target (no loss on its judgement, label "
            "`neutral`), the critique kinds skip the chain (`neutral_step`), and a chain with no other open step has "
            "no chain verdict",
    "correct": "counted as correct",
    "incorrect": "counted as incorrect",
}


def step_labels_text(stats: dict) -> list[str]:
    """How neutral steps and soft labels were turned into targets (`--neutral`, `--step-targets`)."""
    neutral = stats.get("neutral", {"policy": "skip", "steps": 0})
    lines = ["", "## Step labels", "",
             f"Neutral steps (`rating` 0): {neutral['steps']} in the chains, `--neutral {neutral['policy']}`: "
             f"{NEUTRAL_EFFECT[neutral['policy']] if neutral['steps'] else 'nothing to decide'}."]
    if stats.get("step_targets") == "soft":
        lines += ["", "Step targets: soft. `step_targets` holds each step's soft label (a Monte-Carlo score) where it "
                      "has one, 1/0 elsewhere; `method: prm` trains those judgements with cross-entropy against the "
                      "score (label `soft target`: steps whose target is strictly between 0 and 1)."]
    elif stats.get("step_targets") == "hard":
        lines += ["", "Step targets: hard (`step_targets` 1/0, the `+`/`-` of the conversation; null for a neutral "
                      "step left out of the loss)."]
    return lines


def explanations_text(counts: dict) -> str:
    """What the target critiques say about incorrect steps: reference critiques, or a placeholder."""
    reference, placeholder = counts["reference"], counts["placeholder"]
    if not placeholder:
        return (f"Every incorrect step ({reference}) is explained by a reference critique from the data."
                if reference else "No incorrect steps, so no explanations.")
    share = placeholder / (reference + placeholder)
    return (f"**Placeholder explanations**: {placeholder} of {reference + placeholder} incorrect steps "
            f"({share:.0%}) have no reference critique in the data, so their explanation in the target critique "
            f"is the fixed placeholder \"{counts['placeholder_text']}\". A critic trained on this learns the "
            "verdicts, not how to explain them; its explanations are not worth scoring.")


def write_card(stats: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(card_text(stats))


def synth_card_text(stats: dict) -> str:
    """The card of a synthetic chains folder (`stepcritic data synth`), from its stats.json."""
    n_groups, multi = stats["groups"], stats.get("groups_with_several_chains", 0)
    counts = [("chains", stats["chains"]), ("groups (image + question)", n_groups), ("steps", stats["steps"]),
              ("incorrect steps", f"{stats['steps_incorrect']} ({stats['step_error_rate']:.1%})"),
              ("fully correct chains", stats["chains_fully_correct"]), ("correct answers", stats["answers_correct"]),
              ("irrelevant steps", stats["irrelevant"]), ("uninformative steps", stats["uninformative"]),
              ("steps wrong because a premise is wrong", stats["propagated"])]
    lines = [
        "# StepCritic chains: synthetic", "",
        "Canonical chains from `stepcritic data synth`: rendered shape scenes, one question per group, several "
        "reasoning chains per question with injected step errors, every step labelled.",
        "Load with `stepcritic.data_prep.schema.load_chains(<this folder>)`; the counts are in `stats.json`.", "",
        f"Options: n {stats['n']}, seed {stats['seed']}, level `{stats['level']}`, image size {stats['image_size']} "
        f"px, {stats['chains_per_question']} chains per question, error rate "
        f"{'default' if stats.get('error_rate') is None else stats['error_rate']}"
        + (f", own fault rates {', '.join(f'{k}={v}' for k, v in stats['fault_rates'].items())}"
           if stats.get("fault_rates") else "") + ".", "",
        "## Counts", "",
        *_table(("what", "count"), counts), "",
        "## Groups", "",
        f"{multi} of {n_groups} groups hold two chains or more. Of those, {stats.get('groups_identical_chains', 0)} "
        f"hold chains with identical steps and answer, and {stats.get('groups_without_faulty_chain', 0)} hold no "
        "faulty chain (outcome-rm pairs skip them, and ShiftCheck has no wrong option there).", "",
        "## Question types", "",
        *_table(("question", "chains"), sorted(stats["question_types"].items())), "",
        "## Errors", "",
        *_table(("error", "steps"), sorted({**{f"description/{k}": v for k, v in stats["description_errors"].items()},
                                            **{f"logic/{k}": v for k, v in stats["logic_errors"].items()}}.items())),
    ]
    return "\n".join(lines) + "\n"


def write_synth_card(stats: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(synth_card_text(stats))


def ingest_card_text(stats: dict) -> str:
    """The card of an ingested chains folder (`stepcritic data ingest`), from its stats.json."""
    notes = stats.get("label_notes", {})
    lines = [
        f"# StepCritic chains: {stats['format']}", "",
        f"Canonical chains from `stepcritic data ingest --format {stats['format']}` of `{stats['input']}`.",
        "Load with `stepcritic.data_prep.schema.load_chains(<this folder>)`; the counts are in `stats.json`.", "",
        "## Records", "",
        # the summary line's counts, in its order (`ingest.SUMMARY_KEYS`), for every format: a pairwise record is
        # kept as one chain per response, so the chains may outnumber the records kept
        *_table(("what", "count"), [("records in", stats["n_records"]),
                                    ("records kept", stats.get("n_kept", stats["n_records"] - stats["n_rejected"])),
                                    ("records rejected", stats["n_rejected"]), ("chains kept", stats["n_chains"]),
                                    ("steps", stats["n_steps"])]), "",
        ("Every rejected record is listed in `stats.json` (`rejected`) with its file:line, field and reason."
         if "rejected_file" not in stats else
         f"Every rejected record is listed in `{stats['rejected_file']}` with its file:line, field and reason "
         f"(`stats.json` lists the first {len(stats['rejected'])})."),
    ]
    correct = stats["label_counts"].get("correct", {})
    lines += ["", "## Step labels", "",
              *_table(("correct", "steps"), [(k, correct.get(k, 0)) for k in ("True", "False", "None")])]
    if notes.get("neutral_steps"):
        lines += ["", f"{notes['neutral_steps']} steps are rated neutral (`rating` 0) and keep `correct: null`; "
                      "`stepcritic data build --neutral skip|correct|incorrect` decides what they become (default "
                      "skip), and `stepcritic eval` leaves them out like any step without a verdict."]
    if notes.get("soft_labelled_steps"):
        lines += ["", f"{notes['soft_labelled_steps']} steps carry a soft label (`soft_label`, a score in [0, 1]); "
                      f"those without a boolean label are correct when the score is above {stats['soft_threshold']} "
                      f"(`--soft-threshold`): {notes.get('soft_labelled_correct', 0)} correct, "
                      f"{notes.get('soft_labelled_incorrect', 0)} incorrect. `stepcritic data build --kind prm-sft "
                      "--step-targets soft` trains on the scores themselves."]
    if notes.get("multi_image_chains"):
        lines += ["", "## Images", "",
                  f"{notes['multi_image_chains']} chains show several images ({notes['extra_images']} beyond the "
                  "first). Every image is kept, in order: the first is the chain's `image`, the others its "
                  "`extra_images`, and every prompt shows them all in that order. The chain ids are in "
                  "`stats.json` (`multi_image_chains`)."]
    if stats.get("text_only_chains"):
        lines += ["", f"{stats['text_only_chains']} chains are text only (no image): their prompts ask about the "
                      "text alone, with no image placeholder, and their built rows' `images` are empty."]
    return "\n".join(lines) + "\n"


def write_ingest_card(stats: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(ingest_card_text(stats))
