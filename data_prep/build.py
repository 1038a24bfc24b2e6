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
- policy-sft:    {"messages": [user=image + question, assistant=a clean chain, one step per line], "images", ...}

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

`num_proc` > 1: forked worker processes validate each batch of chains and make and encode its rows (`_RowMaker`),
a few batches per worker in flight; this process reads the chains, does critique-pref's label passes and
outcome-rm's grouping (and so its validation), and writes the rows in the input's order, in the record batches a
build in one process writes (`arrow_io.RowWriter.add_encoded`): the same files and stats for any `num_proc`
(tests/test_build_num_proc.py).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import Counter, deque
from dataclasses import dataclass, field

from stepcritic.data_prep import build_rows, critique, labels, pairs, prompts, schema
from stepcritic.data_prep.arrow_io import EncodedRows, RowWriter, iter_rows, save_files, temp_dir_beside
from stepcritic.data_prep.build_rows import BUILDERS, features  # noqa: F401 (the builders and columns, by kind)
from stepcritic.data_prep.contract import KIND_NAMES as KINDS
from stepcritic.data_prep.contract import KINDS as KIND_SPECS
from stepcritic.data_prep.contract import STATS_FILE
from stepcritic.data_prep.splits import HELD_OUT, SPLITS, TRAIN, split_by_group
from stepcritic.errors import UserError

TEMPLATE_ROLE = {"critique-sft": "critique", "verifier-sft": "verifier", "prm-sft": "prm",
                 "critique-pref": "critique", "outcome-rm": "outcome", "policy-sft": "policy"}


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


@dataclass
class _Counts:
    """What is counted of the chains read: how many, their neutral steps (before `--neutral`), their sources."""

    n_in: int = 0
    n_neutral: int = 0
    n_explained: int = 0  # steps with a reference critique: what an empty critique build's error mentions
    n_text_only: int = 0  # chains without an image (training checks a text-only set against the model)
    sources: Counter = field(default_factory=Counter)

    def add(self, chain: dict) -> None:
        self.n_in += 1
        self.n_text_only += schema.is_text_only(chain)
        self.n_neutral += sum(map(labels.is_neutral, chain["steps"]))
        self.n_explained += sum(bool(s.get("explanations")) for s in chain["steps"])
        self.sources[chain["source"]] += 1

    def merge(self, other: _Counts) -> None:
        self.n_in += other.n_in
        self.n_neutral += other.n_neutral
        self.n_explained += other.n_explained
        self.n_text_only += other.n_text_only
        self.sources.update(other.sources)


def _validated(record: dict, index: int, neutral: str, counts: _Counts | None = None) -> dict:
    """The input's chain at `index` (named so when it has no id) checked, counted into `counts`, `--neutral` applied."""
    chain = schema.validate_chain(record, where=str(record.get("chain_id") or f"chains[{index}]"))
    if counts is not None:
        counts.add(chain)
    return labels.resolve_neutral(chain, neutral)


