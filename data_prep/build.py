"""Build training datasets (TRL formats, with images) from canonical chains.

`build_dataset(chains, kind, out_dir)` validates the chains, splits them by group, turns each split into
rows of one kind, and saves a `datasets.DatasetDict` (splits `splits.SPLITS`: train / test) plus `README.md`
(dataset card) and `build_stats.json`. Kinds, their columns and the methods they feed are defined in
`contract.py`, which training reads too. Every prompt comes from `prompts.py`, so evaluation asks judges
exactly the same questions the models were trained on.

Kinds:
- critique-sft:  {"messages": [user, assistant=gold JSON critique], "images", "chain_id", "group_id"}
- verifier-sft:  one row per (task, step where the task applies): {"messages", "images", "task", "label", ...}
- prm-sft:       {"messages": multi-turn, one step per user turn, "+"/"-" per assistant turn, "step_targets":
                 P(+) per step (1/0, the soft label with --step-targets soft, null: no loss), "images", ...}
- critique-pref: {"prompt", "chosen"=gold critique, "rejected"=corrupted critique, "images", "corruption", ...}
- outcome-rm:    {"prompt", "chosen"=a fully correct chain, "rejected"=an incorrect chain of the same group, ...}

Chains whose labels cannot supply a target are skipped and counted by reason: the critique kinds need
every step's verdict and the answer verdict (a target with `null` verdicts would teach the critic to
abstain), prm-sft needs every step's verdict, outcome-rm needs `chain_correct` and a group that has both
a fully correct and an incorrect chain. Neutral steps (`labels.py`) follow `--neutral`: under "skip" prm-sft keeps
the step with no target and the critique kinds skip the chain (reason `neutral_step`).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from collections import Counter
from dataclasses import dataclass, field

from stepcritic.data_prep import critique, labels, pairs, prompts, schema
from stepcritic.data_prep.contract import KIND_NAMES as KINDS
from stepcritic.data_prep.contract import KINDS as KIND_SPECS
from stepcritic.data_prep.contract import STATS_FILE
from stepcritic.data_prep.splits import HELD_OUT, SPLITS, TRAIN, split_by_group
from stepcritic.errors import UserError

TEMPLATE_ROLE = {"critique-sft": "critique", "verifier-sft": "verifier", "prm-sft": "prm",
                 "critique-pref": "critique", "outcome-rm": "outcome"}


class BuildError(UserError, ValueError):
    """Build options or chains the builder cannot use (unknown kind, bad test fraction, no chains, ...)."""


@dataclass
class _SplitRows:
    """What one kind produced from one split: rows, chains skipped by reason, label counts, and (critique
    kinds) how many incorrect steps' target explanations are reference critiques or the placeholder."""

    rows: list = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    labels: Counter = field(default_factory=Counter)
    explanations: Counter = field(default_factory=Counter)
    n_rows: int = 0  # rows written so far (streamed kinds hand their rows to the writer batch by batch)


# ----------------------------------------------------------------------------- input

def _canonical_chains(chains) -> list[dict]:
    """Validate a chains `datasets.Dataset` or a list of chain dicts (images kept as encoded bytes)."""
    from datasets import Dataset, Image

    if isinstance(chains, Dataset):
        if "image" in chains.column_names:  # skip decoding: rows only need the encoded bytes
            chains = chains.cast_column("image", Image(decode=False))
        records = chains.to_list()
    elif isinstance(chains, (list, tuple)):
        records = list(chains)
    else:
        raise TypeError(f"chains must be a datasets.Dataset or a list of chain dicts, got {type(chains).__name__}")
    validated = []
    for i, record in enumerate(records):
        where = record.get("chain_id") if isinstance(record, dict) and record.get("chain_id") else f"chains[{i}]"
        validated.append(schema.validate_chain(record, where=str(where)))
    schema.check_unique_ids(validated)
    return validated


def _critique_skip_reason(chain: dict) -> str | None:
    open_steps = [s for s in chain["steps"] if s["correct"] is None]
    if open_steps:
        return "neutral_step" if all(labels.is_neutral(s) for s in open_steps) else "unknown_step_label"
    if chain.get("answer_correct") is None:
        return "unknown_answer_label"
    return None


def _count_explanations(chain: dict, out: _SplitRows) -> None:
    """The gold critique explains each incorrect step with its first reference critique, or a placeholder."""
    for s in chain["steps"]:
        if s["correct"] is False:
            out.explanations["reference" if s.get("explanations") else "placeholder"] += 1


def _ids(chain: dict) -> dict:
    return {"images": [chain["image"]], "chain_id": chain["chain_id"], "group_id": chain["group_id"]}


# ----------------------------------------------------------------------------- one function per kind

