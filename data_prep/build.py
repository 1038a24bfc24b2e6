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

Memory: the chains are read `CHAIN_BATCH` at a time from the chains set's files (plain reads, not the memory map,
`arrow_io.iter_rows`) and the rows written to Arrow in byte-bounded batches (`arrow_io.RowWriter`), so what grows
with the input is only its ids. critique-pref first reads the labels (no image) twice, for the split's explanation
pool and then its corruption plan; outcome-rm fetches a group's chains where it first appears. The rows are those of a
build that held every split at once (tests/test_data_streaming.py).
"""

from __future__ import annotations

import json
import os
from collections import Counter

from stepcritic.data_prep import build_rows, critique, labels, pairs, prompts, schema
from stepcritic.data_prep.arrow_io import RowWriter, iter_rows, save_files, temp_dir_beside
from stepcritic.data_prep.build_rows import BUILDERS, features  # noqa: F401 (the builders and columns, by kind)
from stepcritic.data_prep.contract import KIND_NAMES as KINDS
from stepcritic.data_prep.contract import KINDS as KIND_SPECS
from stepcritic.data_prep.contract import STATS_FILE
from stepcritic.data_prep.splits import HELD_OUT, SPLITS, TRAIN, split_by_group
from stepcritic.errors import UserError

TEMPLATE_ROLE = {"critique-sft": "critique", "verifier-sft": "verifier", "prm-sft": "prm",
                 "critique-pref": "critique", "outcome-rm": "outcome"}


class BuildError(UserError, ValueError):
    """Build options or chains the builder cannot use (unknown kind, bad test fraction, no chains, ...)."""


# ----------------------------------------------------------------------------- input

CHAIN_BATCH = 64  # chains validated and turned into rows at a time (rows are written in byte-bounded batches)


def _as_chains_dataset(chains, tmp: str):
    """The chains as a memory-mapped Dataset whose every row has a group id, images left encoded.

    A saved chains dataset is used as it is; a list of chain dicts, or a dataset with rows lacking a group id
    (validation derives it from the image), is validated and written to Arrow under `tmp` first, in bounded batches.
    """
    from datasets import Dataset

    if isinstance(chains, Dataset):
        if "image" in chains.column_names:  # rows only need the encoded bytes
            chains = schema.undecoded(chains)
        if {"chain_id", "group_id"} <= set(chains.column_names) and all(chains.data.column("group_id").to_pylist()):
            return chains
        records = (record for batch in iter_rows(chains, CHAIN_BATCH) for record in batch)
    elif isinstance(chains, (list, tuple)):
        records = iter(chains)
    else:
        raise TypeError(f"chains must be a datasets.Dataset or a list of chain dicts, got {type(chains).__name__}")
    writer = RowWriter(os.path.join(tmp, "chains.arrow"), schema.features())
    for i, record in enumerate(records):
        where = record.get("chain_id") if isinstance(record, dict) and record.get("chain_id") else f"chains[{i}]"
        writer.add(schema.validate_chain(record, where=str(where)))
    return schema.undecoded(writer.close())


class _Reader:
    """Validated chains of the input, with `--neutral` applied, counted once (sources, neutral steps)."""

    def __init__(self, chains, neutral: str):
        self.chains, self.neutral = chains, neutral
        self.n_in, self.n_neutral, self.sources = 0, 0, Counter()

    def validated(self, record: dict, count: bool) -> dict:
        chain = schema.validate_chain(record, where=str(record.get("chain_id") or f"chains[{self.n_in}]"))
        if count:
            self.n_in += 1
            self.n_neutral += sum(map(labels.is_neutral, chain["steps"]))
            self.sources[chain["source"]] += 1
        return labels.resolve_neutral(chain, self.neutral)

    def batches(self):
        """Lists of validated chains, `CHAIN_BATCH` at a time, in the dataset's order (counted)."""
        for batch in iter_rows(self.chains, CHAIN_BATCH):
            yield [self.validated(record, True) for record in batch]

    def labels_only(self):
        """Every validated chain without reading an image: label passes of the kinds planned over a whole split.
        Validation is given a one-pixel stand-in (group ids are already there; rows are never made from these)."""
        columns = [c for c in self.chains.column_names if c not in ("image", "extra_images")]
        for batch in iter_rows(self.chains, 1000, columns):
            for record in batch:
                yield self.validated(dict(record, image=_stand_in_image()), count=False)


