"""Ingest annotated chains from a source format into the canonical schema.

Every input record ends up either kept or rejected, never dropped: `stats.json` holds both counts and
every rejection with its file:line, field and reason. With `on_error="fail"` the first bad record stops
the run with an `IngestError` naming it.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
from collections import Counter, defaultdict
from typing import Iterator

from stepcritic.data_prep import labels
from stepcritic.data_prep.card import write_ingest_card
from stepcritic.data_prep.schema import CHAINS_STATS_FILE, SchemaError, json_error, parse_json_line, validate_chain
from stepcritic.errors import UserError

# format -> adapter module; each exposes `convert(raw, where, ctx) -> dict` (a chain before validation, or a list
# of them: a pairwise item gives one chain per response, kept or rejected together), `default_image_root(input_path)
# -> str|None`, and optionally `check(chains, stats)` for source-specific consistency checks recorded in the stats.
FORMATS = {
    "miceval": "stepcritic.data_prep.adapters.miceval",
    "visco": "stepcritic.data_prep.adapters.visco",
    "stepwise": "stepcritic.data_prep.adapters.stepwise",
    "jsonl": "stepcritic.data_prep.adapters.canonical",
    "visualprocessbench": "stepcritic.data_prep.adapters.visualprocessbench",
    "visualprm": "stepcritic.data_prep.adapters.visualprm",
    "vl-rewardbench": "stepcritic.data_prep.adapters.vl_rewardbench",
    "multimodal-rewardbench": "stepcritic.data_prep.adapters.multimodal_rewardbench",
    "mm-rlhf-rewardbench": "stepcritic.data_prep.adapters.mm_rlhf_rewardbench",
    "processbench": "stepcritic.data_prep.adapters.processbench",
    "prmbench": "stepcritic.data_prep.adapters.prmbench",
}

STEP_ASPECTS = ("type", "correct", "description_correctness", "description_relevance", "logic_correct",
                "logic_relevant", "informative", "logic_error", "human_score", "rating")


# what stats["label_notes"] counts (every key, zeros included, so a reader can tell "none" from "not counted")
NOTE_KEYS = ("neutral_steps", "soft_labelled_steps", "soft_labelled_correct", "soft_labelled_incorrect",
             "multi_image_chains", "extra_images")


class IngestError(UserError, RuntimeError):
    """Input that cannot be ingested at all (missing file, unknown format, every record rejected)."""


def read_records(path: str) -> Iterator[tuple[str, object]]:
    """Yield (where, record) for .jsonl/.json/.parquet input; a malformed line yields a SchemaError."""
    name = os.path.basename(path)
    if path.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:  # one row group's worth of rows at a time, never the whole table
            batches = pq.ParquetFile(path).iter_batches(batch_size=256)
            i = 0
            for batch in batches:
                for rec in batch.to_pylist():
                    i += 1
                    yield f"{name}:row{i}", rec
        except (pa.ArrowException, OSError) as e:
            raise IngestError(f"{path}: unreadable parquet file ({' '.join(str(e).split())})") from None
        return
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            try:  # trailing blank lines left out, so that a document cut short is reported on its last line
                data = json.loads(f.read().rstrip("\r\n"))
            except UnicodeDecodeError as e:
                raise IngestError(f"{path}: not UTF-8 text ({e.reason}); expected JSON") from None
            except json.JSONDecodeError as e:
                yield f"{name}:{e.lineno}", SchemaError(f"malformed JSON ({json_error(e)})",
                                                        f"{name}:{e.lineno}")
                return
        for i, rec in enumerate(data if isinstance(data, list) else [data], 1):
            yield f"{name}:item{i}", rec
        return
    with open(path, encoding="utf-8") as f:
        lineno = 0
        try:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{name}:{lineno}"
                try:
                    record = parse_json_line(line, where)
                except SchemaError as e:  # rejected in turn like any other bad record
                    record = e
                yield where, record
        except UnicodeDecodeError as e:
            raise IngestError(f"{path}:{lineno + 1}: not UTF-8 text ({e.reason}); expected JSON lines") from None


# the summary line's counts, in this order for every format: records in = kept + rejected, then what the kept
# records hold (a pairwise record is one chain per response, so chains may outnumber the records kept)
SUMMARY_KEYS = ("n_records", "n_kept", "n_rejected", "n_chains", "n_steps")


def summary_lines(stats: dict, out: str | None) -> list[str]:
    """What `data ingest` prints once done: one summary line of the same counts for every format, then a note for
    each thing the counts do not say (rejections listed in a file, neutral, soft-labelled, multi-image and text-only
    chains, a source's own chain-label check)."""
    assert stats["n_records"] == stats["n_kept"] + stats["n_rejected"]  # nothing lost between in and out
    lines = ["ingested " + ", ".join(f"{k}={stats[k]}" for k in SUMMARY_KEYS) + f" -> {out}"]
    if "rejected_file" in stats:
        lines.append(f"note: every rejected record is listed in {out}/{stats['rejected_file']}")
    notes = stats["label_notes"]
    if notes["neutral_steps"]:
        lines.append(f"note: {notes['neutral_steps']} neutral steps keep correct=null (data build --neutral decides)")
    if notes["soft_labelled_steps"]:
        lines.append(f"note: {notes['soft_labelled_steps']} steps with a soft label; above {stats['soft_threshold']}: "
                     f"{notes['soft_labelled_correct']} correct, {notes['soft_labelled_incorrect']} incorrect")
    if notes["multi_image_chains"]:
        lines.append(f"note: {notes['multi_image_chains']} chains show several images ({notes['extra_images']} "
                     "beyond the first), all kept in order; ids in stats.json multi_image_chains")
    if stats["text_only_chains"]:
        lines.append(f"note: {stats['text_only_chains']} chains are text only (no image)")
    if "chain_label_check" in stats:
        check = stats["chain_label_check"]
        lines.append(f"step-derived chain correctness vs {check['field']}: {check['agree']} agree, "
                     f"{check['disagree']} disagree")
    return lines


class LabelCounts:
    """Per-aspect label counts over the kept chains, added one chain at a time."""

    def __init__(self):
        self.counts: dict[str, Counter] = defaultdict(Counter)

    def add(self, c: dict) -> None:
        counts = self.counts
        counts["chain_correct"][str(c["chain_correct"])] += 1
        counts["answer_correct"][str(c["answer_correct"])] += 1
        for s in c["steps"]:
            for aspect in STEP_ASPECTS:
                counts[aspect][str(s[aspect])] += 1
            for e in s["description_errors"]:
                counts["description_errors"][e] += 1

    def result(self) -> dict:
        return {k: dict(sorted(v.items())) for k, v in sorted(self.counts.items())}


# Up to this many rejections are listed in stats.json itself; beyond it stats.json keeps the first ones and every
# rejection is listed in rejected.jsonl beside it (a few hundred thousand records with a systematic fault would
# otherwise make stats.json, and the memory that holds it, as big as the input's error list).
REJECTED_INLINE = 1000
REJECTED_FILE = "rejected.jsonl"


def _convert(adapter, ctx: dict, soft_threshold: float, where: str, raw) -> list[dict] | SchemaError:
    """One record to its validated chains, or the SchemaError that rejects it (returned: it may cross processes).
    A record is kept or rejected whole: a pair missing one response is no pair."""
    try:
        if isinstance(raw, SchemaError):
            raise raw
        converted = adapter.convert(raw, where, ctx)
        records = converted if isinstance(converted, list) else [converted]
        return [validate_chain(record, where, ctx["image_root"], soft_threshold) for record in records]
    except SchemaError as e:
        return e


def _duplicate(chains: list[dict], seen: set[str], where: str) -> SchemaError | None:
    """The error for a chain id already kept, or given twice by one record; None when every id is new."""
    ids = [c["chain_id"] for c in chains]
    for i, chain_id in enumerate(ids):
        if chain_id in seen or chain_id in ids[:i]:
            return SchemaError(f"duplicate chain_id {chain_id!r}", where, "chain_id")
    return None


def _worker_init(fmt: str, ctx: dict, soft_threshold: float) -> None:
    global _WORKER
    _WORKER = (importlib.import_module(FORMATS[fmt]), ctx, soft_threshold)


def _worker_convert(item: tuple[str, object]):
    adapter, ctx, soft_threshold = _WORKER
    return _convert(adapter, ctx, soft_threshold, *item)


_WORKER: tuple | None = None
# records handed to the worker processes at a time: enough to keep them busy, few enough to bound memory
NUM_PROC_WINDOW = 512


def _converted(fmt: str, adapter, records, ctx: dict, soft_threshold: float, num_proc: int):
    """(where, chain or SchemaError) for every record in input order; `num_proc` > 1 converts in worker processes,
    a bounded window of records at a time (Pool.imap would read the whole input ahead)."""
    if num_proc <= 1:
        for where, raw in records:
            yield where, _convert(adapter, ctx, soft_threshold, where, raw)
        return
    import itertools
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(num_proc, _worker_init, (fmt, ctx, soft_threshold)) as pool:
        records = iter(records)
        while window := list(itertools.islice(records, NUM_PROC_WINDOW)):
            results = pool.map(_worker_convert, window, chunksize=max(1, len(window) // (4 * num_proc)))
            for (where, _), result in zip(window, results):
                yield where, result


def ingest(fmt: str, input_path: str, out_dir: str | None, image_root: str | None = None,
           on_error: str = "fail", log=print, soft_threshold: float = labels.SOFT_THRESHOLD, num_proc: int = 1,
           overwrite: bool = True, progress: bool = False) -> dict:
    """Convert `input_path` in format `fmt` into a canonical chains dataset at `out_dir`; return the stats.

    Records are read, converted and written to Arrow one at a time (`num_proc` worker processes convert them when
    above 1), so memory does not grow with the input; the chains folder appears at `out_dir` only once every record
    has been read and it is complete (`outputs.staged`). `out_dir` may not be or contain the input or the image
    root, nor be below the image root where a file or a folder other than an earlier output already is; an existing
    one is replaced, or, `overwrite` False, refused before anything is read. Steps with a soft label (a score in
    [0, 1]) and no boolean are correct when the score is above `soft_threshold`. Rejections are listed in the stats
    (past `REJECTED_INLINE`, in `rejected.jsonl` as well). `progress`: a bar on stderr.
    """
    if fmt not in FORMATS:
        raise IngestError(f"unknown format {fmt!r}; choose one of {sorted(FORMATS)}")
    if on_error not in ("fail", "skip"):
        raise IngestError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
    if isinstance(soft_threshold, bool) or not isinstance(soft_threshold, (int, float)) or not 0 <= soft_threshold < 1:
        # a score is at most 1, so a threshold of 1 would label every step incorrect
        raise IngestError(f"--soft-threshold must be in [0, 1) (a step is correct when its score is above it), "
                          f"got {soft_threshold!r}")
    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise IngestError(f"--num-proc must be a positive number of processes, got {num_proc!r}")
    if os.path.isdir(input_path):
        raise IngestError(f"{input_path} is a folder; --input takes one file (.jsonl, .json or .parquet)")
    if not os.path.isfile(input_path):
        raise IngestError(f"input file not found: {input_path}")
    adapter = importlib.import_module(FORMATS[fmt])
    ctx = {"image_root": image_root or adapter.default_image_root(input_path), "input": input_path}
    if out_dir is None:
        return _ingest(fmt, adapter, ctx, input_path, None, on_error, log, soft_threshold, num_proc, progress)
    from stepcritic.data_prep import outputs

    # the output may go below the image root (given or the format's default, often the input's own folder), but
    # never over it, around it, or over a file or a folder of the user's there: those may be images
    roots = {"--image-root" if image_root else "the image root": ctx["image_root"]}
    with outputs.staged(out_dir, overwrite, {"--input": input_path}, roots) as target:
        return _ingest(fmt, adapter, ctx, input_path, target, on_error, log, soft_threshold, num_proc, progress)


def _ingest(fmt: str, adapter, ctx: dict, input_path: str, out_dir: str | None, on_error: str, log,
            soft_threshold: float, num_proc: int, progress: bool) -> dict:
    from stepcritic.data_prep.arrow_io import RowWriter, save_files, temp_dir_beside
    from stepcritic.data_prep.progress import bar, say
    from stepcritic.data_prep.schema import features

    with (temp_dir_beside(out_dir or os.path.join(tempfile.gettempdir(), "x"), ".ingest-") as tmp,
          bar(progress, "ingest", unit="records") as shown):
        writer = RowWriter(os.path.join(tmp, "chains.arrow"), features())
        rejected_path = os.path.join(tmp, REJECTED_FILE)
        seen_ids: set[str] = set()
        notes: Counter = Counter()
        counts = LabelCounts()
        multi_image: list[str] = []
        n_in = n_rejected = n_steps = n_text_only = 0
        n_chains = 0
        first_rejected: list[dict] = []
        with open(rejected_path, "w", encoding="utf-8") as rejected_file:
            for where, chains in _converted(fmt, adapter, read_records(input_path), ctx, soft_threshold, num_proc):
                n_in += 1
                if not isinstance(chains, SchemaError):
                    chains = _duplicate(chains, seen_ids, where) or chains
                bad = isinstance(chains, SchemaError)
                shown.set_postfix_str(f"{n_in - n_rejected - bad} kept, {n_rejected + bad} rejected", refresh=False)
                shown.update()
                if isinstance(chains, SchemaError):
                    if on_error == "fail":
                        raise IngestError(f"{chains} (use --on-error skip to skip bad records)") from None
                    entry = {"where": chains.where or where, "field": chains.field, "reason": chains.reason}
                    rejected_file.write(json.dumps(entry, ensure_ascii=False) + "\n")
                    n_rejected += 1
                    if len(first_rejected) < REJECTED_INLINE:
                        first_rejected.append(entry)
                    say(shown, log, f"skipped {chains}")
                    continue
                for chain in chains:
                    seen_ids.add(chain["chain_id"])
                    writer.add(chain)
                    n_chains += 1
                    n_steps += len(chain["steps"])
                    n_text_only += chain["image"] is None
                    counts.add(chain)
                    chain_notes = labels.label_notes(chain)
                    notes.update(chain_notes)
                    if chain_notes["multi_image_chains"]:
                        multi_image.append(chain["chain_id"])
        dataset = writer.close()

        n_kept = n_in - n_rejected
        assert len(dataset) == n_chains >= n_kept  # the accounting invariant, never violated silently
        if n_in == 0:
            raise IngestError(f"{input_path}: holds no records (the file is empty)")
        stats = {
            "format": fmt, "input": os.path.abspath(input_path), "image_root": ctx["image_root"],
            "n_records": n_in, "n_kept": n_kept, "n_chains": len(dataset), "n_steps": n_steps,
            "n_rejected": n_rejected, "rejected": first_rejected, "label_counts": counts.result(),
            "label_notes": {k: notes[k] for k in NOTE_KEYS}, "soft_threshold": float(soft_threshold),
            "multi_image_chains": multi_image, "text_only_chains": n_text_only,
        }
        if n_rejected > REJECTED_INLINE:
            stats["rejected_file"] = REJECTED_FILE
            if not out_dir:  # no folder to list them in: the caller gets them all
                with open(rejected_path, encoding="utf-8") as f:
                    stats["rejected"] = [json.loads(line) for line in f]
        if hasattr(adapter, "check"):  # a second pass over the written chains, images left out
            stats.update(adapter.check(dataset.remove_columns(["image", "extra_images"])))
        if out_dir:
            if not len(dataset):
                first = first_rejected[0]
                field = f", field {first['field']!r}" if first["field"] else ""
                raise IngestError(f"no valid chains in {input_path}: {n_in} records read, 0 kept, {n_rejected} "
                                  f"rejected (the first: {first['where']}{field}: {first['reason']}); nothing written")
            save_files(writer.path, writer.features, out_dir, len(dataset))
            if n_rejected > REJECTED_INLINE:
                shutil.copyfile(rejected_path, os.path.join(out_dir, REJECTED_FILE))
            with open(os.path.join(out_dir, CHAINS_STATS_FILE), "w") as f:
                json.dump(stats, f, indent=2)
            write_ingest_card(stats, os.path.join(out_dir, "README.md"))
        del dataset  # the memory map of the temporary file, before the folder is removed
    return stats
