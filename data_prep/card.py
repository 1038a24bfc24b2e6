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
}


def _table(header: tuple[str, ...], rows: list[tuple]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def card_text(stats: dict) -> str:
    balance = stats["label_balance"]
    labels = sorted(set().union(*(balance[s] for s in SPLITS)))
    lines = [
        f"# StepCritic dataset: {stats['kind']}", "",
        KIND_DESCRIPTIONS[stats["kind"]],
        *([f"Trains `method: {' / '.join(stats['methods'])}` (`stepcritic train`)."] if "methods" in stats else []),
        "Every row carries its image in `images` and TRL-style messages whose content is a list of parts.", "",
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
    if "pref_mix" in stats:
        mix = stats["pref_mix"]
        lines += ["", "## Corruption mix", "",
                  *_table(("corruption", "weight", "pairs"),
                          [(name, w, mix["realised"].get(name, 0)) for name, w in mix["weights"].items()])]
    return "\n".join(lines) + "\n"


def write_card(stats: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(card_text(stats))