_STAND_IN: dict = {}


def _stand_in_image() -> dict:
    if not _STAND_IN:
        import io

        from PIL import Image

        buf = io.BytesIO()
        Image.new("RGB", (1, 1)).save(buf, format="PNG")
        _STAND_IN.update(bytes=buf.getvalue(), path=None)
    return _STAND_IN


# ----------------------------------------------------------------------------- the build, streamed

def _split_groups(chains, test_fraction: float, seed: int) -> tuple[dict, set]:
    """The held-out groups (from the id columns alone) and the split summary for the stats."""
    chain_ids = chains.data.column("chain_id").to_pylist()
    group_ids = chains.data.column("group_id").to_pylist()
    schema.check_unique_ids({"chain_id": c} for c in chain_ids if c)
    split = split_by_group([{"group_id": g} for g in group_ids], test_fraction, seed)
    held_out = {r["group_id"] for r in split[HELD_OUT]}
    return {"groups": {s: len({r["group_id"] for r in split[s]}) for s in SPLITS},
            "chains": {s: len(split[s]) for s in SPLITS}}, held_out


def _whole_split_context(kind: str, reader: _Reader, held_out: set, mix: dict | None, seed: int) -> dict:
    """What critique-pref needs of each whole split before its first row: the explanation pool, then each usable
    chain's applicable corruptions and the plan realising the mix (two label passes, no image read)."""
    if kind != "critique-pref":
        return {s: {} for s in SPLITS}
    split_of = lambda chain: HELD_OUT if chain["group_id"] in held_out else TRAIN  # noqa: E731
    pools = {s: pairs.ExplanationPool() for s in SPLITS}
    for chain in reader.labels_only():
        pools[split_of(chain)].add(chain)
    options: dict[str, dict] = {s: {} for s in SPLITS}
    for chain in reader.labels_only():
        if build_rows._critique_skip_reason(chain) is None:
            split = split_of(chain)
            options[split][chain["chain_id"]] = tuple(pairs.applicable(chain, mix, pools[split]))
    return {s: {"pool": pools[s], "plan": pairs.plan_from_options(options[s], mix, seed)} for s in SPLITS}


def _whole_groups(reader: _Reader, chains):
    """Batches of whole groups in order of first appearance (outcome-rm pairs chains within a group, and its rows
    come in the order a whole-split build gives), from one sequential read.

    Where a group first appears, its other chains are fetched at once unless they are the rows right after it (the
    same scene and question drawn twice far apart, say) and passed over when the read reaches them: a group is
    complete by the time the next one starts, and memory holds one batch, whatever the order of the input."""
    positions: dict[str, list[int]] = {}
    for i, group in enumerate(chains.data.column("group_id").to_pylist()):
        positions.setdefault(group, []).append(i)
    fetched: set[int] = set()
    ready: list[dict] = []
    i = -1
    for batch in reader.batches():
        for chain in batch:
            i += 1
            if i in fetched:
                fetched.discard(i)
                continue
            if len(ready) >= CHAIN_BATCH and chain["group_id"] != ready[-1]["group_id"]:
                yield ready
                ready = []
            ready.append(chain)
            place = positions[chain["group_id"]]
            if place[0] == i and len(place) > 1 and place[-1] - i != len(place) - 1:  # the rest is elsewhere
                rest = place[1:]
                # counted when the read reaches them
                ready += [reader.validated(r, False) for b in iter_rows(chains.select(rest), CHAIN_BATCH) for r in b]
                fetched.update(rest)
    if ready:
        yield ready