def _critique_sft(chains, template, out: _SplitRows, **_) -> None:
    for chain in chains:
        reason = _critique_skip_reason(chain)
        if reason:
            out.skipped[reason] += 1
            continue
        messages = prompts.critique_messages(chain, template) + [prompts.assistant_turn(prompts.critique_target(chain))]
        out.rows.append({"messages": messages, **_ids(chain)})
        out.labels.update(f"step/{'correct' if s['correct'] else 'incorrect'}" for s in chain["steps"])
        out.labels[f"answer/{'correct' if chain['answer_correct'] else 'incorrect'}"] += 1
        _count_explanations(chain, out)


def _verifier_sft(chains, template, out: _SplitRows, **_) -> None:
    for chain in chains:
        n_rows = len(out.rows)
        for task in prompts.VERIFIER_TASKS:
            indices = [None] if task in prompts.CHAIN_LEVEL_TASKS else range(len(chain["steps"]))
            for index in indices:
                label = prompts.verifier_target(task, chain, index)
                if label is None:
                    continue
                messages = prompts.verifier_messages(task, chain, index, template) + [prompts.assistant_turn(label)]
                out.rows.append({"messages": messages, "task": task, "label": label, "step_index": index,
                                 **_ids(chain)})
                out.labels[f"{task}/{label}"] += 1
        if len(out.rows) == n_rows:
            out.skipped["no_verifier_labels"] += 1


def _prm_sft(chains, template, out: _SplitRows, step_targets: str = "hard", prm_notes: bool = False, **_) -> None:
    for chain in chains:
        if any(s["correct"] is None and not labels.is_neutral(s) for s in chain["steps"]):
            out.skipped["unknown_step_label"] += 1
            continue
        if prm_notes and any(prompts.prm_note(s) is None for s in chain["steps"]):
            out.skipped["no_note"] += 1  # an incorrect step with neither a correction nor an explanation
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


def _critique_pref(chains, template, out: _SplitRows, seed: int, pref_mix: dict, **_) -> None:
    pool = pairs.ExplanationPool(chains)
    usable = []
    for chain in chains:
        reason = _critique_skip_reason(chain)
        if reason:
            out.skipped[reason] += 1
        else:
            usable.append(chain)
    # Which corruption each chain gets is planned over the split, so the realised mix is the requested one
    # (chains over the quota are skipped and counted); the plan and each corruption's choices are seeded.
    plan = pairs.plan_corruptions(usable, pref_mix, pool, seed)
    for chain in usable:
        corruption = plan[chain["chain_id"]]
        if corruption in (pairs.NO_CORRUPTION, pairs.OVER_QUOTA):
            out.skipped[corruption] += 1
            continue
        rejected = pairs.apply_corruption(chain, corruption, pool, random.Random(f"{seed}:{chain['chain_id']}"))
        _count_explanations(chain, out)
        out.rows.append({
            "prompt": prompts.critique_messages(chain, template),
            "chosen": [prompts.assistant_turn(prompts.critique_target(chain))],
            "rejected": [prompts.assistant_turn(critique.format_critique(rejected))],
            "corruption": corruption, **_ids(chain),
        })
        out.labels[corruption] += 1


def _outcome_rm(chains, template, out: _SplitRows, **_) -> None:
    known = [c for c in chains if c["chain_correct"] is not None]
    out.skipped["unknown_chain_label"] += len(chains) - len(known)
    chain_pairs, unpaired = pairs.outcome_pairs(known)
    out.skipped["no_contrast_in_group"] += len(unpaired)
    for good, bad in chain_pairs:
        prompt, chosen = prompts.outcome_messages(good, template)
        _, rejected = prompts.outcome_messages(bad, template)
        out.rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected, "images": [good["image"]],
                         "chosen_chain_id": good["chain_id"], "rejected_chain_id": bad["chain_id"],
                         "group_id": good["group_id"]})
    out.labels["chosen_chains"] = len({g["chain_id"] for g, _ in chain_pairs})
    out.labels["rejected_chains"] = len({b["chain_id"] for _, b in chain_pairs})


BUILDERS = {"critique-sft": _critique_sft, "verifier-sft": _verifier_sft, "prm-sft": _prm_sft,
            "critique-pref": _critique_pref, "outcome-rm": _outcome_rm}


def features(kind: str):
    """The `datasets.Features` of a built dataset of `kind` (messages in TRL's vision format)."""
    from datasets import Features, Image, List, Value

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
    }
    return Features(columns[kind])


# ----------------------------------------------------------------------------- entry point

# Kinds whose rows for a chain depend on that chain alone: built as a stream of batches written to Arrow files,
# so memory does not grow with the number of chains (critique-pref plans its mix and outcome-rm pairs chains
# over a whole split, so they still hold their chains).
STREAMED_KINDS = ("critique-sft", "verifier-sft", "prm-sft")
STREAM_BATCH = 256  # chains per batch


