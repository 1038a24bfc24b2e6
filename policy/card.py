"""The cards (README.md) of the chains folders `stepcritic generate` and `stepcritic data label` write, from their
stats.json."""

from __future__ import annotations

import json


def _table(rows: list[tuple]) -> list[str]:
    return ["| what | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]


def generate_card_text(stats: dict) -> str:
    s = stats["sampling"]
    lines = [
        "# StepCritic chains: a policy's own", "",
        f"Chains sampled by `stepcritic generate` from the policy `{stats['policy']}` (fingerprint "
        f"`{stats['policy_fingerprint']}`) for the questions of `{stats['input']}`: {stats['sampling']['samples']} "
        "samples per question, the chains of a question sharing its `group_id`. Steps are cut as "
        "`stepcritic.rewards.splitting` cuts a policy's answer; the answer is read off the text and `answer_correct` "
        "says whether it is the gold one. No step carries a label: `stepcritic data label` gives them.",
        "Load with `stepcritic.data_prep.schema.load_chains(<this folder>)`; the counts are in `stats.json`, every "
        "sample's text in `cache/`.", "",
        f"Sampling: temperature {s['temperature']}, at most {s['max_new_tokens']} new tokens, seed {s['seed']}, "
        f"template `{s['template']}` (sha256 prefix `{s['template_hash']}`).", "",
        "## Counts", "",
        *_table([("questions", stats["questions"]), ("samples", stats["samples"]), ("parsed (steps and an answer)",
                 stats["parsed"]), ("unparsed", stats["unparsed"]), ("of them, no answer (kept, answer wrong)",
                 stats["no_answer"]), ("of them, blank (no chain)", stats["blank"]), ("chains", stats["chains"]),
                 ("steps", stats["steps"]), ("right answers", stats["answers_correct"])]),
    ]
    return "\n".join(lines) + "\n"


def write_generate_card(stats: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(generate_card_text(stats))


METHOD_TEXT = {
    "mc": "Monte-Carlo estimation (Math-Shepherd, VisualPRM400K): every step's prefix rolled out, a step's soft label "
          "the share of continuations that reach the gold answer, its hard label whether that share is above 0",
    "binary": "binary search for the first wrong step (OmegaPRM): the steps before it correct, it and the steps after "
              "it incorrect, a soft label where a prefix was rolled out",
}


def label_card_text(stats: dict) -> str:
    settings, rollouts = stats["settings"], stats["rollouts"]
    lines = [
        "# StepCritic chains: step labels from rollouts", "",
        f"The chains of `{stats['input']}` labelled by `stepcritic data label --method {stats['method']}`: "
        f"{METHOD_TEXT[stats['method']]}. Completer `{stats['completer']}` (fingerprint "
        f"`{stats['completer_fingerprint']}`). The labels are in each step's `soft_label` and `correct`, read by "
        "`stepcritic data build --kind prm-sft` (hard, or `--step-targets soft`); labels the chains carried before "
        f"are in `meta.true_labels`, which no build reads ({stats['true_labels_moved']} chains).",
        "Load with `stepcritic.data_prep.schema.load_chains(<this folder>)`; the counts are in `stats.json`, every "
        "rollout in `cache/`.", "",
        f"Settings: `{json.dumps(settings, sort_keys=True)}`.", "",
        "## Counts", "",
        *_table([("chains in", stats["chains_in"]), ("chains out", stats["chains_out"]),
                 ("left out", ", ".join(f"{k} {v}" for k, v in stats["left_out"].items()) or "none"),
                 ("steps", stats["steps"]), ("steps labelled incorrect", stats["steps_incorrect"]),
                 ("steps merged (--max-steps)", stats["steps_merged"]), ("rollouts", rollouts["total"]),
                 ("rollouts per chain", rollouts["per_chain"]), ("rollouts per step", rollouts["per_step"]),
                 ("asked this run / saved before", f"{rollouts['asked']} / {rollouts['cached']}"),
                 ("wall time", f"{stats['wall_seconds']} s")]),
    ]
    if "consensus" in stats:
        c = stats["consensus"]
        lines += ["", "## Consensus filtering", "",
                  f"The judge `{c['judge']}` critiqued every labelled chain; a chain is kept when its first step "
                  f"judged wrong is the rollouts' first wrong step (or neither has one): {c['kept']} kept, "
                  f"{c['dropped']} dropped ({c['unreadable']} unreadable critiques, {c['unanswered']} unanswered)."]
    return "\n".join(lines) + "\n"


def write_label_card(stats: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(label_card_text(stats))