def _stream_build(chains, kind: str, template, test_fraction: float, seed: int, tmp: str, step_labels: dict,
                  mix: dict | None):
    """Build `kind` batch by batch into one Arrow file per split under `tmp`; memory holds one batch of chains
    and rows (and ids), never the whole input."""
    chains = _as_chains_dataset(chains, tmp)
    if len(chains) == 0:
        raise BuildError("no chains to build from")
    split_info, held_out = _split_groups(chains, test_fraction, seed)
    reader = _Reader(chains, step_labels["neutral"])
    context = _whole_split_context(kind, reader, held_out, mix, seed)
    columns = build_rows.features(kind, step_labels.get("verifier_layout", "rows"))
    writers = {s: RowWriter(os.path.join(tmp, f"{s}.arrow"), columns) for s in SPLITS}
    produced = {s: build_rows._SplitRows() for s in SPLITS}
    batches = reader.batches()
    if kind == "outcome-rm":
        batches = _whole_groups(reader, chains)
    for batch in batches:
        by_split: dict[str, list] = {s: [] for s in SPLITS}
        for chain in batch:
            by_split[HELD_OUT if chain["group_id"] in held_out else TRAIN].append(chain)
        for s in SPLITS:
            if not by_split[s]:
                continue
            out = produced[s]
            BUILDERS[kind](by_split[s], template, out, seed=seed, pref_mix=mix, **context[s], **step_labels)
            writers[s].extend(out.rows)
            out.n_rows += len(out.rows)
            out.rows.clear()
    assert reader.n_in == len(chains)  # every chain read once
    for s in SPLITS:
        writers[s].close()
    info = {"chains_in": reader.n_in, "sources": reader.sources, "neutral_steps": reader.n_neutral, **split_info}
    return writers, produced, info


def check_options(kind: str, test_fraction: float = 0.1, template: str | prompts.PromptTemplate | None = None,
                  pref_mix: dict | str | None = None, neutral: str = "skip", step_targets: str = "hard",
                  prm_notes: bool = False,
                  verifier_layout: str = "rows") -> tuple[prompts.PromptTemplate, dict | None]:
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
    if verifier_layout not in build_rows.VERIFIER_LAYOUTS:
        raise BuildError(f"verifier_layout must be one of {list(build_rows.VERIFIER_LAYOUTS)}, "
                         f"got {verifier_layout!r}")
    if verifier_layout != "rows" and kind != "verifier-sft":
        raise BuildError(f"--verifier-layout {verifier_layout} only applies to kind 'verifier-sft', not {kind!r}")
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
                  neutral: str = "skip", step_targets: str = "hard", prm_notes: bool = False,
                  verifier_layout: str = "rows") -> dict:
    """Build one dataset kind from canonical chains, save it under `out_dir`, return the build stats.

    `prm_notes` (prm-sft): each judgement comes after the step as it should read (`prompts.prm_note`).
    `verifier_layout` (verifier-sft): "rows", "task" or "chain" (`build_rows.VERIFIER_LAYOUTS`)."""
    from stepcritic.data_prep.card import write_card

    loaded_template, mix = check_options(kind, test_fraction, template, pref_mix, neutral, step_targets, prm_notes,
                                         verifier_layout)
    step_labels = {"neutral": neutral, "step_targets": step_targets}
    if kind == "prm-sft":
        step_labels["prm_notes"] = prm_notes
    if kind == "verifier-sft":
        step_labels["verifier_layout"] = verifier_layout
    os.makedirs(out_dir, exist_ok=True)
    with temp_dir_beside(out_dir, ".build-") as tmp:
        writers, produced, info = _stream_build(chains, kind, loaded_template, test_fraction, seed, tmp, step_labels,
                                                mix)
        save_files({s: writers[s].path for s in SPLITS}, writers[TRAIN].features, out_dir,
                   {s: writers[s].n_rows for s in SPLITS})

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
    if kind == "verifier-sft":
        stats["verifier_layout"] = verifier_layout
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