def _streamable(chains, kind: str) -> bool:
    from datasets import Dataset

    return (kind in STREAMED_KINDS and isinstance(chains, Dataset)
            and {"chain_id", "group_id"} <= set(chains.column_names))


def _stream_build(chains, kind: str, template, test_fraction: float, seed: int, tmp: str, step_labels: dict):
    """Build a streamed kind batch by batch into Arrow files under `tmp`; None when the chains lack group ids
    (they are derived from the image in validation: the in-memory path does that)."""
    from datasets import Dataset, DatasetDict, Image
    from datasets.arrow_writer import ArrowWriter

    ids = chains.select_columns(["chain_id", "group_id"]).to_list()  # two short strings per chain
    if not ids:
        raise BuildError("no chains to build from")
    if not all(r["group_id"] for r in ids):
        return None
    schema.check_unique_ids(r for r in ids if r["chain_id"])
    split_ids = split_by_group(ids, test_fraction, seed)
    held_out = {r["group_id"] for r in split_ids[HELD_OUT]}
    if "image" in chains.column_names:  # rows only need the encoded bytes
        chains = chains.cast_column("image", Image(decode=False))
    columns = features(kind)
    paths = {s: os.path.join(tmp, f"{s}.arrow") for s in SPLITS}
    writers = {s: ArrowWriter(features=columns, path=paths[s]) for s in SPLITS}
    produced = {s: _SplitRows() for s in SPLITS}
    sources: Counter = Counter()
    n_in = n_neutral = 0
    for batch in chains.iter(batch_size=STREAM_BATCH):
        by_split: dict[str, list] = {s: [] for s in SPLITS}
        for values in zip(*batch.values()):
            record = dict(zip(batch, values))
            chain = schema.validate_chain(record, where=str(record.get("chain_id") or f"chains[{n_in}]"))
            n_neutral += sum(map(labels.is_neutral, chain["steps"]))
            chain = labels.resolve_neutral(chain, step_labels["neutral"])
            by_split[HELD_OUT if chain["group_id"] in held_out else TRAIN].append(chain)
            sources[chain["source"]] += 1
            n_in += 1
        for s in SPLITS:
            out = produced[s]
            BUILDERS[kind](by_split[s], template, out, **step_labels)
            if out.rows:
                writers[s].write_batch(columns.encode_batch({k: [r.get(k) for r in out.rows] for k in columns}))
                out.n_rows += len(out.rows)
                out.rows.clear()
    for writer in writers.values():
        writer.finalize()
        writer.close()
    dataset = DatasetDict({s: Dataset.from_file(paths[s]) for s in SPLITS})
    return dataset, produced, _split_info(n_in, sources, split_ids, n_neutral)


def _memory_build(chains, kind: str, template, test_fraction: float, seed: int, mix: dict | None, step_labels: dict):
    """Build any kind with every chain in memory (critique-pref and outcome-rm plan over a whole split)."""
    from datasets import Dataset, DatasetDict

    records = _canonical_chains(chains)
    if not records:
        raise BuildError("no chains to build from")
    n_neutral = sum(labels.is_neutral(s) for c in records for s in c["steps"])
    records = [labels.resolve_neutral(c, step_labels["neutral"]) for c in records]
    split_chains = split_by_group(records, test_fraction, seed)
    produced = {}
    for split in SPLITS:
        produced[split] = _SplitRows()
        BUILDERS[kind](split_chains[split], template, produced[split], seed=seed, pref_mix=mix, **step_labels)
        produced[split].n_rows = len(produced[split].rows)
    columns = features(kind)
    # from_list([]) would yield a table without columns, which load_from_disk then rejects.
    dataset = DatasetDict({split: Dataset.from_list(produced[split].rows, features=columns) if produced[split].rows
                           else Dataset.from_dict({name: [] for name in columns}, features=columns)
                           for split in SPLITS})
    return dataset, produced, _split_info(len(records), Counter(c["source"] for c in records), split_chains, n_neutral)


def _split_info(n_in: int, sources: Counter, split_chains: dict, n_neutral: int) -> dict:
    """Chains read, their sources, neutral steps, and the groups and chains of each split (records with a group_id)."""
    return {"chains_in": n_in, "sources": sources, "neutral_steps": n_neutral,
            "groups": {s: len({c["group_id"] for c in split_chains[s]}) for s in SPLITS},
            "chains": {s: len(split_chains[s]) for s in SPLITS}}