class _Reader:
    """The chains of the input, read in order, and what was counted of them once validated (`counts`)."""

    def __init__(self, chains, neutral: str):
        self.chains, self.neutral = chains, neutral
        self.counts = _Counts()

    def batches(self):
        """(index of the first, records as stored) `CHAIN_BATCH` at a time, in the dataset's order; validating and
        counting them is the row maker's (`_RowMaker.rows`), in this process or a worker."""
        first = 0
        for batch in iter_rows(self.chains, CHAIN_BATCH):
            yield first, batch
            first += len(batch)

    def labels_only(self):
        """Every validated chain without reading an image: label passes of the kinds planned over a whole split.
        Validation is given a one-pixel stand-in (group ids are already there; rows are never made from these)."""
        columns = [c for c in self.chains.column_names if c not in ("image", "extra_images")]
        index = 0
        for batch in iter_rows(self.chains, 1000, columns):
            for record in batch:
                yield _validated(dict(record, image=_stand_in_image()), index, self.neutral)
                index += 1


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
    come in the order a whole-split build gives), from one sequential read, validated and counted here.

    Where a group first appears, its other chains are fetched at once unless they are the rows right after it (the
    same scene and question drawn twice far apart, say) and passed over when the read reaches them: a group is
    complete by the time the next one starts, and memory holds one batch, whatever the order of the input."""
    positions: dict[str, list[int]] = {}
    for i, group in enumerate(chains.data.column("group_id").to_pylist()):
        positions.setdefault(group, []).append(i)
    fetched: set[int] = set()
    ready: list[dict] = []
    for first, records in reader.batches():
        batch = [_validated(record, i, reader.neutral, reader.counts) for i, record in enumerate(records, first)]
        for i, chain in enumerate(batch, first):
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
                records = [r for b in iter_rows(chains.select(rest), CHAIN_BATCH) for r in b]
                ready += [_validated(r, j, reader.neutral) for j, r in zip(rest, records)]  # counted when reached
                fetched.update(rest)
    if ready:
        yield ready


@dataclass
class _Made:
    """What one batch of chains gave: what was counted of the chains it validated, and each split's rows and counts.
    From a worker process the rows come as Arrow (`arrow`) and `splits[s].rows` is empty."""

    counts: _Counts
    splits: dict[str, build_rows._SplitRows]
    arrow: dict[str, EncodedRows] = field(default_factory=dict)


@dataclass
class _RowMaker:
    """Turns one batch of chains into rows of `kind`, each chain in its split: the per-batch work of a build, the
    same in this process and in a worker (which gets it when forked: held-out groups, context and all)."""

    kind: str
    template: prompts.PromptTemplate
    held_out: set
    context: dict  # per split: what the kind needs of the whole split (critique-pref's pool and plan)
    options: dict  # seed, pref_mix and the step-label options, passed on to the builder
    columns: object  # the built dataset's `datasets.Features`

    def rows(self, records: list[dict], first: int | None) -> _Made:
        """`records`: rows of the input from index `first` on, validated and counted here; or, `first` None, chains
        already validated and counted (outcome-rm's whole groups, put together in the reading process)."""
        counts = _Counts()
        chains = records
        if first is not None:
            neutral = self.options["neutral"]
            chains = [_validated(record, i, neutral, counts) for i, record in enumerate(records, first)]
        by_split: dict[str, list] = {s: [] for s in SPLITS}
        for chain in chains:
            by_split[HELD_OUT if chain["group_id"] in self.held_out else TRAIN].append(chain)
        splits = {}
        for s in SPLITS:
            if by_split[s]:
                splits[s] = build_rows._SplitRows()
                BUILDERS[self.kind](by_split[s], self.template, splits[s], **self.context[s], **self.options)
        return _Made(counts, splits)

    def arrow(self, records: list[dict], first: int | None) -> _Made:
        """`rows`, encoded to Arrow where they were made (`EncodedRows`): encoding is as much of the work as making them
        (verifier-sft), and this way the writing process only joins and writes them."""
        made = self.rows(records, first)
        for s, out in made.splits.items():
            made.arrow[s] = EncodedRows.of(out.rows, self.columns)
            out.rows = []
        return made


_MAKER: _RowMaker | None = None  # a worker process's row maker


def _worker_init(maker: _RowMaker) -> None:
    import signal

    global _MAKER
    _MAKER = maker
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the pool


def _worker_rows(records: list[dict], first: int | None) -> _Made:
    return _MAKER.arrow(records, first)


def _made_in_workers(maker: _RowMaker, batches, num_proc: int):
    """`maker.arrow` of every batch, in order, from `num_proc` forked worker processes. At most two batches per
    worker are in flight (`Executor.map` would submit the whole input first), so memory holds a few batches of
    chains and of their rows, whatever the input's size.

    A `UserError` from a worker (a chain that does not validate, say) is raised here as it is, without the
    worker's traceback, so the command reports it in one line as a build in one process does."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # forked (as ingest's workers are): they start with the maker as it is, no pickling of the held-out groups or
    # critique-pref's plan, and leave with os._exit, so they never flush this process's open writers
    pool = ProcessPoolExecutor(num_proc, mp_context=multiprocessing.get_context("fork"), initializer=_worker_init,
                               initargs=(maker,))
    pending: deque = deque()
    try:
        for first, records in batches:
            pending.append(pool.submit(_worker_rows, records, first))
            if len(pending) >= 2 * num_proc:
                yield _result(pending.popleft())
        while pending:
            yield _result(pending.popleft())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _result(future) -> _Made:
    from concurrent.futures.process import BrokenProcessPool

    try:
        return future.result()
    except UserError as e:
        raise e from None
    except BrokenProcessPool:
        raise BuildError("a --num-proc worker process ended abruptly (killed, or out of memory?); try fewer "
                         "processes") from None


def _stream_build(chains, kind: str, template, test_fraction: float, seed: int, tmp: str, step_labels: dict,
                  mix: dict | None, num_proc: int = 1, progress: bool = False):
    """Build `kind` batch by batch into one Arrow file per split under `tmp`; memory holds one batch of chains
    and rows (and ids), never the whole input. With `num_proc` > 1 worker processes make the batches' rows, and
    this process reads the chains and writes the rows, in the same order. `progress`: a bar of chains read and
    rows written, on stderr."""
    from stepcritic.data_prep.progress import bar

    chains = _as_chains_dataset(chains, tmp)
    if len(chains) == 0:
        raise BuildError("no chains to build from")
    split_info, held_out = _split_groups(chains, test_fraction, seed)
    reader = _Reader(chains, step_labels["neutral"])
    context = _whole_split_context(kind, reader, held_out, mix, seed)
    columns = build_rows.features(kind, step_labels.get("verifier_layout", "rows"))
    maker = _RowMaker(kind, template, held_out, context, dict(seed=seed, pref_mix=mix, **step_labels), columns)
    batches = reader.batches()
    if kind == "outcome-rm":
        batches = ((None, group_batch) for group_batch in _whole_groups(reader, chains))
    writers = {s: RowWriter(os.path.join(tmp, f"{s}.arrow"), columns) for s in SPLITS}
    if num_proc > 1:
        making = contextlib.closing(_made_in_workers(maker, batches, num_proc))  # closed: the workers stop
    else:
        making = contextlib.nullcontext(maker.rows(records, first) for first, records in batches)
    produced = {s: build_rows._SplitRows() for s in SPLITS}
    with making as made_batches, bar(progress, f"build {kind}", total=len(chains)) as shown:
        for made in made_batches:
            reader.counts.merge(made.counts)
            for s, out in made.splits.items():
                total = produced[s]  # Counter.update keeps the zero counts a builder sets, as one _SplitRows does
                total.skipped.update(out.skipped)
                total.labels.update(out.labels)
                total.explanations.update(out.explanations)
                if s in made.arrow:
                    writers[s].add_encoded(made.arrow[s])
                    total.n_rows += len(made.arrow[s])
                else:
                    writers[s].extend(out.rows)
                    total.n_rows += len(out.rows)
            shown.set_postfix_str(f"{sum(produced[s].n_rows for s in SPLITS)} rows written", refresh=False)
            shown.update(reader.counts.n_in - shown.n)
    assert reader.counts.n_in == len(chains)  # every chain read once
    for s in SPLITS:
        writers[s].close()
    info = {"chains_in": reader.counts.n_in, "sources": reader.counts.sources,
            "neutral_steps": reader.counts.n_neutral, "explained_steps": reader.counts.n_explained,
            "text_only_chains": reader.counts.n_text_only, **split_info}
    return writers, produced, info


def check_options(kind: str, test_fraction: float = 0.1, template: str | prompts.PromptTemplate | None = None,
                  pref_mix: dict | str | None = None, neutral: str = "skip", step_targets: str = "hard",
                  prm_notes: bool = False, verifier_layout: str = "rows",
                  num_proc: int = 1, critique_notes: bool = False) -> tuple[prompts.PromptTemplate, dict | None]:
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
    if prm_notes not in (None, False, True, *prompts.PRM_NOTE_STYLES):
        raise BuildError(f"--prm-notes takes one of {', '.join(prompts.PRM_NOTE_STYLES)}, got {prm_notes!r}")
    if critique_notes and kind not in ("critique-sft", "critique-pref"):
        raise BuildError(f"--critique-notes only applies to kinds 'critique-sft' and 'critique-pref', not {kind!r}")
    if critique_notes not in (None, False, True, *prompts.PRM_NOTE_STYLES):
        raise BuildError(f"--critique-notes takes one of {', '.join(prompts.PRM_NOTE_STYLES)}, got {critique_notes!r}")
    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise BuildError(f"--num-proc must be a positive number of processes, got {num_proc!r}")
    try:
        loaded_template = prompts.load_template(template or prompts.DEFAULT_TEMPLATES[TEMPLATE_ROLE[kind]])
    except FileNotFoundError as e:
        raise BuildError(str(e)) from None
    mix = pairs.parse_pref_mix(pref_mix) if kind == "critique-pref" else None
    return loaded_template, mix


def _input_paths(chains, template) -> dict[str, str]:
    """The files a build reads, for `outputs.check_inputs`: the chains' folders, and a template given as a file."""
    from datasets import Dataset

    paths = {}
    if isinstance(chains, Dataset):
        for i, cache_file in enumerate(chains.cache_files):
            paths[f"the chains' folder{f' {i + 1}' if i else ''}"] = os.path.dirname(cache_file["filename"])
    if isinstance(template, str) and os.path.isfile(template):
        paths["--template"] = template
    return paths


# why a chain gave no row (build_stats.json's `chains_skipped` names), as a build that writes none says it
SKIP_REASONS = {
    "unknown_answer_label": "have no verdict on the final answer (answer_correct)",
    "unknown_step_label": "have a step without a verdict",
    "neutral_step": "have a neutral step (--neutral skip)",
    "no_verifier_labels": "have no label a verifier question asks for",
    "no_note": "have an incorrect step with neither a correction nor a reference critique (--prm-notes, "
               "--critique-notes), or no step checks (--prm-notes check: synthetic chains have them)",
    "unknown_chain_label": "have no chain verdict (chain_correct)",
    "no_contrast_in_group": "have no chain of the other verdict in their group (the same image and question)",
    "not_clean": "have a step that is not labelled correct, or an answer that is not (policy-sft trains on clean "
                 "chains only)",
    pairs.NO_CORRUPTION: "take no corruption of the mix",
    pairs.OVER_QUOTA: "are over their corruption's share of the mix",
}


def _nothing_to_write(kind: str, n_chains: int, skipped: Counter, n_explained: int) -> str:
    """Why a build gave no row at all, and what to build instead: one line."""
    reasons = ", ".join(f"{n} {SKIP_REASONS.get(reason, reason)}" for reason, n in skipped.most_common())
    hints = []
    if kind in ("critique-sft", "critique-pref") and {"unknown_answer_label", "unknown_step_label", "neutral_step"} \
            & set(skipped):
        hints.append("no chain has a critique to train on, which needs a verdict on every step and on the final "
                     "answer" + (" (and no step has a reference critique either)" if not n_explained else ""))
        if "unknown_answer_label" in skipped:
            hints.append("--kind prm-sft needs step verdicts only")
    if "neutral_step" in skipped and "unknown_answer_label" not in skipped:  # else a verdict would not be enough
        hints.append("--neutral correct or incorrect gives neutral steps a verdict")
    if kind == "critique-pref" and {pairs.NO_CORRUPTION, pairs.OVER_QUOTA} & set(skipped):
        hints.append("--pref-mix decides which corruptions apply; --kind critique-sft trains on the chains as they are")
    if "unknown_step_label" in skipped and kind == "prm-sft":
        hints.append("--kind verifier-sft asks for whichever labels there are")
    if "no_note" in skipped:
        hints.append("without --prm-notes these chains give rows")
    if kind == "outcome-rm":
        hints.append("outcome-rm pairs a correct and an incorrect chain of one image and question; --kind prm-sft "
                     "and verifier-sft learn from chains one at a time")
    return (f"no {kind} row to write: none of the {n_chains} chains gives one ({reasons})"
            + (": " + "; ".join(hints) if hints else "") + "; nothing written")


def build_dataset(chains, kind: str, out_dir: str, test_fraction: float = 0.1, seed: int = 0,
                  template: str | prompts.PromptTemplate | None = None, pref_mix: dict | str | None = None,
                  neutral: str = "skip", step_targets: str = "hard", prm_notes: bool = False,
                  verifier_layout: str = "rows", num_proc: int = 1, overwrite: bool = True,
                  allow_empty: bool = True, progress: bool = False, critique_notes: bool = False) -> dict:
    """Build one dataset kind from canonical chains, save it under `out_dir`, return the build stats.

    `prm_notes` (prm-sft): each judgement comes after the step as it should read (`critique.step_note`).
    `critique_notes` (critique-sft, critique-pref): each step of the critique says what the image shows ("shows",
    the same note) before its verdict.
    `verifier_layout` (verifier-sft): "rows", "task" or "chain" (`build_rows.VERIFIER_LAYOUTS`).
    `num_proc`: processes that make the rows (above 1, forked workers); the dataset and stats are the same.

    The dataset appears at `out_dir` only once complete (`outputs.staged`): a build that fails or is killed leaves
    what was there. `out_dir` may not be, be inside or contain the chains' folder or the template file; an existing
    one is replaced, or, `overwrite` False, refused before any chain is read. `allow_empty` False refuses a build
    that gives no row at all, saying why (`BuildError`), and writes nothing. `progress`: a bar on stderr."""
    from stepcritic.data_prep import outputs

    loaded_template, mix = check_options(kind, test_fraction, template, pref_mix, neutral, step_targets, prm_notes,
                                         verifier_layout, num_proc, critique_notes)
    step_labels = {"neutral": neutral, "step_targets": step_targets}
    if kind == "prm-sft":
        step_labels["prm_notes"] = prm_notes
    if kind == "verifier-sft":
        step_labels["verifier_layout"] = verifier_layout
    if kind in ("critique-sft", "critique-pref"):
        step_labels["critique_notes"] = critique_notes
    with outputs.staged(out_dir, overwrite, _input_paths(chains, template)) as target:
        stats = _build_into(chains, kind, target, loaded_template, mix, test_fraction, seed, step_labels, num_proc,
                            allow_empty, progress)
    return stats


def _build_into(chains, kind: str, out_dir: str, loaded_template, mix: dict | None, test_fraction: float, seed: int,
                step_labels: dict, num_proc: int, allow_empty: bool, progress: bool) -> dict:
    """`build_dataset`'s work, writing at `out_dir` (the staged folder)."""
    from stepcritic.data_prep.card import write_card

    neutral, step_targets = step_labels["neutral"], step_labels["step_targets"]
    prm_notes, verifier_layout = step_labels.get("prm_notes", False), step_labels.get("verifier_layout", "rows")
    with temp_dir_beside(out_dir, ".build-") as tmp:
        writers, produced, info = _stream_build(chains, kind, loaded_template, test_fraction, seed, tmp, step_labels,
                                                mix, num_proc, progress)
        if not allow_empty and not any(writers[s].n_rows for s in SPLITS):
            skipped = sum((produced[s].skipped for s in SPLITS), Counter())
            raise BuildError(_nothing_to_write(kind, info["chains_in"], skipped, info["explained_steps"]))
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
        "text_only_chains": info["text_only_chains"],
    }
    if kind == "prm-sft":
        stats["step_targets"] = step_targets
        stats["prm_notes"] = prm_notes
    if kind == "verifier-sft":
        stats["verifier_layout"] = verifier_layout
    if kind in ("critique-sft", "critique-pref"):
        stats["critique_notes"] = step_labels.get("critique_notes", False)
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