def check_options(kind: str, test_fraction: float = 0.1, template: str | prompts.PromptTemplate | None = None,
                  pref_mix: dict | str | None = None, neutral: str = "skip", step_targets: str = "hard",
                  prm_notes: bool = False) -> tuple[prompts.PromptTemplate, dict | None]:
    """Check the build options before any chain is read; returns the loaded template and the parsed mix.

    `test_fraction` may be 0 here (everything in train); the command line asks for a held-out split.
    """
    if kind not in KINDS:
        raise BuildError(f"unknown dataset kind {kind!r}; expected one of {list(KINDS)}")
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or not 0 <= test_fraction < 1:
        raise BuildError(f"test_fraction must be in [0, 1), got {test_fraction!r}")
    if pref_mix is not None and kind != "critique-pref":
        raise BuildError(f"pref_mix only applies to kind 'critique-pref', not {kind!r}")
    if neutral not in labels.NEUTRAL_POLICIES:
        raise BuildError(f"neutral must be one of {list(labels.NEUTRAL_POLICIES)}, got {neutral!r}")
    if step_targets not in labels.STEP_TARGETS:
        raise BuildError(f"step_targets must be one of {list(labels.STEP_TARGETS)}, got {step_targets!r}")
    if step_targets != "hard" and kind != "prm-sft":
        raise BuildError(f"--step-targets {step_targets} only applies to kind 'prm-sft', not {kind!r}")
    if prm_notes and kind != "prm-sft":
        raise BuildError(f"--prm-notes only applies to kind 'prm-sft', not {kind!r}")
    try:
        loaded_template = prompts.load_template(template or prompts.DEFAULT_TEMPLATES[TEMPLATE_ROLE[kind]])
    except FileNotFoundError as e:
        raise BuildError(str(e)) from None
    mix = pairs.parse_pref_mix(pref_mix) if kind == "critique-pref" else None
    return loaded_template, mix


def build_dataset(chains, kind: str, out_dir: str, test_fraction: float = 0.1, seed: int = 0,
                  template: str | prompts.PromptTemplate | None = None, pref_mix: dict | str | None = None,
                  neutral: str = "skip", step_targets: str = "hard", prm_notes: bool = False) -> dict:
    """Build one dataset kind from canonical chains, save it under `out_dir`, return the build stats.

    `prm_notes` (prm-sft): each judgement comes after the step as it should read (`prompts.prm_note`)."""
    from stepcritic.data_prep.card import write_card

    loaded_template, mix = check_options(kind, test_fraction, template, pref_mix, neutral, step_targets, prm_notes)
    step_labels = {"neutral": neutral, "step_targets": step_targets}
    if kind == "prm-sft":
        step_labels["prm_notes"] = prm_notes
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(out_dir)), prefix=".build-") as tmp:
        built = _stream_build(chains, kind, loaded_template, test_fraction, seed, tmp, step_labels) \
            if _streamable(chains, kind) else None
        dataset, produced, info = built or _memory_build(chains, kind, loaded_template, test_fraction, seed, mix,
                                                         step_labels)
        # datasets writes no shard at all for an empty split and then cannot load it back: force one.
        dataset.save_to_disk(out_dir, num_shards={split: 1 if len(dataset[split]) == 0 else None for split in SPLITS})
        del dataset  # release the memory-mapped temporary files before they are removed

    skipped = sum((produced[s].skipped for s in SPLITS), Counter())  # Counter addition drops zero counts
    stats = {
        "kind": kind,
        "methods": list(KIND_SPECS[kind].methods),
        "chains_in": info["chains_in"],
        "chains_used": info["chains_in"] - sum(skipped.values()),
        "chains_skipped": dict(sorted(skipped.items())),
        "sources": dict(sorted(info["sources"].items())),
        "groups": info["groups"],
        "chains": info["chains"],
        "rows": {s: produced[s].n_rows for s in SPLITS},
        "label_balance": {s: dict(sorted(produced[s].labels.items())) for s in SPLITS},
        "template": {"name": loaded_template.name, "hash": loaded_template.hash},
        "test_fraction": test_fraction,
        "seed": seed,
        "neutral": {"policy": neutral, "steps": info["neutral_steps"]},
    }
    if kind == "prm-sft":
        stats["step_targets"] = step_targets
        stats["prm_notes"] = prm_notes
    if mix is not None:
        stats["pref_mix"] = {"weights": mix,
                             "realised": dict(sum((produced[s].labels for s in SPLITS), Counter()))}
    if kind in ("critique-sft", "critique-pref"):
        explained = sum((produced[s].explanations for s in SPLITS), Counter())
        stats["explanations"] = {"reference": explained["reference"], "placeholder": explained["placeholder"],
                                 "placeholder_text": critique.gold_critique(
                                     {"steps": [{"correct": False}]})["steps"][0]["explanation"]}
    with open(os.path.join(out_dir, STATS_FILE), "w") as f:
        json.dump(stats, f, indent=2, sort_keys=True)
    write_card(stats, os.path.join(out_dir, "README.md"))
    return stats
