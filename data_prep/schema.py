"""The canonical chain schema: one record per reasoning chain, every later stage reads this.

A chain is a plain dict (its fields and their types: `CHAIN_SPEC` / `STEP_SPEC`); `validate_chain` normalises one and
raises `SchemaError` naming the record and the field; `save_chains`/`load_chains` store a list of
chains as a self-contained Hugging Face dataset (images embedded as bytes in the `Image` feature).
A chain shows one image (`image`) or several: the first is `image`, the others `extra_images`, in order, so a
one-image chain reads and writes as simply as ever and datasets saved before `extra_images` existed still load;
`chain_images` gives them all. A chain with no image at all (text-only: `image` null or absent) is valid too, and
`chain_images` gives it none; every prompt then asks about the text alone (`prompts.py`).

Pairwise preference items (a reward-model benchmark's prompt with two or more responses and the human preference)
are chains too, one per response, grouped by `group_id`: `preference_rank` holds the human preference (1 best, equal
ranks a tie, compared within a group only), `subset` a second breakdown beside `category`, and `set_id` ties groups
that are scored together (MM-RLHF-RewardBench's ACC+). Datasets saved before these fields still load: their rows
lack the columns, and validation gives the fields null.

Label vocabularies follow MiCEval (step types, per-aspect labels, error types) and VISCO
(per-step correctness with reference critiques); a step may also carry a three-way `rating` (neutral steps) and
a `soft_label` score, see `labels.py`, and an incorrect step its `correction` (the step rewritten to be right).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
from typing import Any, Iterable, Iterator

from stepcritic.data_prep.labels import RATINGS, SOFT_THRESHOLD, soft_correct
from stepcritic.errors import UserError

# what ingest and synth write beside a chains folder (counts, rejections, label notes); a built dataset's own
# statistics are `contract.STATS_FILE`
CHAINS_STATS_FILE = "stats.json"
STEP_TYPES = ("description", "reasoning", "both")
DESCRIPTION_CORRECTNESS = ("correct", "partial", "unsupported")
DESCRIPTION_RELEVANCE = ("both", "image", "logic", "none")
DESCRIPTION_ERRORS = ("entity", "attribute", "spatial", "non_spatial")
LOGIC_ERRORS = ("inter", "intra", "both")

# The schema, declared once: every field with its stored type (a `datasets` feature, `features()`) and, for a label
# field, its vocabulary (None always allowed). Validation reads the names, the vocabularies and the booleans from here.
STEP_SPEC = {
    "text": "string", "type": ("string", STEP_TYPES), "correct": "bool",
    "description_correctness": ("string", DESCRIPTION_CORRECTNESS),
    "description_relevance": ("string", DESCRIPTION_RELEVANCE),
    "description_errors": ("list[string]", DESCRIPTION_ERRORS), "logic_correct": "bool", "logic_relevant": "bool",
    "informative": "bool", "logic_error": ("string", LOGIC_ERRORS), "explanations": "list[string]",
    "premises": "list[int32]", "human_score": "float32", "rating": "int8", "soft_label": "float32",
    "correction": "string",
}
CHAIN_SPEC = {
    "chain_id": "string", "group_id": "string", "source": "string", "image": "image", "extra_images": "list[image]",
    "question": "string", "reference_answer": "string", "final_answer": "string", "answer_correct": "bool",
    "chain_correct": "bool", "generator": "string", "category": "string", "steps": "list[step]", "meta": "string",
    "preference_rank": "int32", "subset": "string", "set_id": "string",
}


def _stored(spec) -> str:
    return spec[0] if isinstance(spec, tuple) else spec


STEP_FIELDS = tuple(STEP_SPEC)
CHAIN_FIELDS = tuple(CHAIN_SPEC)
STEP_VOCAB = {name: spec[1] for name, spec in STEP_SPEC.items() if isinstance(spec, tuple) and spec[0] == "string"}
STEP_BOOLS = tuple(name for name, spec in STEP_SPEC.items() if spec == "bool")


class SchemaError(UserError, ValueError):
    """A record breaks the schema. `where` names the record (file:line or chain id), `field` the field."""

    def __init__(self, message: str, where: str | None = None, field: str | None = None):
        self.where, self.field, self.reason = where, field, message
        prefix = ", ".join(p for p in (where, f"field '{field}'" if field else None) if p)
        super().__init__(f"{prefix}: {message}" if prefix else message)


# ----------------------------------------------------------------------------- step semantics

def describes(step: dict) -> bool:
    return step.get("type") in ("description", "both")


def reasons(step: dict) -> bool:
    return step.get("type") in ("reasoning", "both")


def step_correct_from_aspects(step: dict) -> bool | None:
    """MiCEval's "Correct Step": every aspect that applies to the step's type is right.

    Description aspects: correctness is `correct` and relevance is `both` (relevant to the image AND
    the question; "image only", "logic only" and "none" are relevance errors, Table 6).
    Reasoning aspects: logically correct, relevant and informative. Returns None when the type or a
    needed aspect is unlabelled.
    """
    if step.get("type") not in STEP_TYPES:
        return None
    checks: list[bool | None] = []
    if describes(step):
        dc, dr = step.get("description_correctness"), step.get("description_relevance")
        checks += [None if dc is None else dc == "correct", None if dr is None else dr == "both"]
    if reasons(step):
        checks += [step.get("logic_correct"), step.get("logic_relevant"), step.get("informative")]
    if any(c is False for c in checks):
        return False
    if any(c is None for c in checks):
        return None
    return True


def human_score(step: dict) -> float | None:
    """MiCEval's mapping for correlation: 1 correct, 0.5 partially correct description, 0 otherwise."""
    if step.get("correct") is None:
        return None
    if step["correct"]:
        return 1.0
    partial_only = (
        describes(step)
        and step.get("description_correctness") == "partial"
        and step.get("description_relevance") in (None, "both")
        and not (reasons(step)
                 and False in (step.get("logic_correct"), step.get("logic_relevant"), step.get("informative")))
    )
    return 0.5 if partial_only else 0.0


def group_id_for(image_key: str, question: str) -> str:
    """Same image + same question => same group (leakage-free splits, choice ranking, reward pairs)."""
    h = hashlib.sha1(f"{image_key}\x00{question.strip()}".encode()).hexdigest()
    return h[:16]


def images_key(images: list) -> str:
    """The image part of a group id: one image's fingerprint (as before several were allowed), or all of theirs;
    empty for a text-only chain (its group is its question)."""
    keys = [image_fingerprint(image) for image in images]
    return keys[0] if len(keys) == 1 else "\x01".join(keys)


def image_fingerprint(image: Any) -> str:
    """A stable key for an image value (path, bytes dict, PIL image), used for group ids."""
    if isinstance(image, dict):
        if image.get("bytes"):
            return hashlib.sha1(image["bytes"]).hexdigest()
        return str(image.get("path"))
    if isinstance(image, (bytes, bytearray)):
        return hashlib.sha1(image).hexdigest()
    if hasattr(image, "tobytes"):
        return hashlib.sha1(image.tobytes()).hexdigest()
    return str(image)


# ----------------------------------------------------------------------------- images

def chain_images(chain: dict) -> list:
    """Every image a chain shows, in order: `image`, then `extra_images` (absent in datasets saved before it);
    none for a text-only chain."""
    if chain.get("image") is None:
        return []
    return [chain["image"], *(chain.get("extra_images") or [])]


def is_text_only(chain: dict) -> bool:
    return chain.get("image") is None


def _image_values(record: dict, where: str) -> tuple[list, str]:
    """The record's image values in order, none for a text-only chain. `image` holds one value or a list; `images`
    (a list, TRL's spelling, empty for a text-only row) may stand in for it; `extra_images` (how chains are stored)
    follows `image`."""
    if record.get("images") is not None:
        if record.get("image") is not None or record.get("extra_images"):
            raise SchemaError("give the images once: 'image' (one or a list) or 'images', not both", where, "images")
        values, field = record["images"], "images"
        if not isinstance(values, (list, tuple)):
            raise SchemaError(f"expected a list of images, got {type(values).__name__}", where, field)
        return list(values), field
    first, field = record.get("image"), "image"
    extra = record.get("extra_images") or []
    if first is None and extra:
        raise SchemaError("extra images without a first one ('image' is null)", where, "image")
    if first is None:
        return [], field  # text-only
    values = list(first) if isinstance(first, (list, tuple)) else [first]
    return values + list(extra), field


def load_image_bytes(value: Any, image_root: str | None = None, where: str | None = None,
                     field: str = "image") -> dict:
    """Turn a path, a base64 string, raw bytes or a PIL image into `{"bytes", "path"}`, checking it decodes."""
    from PIL import Image, UnidentifiedImageError

    path = shown_path = None  # shown_path: the file as the user can find it, image root included
    if value is None:
        raise SchemaError("image is missing", where, field)
    if isinstance(value, dict) and value.get("bytes"):
        data, path = value["bytes"], value.get("path")
        shown_path = path
    elif isinstance(value, dict) and value.get("path"):
        return load_image_bytes(value["path"], image_root, where, field)
    elif isinstance(value, (bytes, bytearray)):
        data = bytes(value)
    elif hasattr(value, "save"):  # PIL image
        buf = io.BytesIO()
        value.save(buf, format="PNG")
        data = buf.getvalue()
    elif isinstance(value, str):
        if value.startswith("data:image"):
            value = value.split(",", 1)[1]
        candidate = os.path.join(image_root, value) if image_root and not os.path.isabs(value) else value
        if len(value) < 1024 and os.path.exists(candidate):
            with open(candidate, "rb") as f:
                data, path, shown_path = f.read(), value, candidate
        else:
            try:
                data = base64.b64decode(value, validate=True)
            except ValueError:
                raise SchemaError(f"image file not found: {candidate}", where, field) from None
            if not data:
                raise SchemaError(f"image file not found: {candidate}", where, field)
    else:
        raise SchemaError(f"unsupported image value of type {type(value).__name__}", where, field)
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.verify()
    except (UnidentifiedImageError, OSError, SyntaxError) as e:
        # PIL names the in-memory buffer it read, which tells a user nothing: name the file (or the value's kind)
        shown = f"file {shown_path}" if shown_path else "the base64 text" if isinstance(value, str) else "the bytes"
        why = ("no image format recognised" if isinstance(e, UnidentifiedImageError)
               else f"{e.__class__.__name__}: {e}")
        raise SchemaError(f"image cannot be decoded ({shown}: {why})", where, field) from None
    return {"bytes": data, "path": path}


# ----------------------------------------------------------------------------- validation

def _opt_bool(value: Any, where: str, field: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise SchemaError(f"expected true/false/null, got {value!r}", where, field)


def _opt_vocab(value: Any, allowed: tuple, where: str, field: str) -> str | None:
    if value is None:
        return None
    if value not in allowed:
        raise SchemaError(f"unknown label {value!r}; expected one of {list(allowed)} or null", where, field)
    return value


def _step_rating(value: Any, where: str, field: str) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value in RATINGS):
        return value
    raise SchemaError(f"rating must be 1 (correct), 0 (neutral), -1 (incorrect) or null, got {value!r}", where, field)


def _soft_label(value: Any, where: str, field: str) -> float | None:
    if value is None:
        return None
    # `not 0 <= value <= 1` is also true for NaN
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise SchemaError(f"soft_label must be a number in [0, 1] or null, got {value!r}", where, field)
    return float(value)


def _preference_rank(value: Any, where: str) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise SchemaError(f"preference_rank must be a whole number from 1 (best) or null, got {value!r}", where,
                      "preference_rank")


def validate_step(step: Any, index: int, where: str, soft_threshold: float = SOFT_THRESHOLD) -> dict:
    f = lambda name: f"steps[{index}].{name}"  # noqa: E731
    if isinstance(step, str):
        step = {"text": step}
    if not isinstance(step, dict):
        raise SchemaError(f"a step must be an object or a string, got {type(step).__name__}", where, f"steps[{index}]")
    unknown = set(step) - set(STEP_FIELDS)
    if unknown:
        raise SchemaError(f"unknown step field(s) {sorted(unknown)}", where, f(sorted(unknown)[0]))
    text = step.get("text")
    if not isinstance(text, str) or not text.strip():
        raise SchemaError("step text must be a non-empty string", where, f("text"))
    out: dict[str, Any] = {"text": text.strip()}
    for name, allowed in STEP_VOCAB.items():
        out[name] = _opt_vocab(step.get(name), allowed, where, f(name))
    for name in STEP_BOOLS:
        out[name] = _opt_bool(step.get(name), where, f(name))
    errors = step.get("description_errors") or []
    for e in errors:
        _opt_vocab(e, STEP_SPEC["description_errors"][1], where, f("description_errors"))
    out["description_errors"] = list(errors)
    expl = step.get("explanations") or []
    if isinstance(expl, str):
        expl = [expl]
    if not all(isinstance(e, str) for e in expl):
        raise SchemaError("explanations must be a list of strings", where, f("explanations"))
    out["explanations"] = [e for e in expl if e.strip()]
    # None: premises not annotated; []: the step rests only on the image and question (RPTS tells them apart)
    premises = step.get("premises")
    if premises is not None and not all(isinstance(p, int) and not isinstance(p, bool) and 0 <= p < index
                                        for p in premises):
        raise SchemaError(f"premises must be indices of earlier steps (< {index}), got {premises!r}",
                          where, f("premises"))
    out["premises"] = None if premises is None else list(premises)
    correction = step.get("correction")
    if correction is not None and (not isinstance(correction, str) or not correction.strip()):
        raise SchemaError("correction must be a non-empty string or null", where, f("correction"))
    out["correction"] = None if correction is None else correction.strip()
    out["rating"] = _step_rating(step.get("rating"), where, f("rating"))
    out["soft_label"] = _soft_label(step.get("soft_label"), where, f("soft_label"))
    if out["rating"] is not None:
        implied = RATINGS[out["rating"]]
        if out["correct"] is not None and out["correct"] != implied:  # a neutral step has no verdict to contradict
            raise SchemaError(f"correct {out['correct']} contradicts rating {out['rating']}", where, f("correct"))
        out["correct"] = implied
    elif out["correct"] is None and out["soft_label"] is not None:
        out["correct"] = soft_correct(out["soft_label"], soft_threshold)
    if out["correct"] is None and out["rating"] != 0:  # derive from aspect labels when only those are given
        out["correct"] = step_correct_from_aspects(out)
    hs = step.get("human_score")
    if hs is None:
        hs = human_score(out)
    elif isinstance(hs, bool) or not isinstance(hs, (int, float)) or not 0.0 <= hs <= 1.0:
        raise SchemaError(f"human_score must be a number in [0, 1], got {hs!r}", where, f("human_score"))
    out["human_score"] = None if hs is None else float(hs)
    return out


def validate_chain(record: Any, where: str = "record", image_root: str | None = None,
                   soft_threshold: float = SOFT_THRESHOLD) -> dict:
    """Check and normalise one chain. Raises SchemaError naming `where` and the offending field.

    A step with a `soft_label` and no `correct` is labelled correct when the score is above `soft_threshold`.
    """
    if not isinstance(record, dict):
        raise SchemaError(f"a chain must be a JSON object, got {type(record).__name__}", where)
    unknown = set(record) - set(CHAIN_FIELDS) - {"images"}
    if unknown:
        raise SchemaError(f"unknown field(s) {sorted(unknown)}", where, sorted(unknown)[0])
    for name in ("chain_id", "question"):
        if not isinstance(record.get(name), str) or not record[name].strip():
            raise SchemaError("must be a non-empty string", where, name)
    steps = record.get("steps")
    if not isinstance(steps, list) or not steps:
        raise SchemaError("a chain needs at least one step", where, "steps")
    values, field = _image_values(record, where)
    images = [load_image_bytes(value, image_root, where, field if len(values) == 1 else f"{field}[{i}]")
              for i, value in enumerate(values)]
    out = {name: record.get(name) for name in CHAIN_FIELDS}
    out["image"], out["extra_images"] = (images[0], images[1:]) if images else (None, [])
    out["steps"] = [validate_step(s, i, where, soft_threshold) for i, s in enumerate(steps)]
    for name in ("source", "reference_answer", "final_answer", "generator", "category", "subset", "set_id"):
        if out[name] is not None and not isinstance(out[name], str):
            out[name] = str(out[name])
    out["source"] = out["source"] or "custom"
    for name in ("answer_correct", "chain_correct"):
        out[name] = _opt_bool(out[name], where, name)
    out["preference_rank"] = _preference_rank(out["preference_rank"], where)
    if out["chain_correct"] is None:
        labels = [s["correct"] for s in out["steps"]]
        out["chain_correct"] = False if False in labels else (None if None in labels else True)
    if not out.get("group_id"):
        out["group_id"] = group_id_for(images_key(images), out["question"])
    meta = out.get("meta")
    if meta is None:
        meta = {}
    if isinstance(meta, str):
        try:
            meta = json.loads(meta) if meta.strip() else {}
        except json.JSONDecodeError as e:
            raise SchemaError(f"meta is not valid JSON ({e})", where, "meta") from None
    if not isinstance(meta, dict):
        raise SchemaError("meta must be an object or a JSON string of one", where, "meta")
    out["meta"] = json.dumps(meta, sort_keys=True, ensure_ascii=False)
    return out


def check_unique_ids(chains: Iterable[dict]) -> None:
    seen: set[str] = set()
    for c in chains:
        if c["chain_id"] in seen:
            raise SchemaError("duplicate chain_id", c["chain_id"], "chain_id")
        seen.add(c["chain_id"])


# ----------------------------------------------------------------------------- storage

def features():
    """The `datasets.Features` of a saved chains dataset, from `CHAIN_SPEC` and `STEP_SPEC`."""
    from datasets import Features, Image, List, Value

    def feature(stored: str):
        if stored.startswith("list["):
            return List(feature(stored[5:-1]))
        if stored == "step":
            return {name: feature(_stored(spec)) for name, spec in STEP_SPEC.items()}
        return Image() if stored == "image" else Value(stored)

    return Features({name: feature(_stored(spec)) for name, spec in CHAIN_SPEC.items()})


def save_chains(chains: Iterable[dict], out_dir: str):
    """Save validated chains as a self-contained dataset (`datasets.load_from_disk` reads it back) and return it.

    `chains` may be any iterable (a generator from ingest or synth): they are written to Arrow as they come, in
    batches bounded in bytes, so memory does not grow with their number (only their ids are remembered, to refuse
    a duplicate).
    """
    from datasets import load_from_disk

    from stepcritic.data_prep.arrow_io import RowWriter, save_files, temp_dir_beside

    seen: set[str] = set()
    with temp_dir_beside(out_dir, ".chains-") as tmp:
        writer = RowWriter(os.path.join(tmp, "chains.arrow"), features())
        for c in chains:
            if c["chain_id"] in seen:
                raise SchemaError("duplicate chain_id", c["chain_id"], "chain_id")
            seen.add(c["chain_id"])
            writer.add(c)
        writer.close()
        save_files(writer.path, writer.features, out_dir, writer.n_rows)
    return load_from_disk(out_dir)


# a saved chains dataset must have these columns (validate_chain requires them of every record)
REQUIRED_COLUMNS = ("chain_id", "question", "image", "steps")
CHAINS_HINT = "a chains folder saved by `stepcritic data ingest` or `synth`, or a canonical .jsonl file"


def _built_kind(path: str) -> str | None:
    """The kind of a dataset `stepcritic data build` wrote at `path` ('?' when unrecorded), else None."""
    if not os.path.isfile(os.path.join(path, "dataset_dict.json")):
        return None
    try:
        with open(os.path.join(path, "build_stats.json")) as f:
            return str(json.load(f).get("kind") or "?")
    except (OSError, ValueError, AttributeError):
        return "?"


def parse_json_line(line: str, where: str):
    """One JSON line's value, or a SchemaError naming its column. The line's own newline is left out first: parsed
    with it, a line cut short is reported at column 1 of a line after it, not where it ends."""
    text = line.rstrip("\r\n")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SchemaError(f"malformed JSON line ({json_error(e)})", where) from None


def json_error(e: json.JSONDecodeError) -> str:
    """What went wrong and at which column of its line, and, when the text stops before the value does, where the
    line ends: "Expecting ',' delimiter at column 51; the line ends after column 50: is it cut short?"."""
    # json's message may end in "at" ("Unterminated string starting at"): the column completes it
    at = f"{e.msg} column {e.colno}" if e.msg.endswith(" at") else f"{e.msg} at column {e.colno}"
    if not (e.msg.startswith("Unterminated string") or not e.doc[e.pos:].strip()):
        return at
    start, stop = e.doc.rfind("\n", 0, e.pos) + 1, e.doc.find("\n", e.pos)
    line = e.doc[start:len(e.doc) if stop == -1 else stop].rstrip("\r")
    return f"{at}; the line ends after column {len(line)}: is it cut short?"


def iter_jsonl_chains(path: str) -> Iterator[dict]:
    """Validated chains of a canonical .jsonl file, one at a time (SchemaError naming file:line on a bad one)."""
    n = 0
    try:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                raw = parse_json_line(line, f"{path}:{i}")
                n += 1
                yield validate_chain(raw, f"{path}:{i}", os.path.dirname(path))
    except UnicodeDecodeError as e:
        raise SchemaError(f"not a UTF-8 text file ({e.reason} at byte {e.start})", path) from None
    if not n:
        raise SchemaError("holds no chains (the file is empty)", path)


def _jsonl_dataset(path: str):
    """A canonical .jsonl file as a memory-mapped Dataset, written to Arrow chain by chain (`datasets`' generator
    builder; its cache is keyed on the file's path, size and modification time, so an edited file is read again)."""
    from datasets import Dataset

    st = os.stat(path)
    try:
        return Dataset.from_generator(_jsonl_generator, features=features(),
                                      gen_kwargs={"path": os.path.abspath(path), "size": st.st_size,
                                                  "mtime_ns": st.st_mtime_ns},
                                      writer_batch_size=100)  # rows carry images: keep each written batch small
    except Exception as e:  # datasets wraps what the generator raises; give back our one-line error
        cause = e
        while cause is not None and not isinstance(cause, SchemaError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise cause from None


def _jsonl_generator(path: str, size: int, mtime_ns: int):
    """`Dataset.from_generator`'s generator: size and mtime only key the cache."""
    yield from iter_jsonl_chains(path)


def load_chains(path: str, decode_images: bool = True):
    """Load a chains dataset saved by `save_chains` (or a canonical .jsonl file).

    Anything else (a missing path, a dataset built by `stepcritic data build`, a folder or file that is not a
    chains dataset, an empty file, a dataset without the chain columns) raises `SchemaError` naming the path.
    """
    from datasets import load_from_disk

    if os.path.isfile(path):
        if not path.endswith((".jsonl", ".json")):
            raise SchemaError(f"not a chains dataset (expected {CHAINS_HINT}; convert other files with "
                              "`stepcritic data ingest`)", path)
        ds = _jsonl_dataset(path)
    else:
        if not os.path.isdir(path):
            raise SchemaError(f"no chains dataset here (expected {CHAINS_HINT})", path)
        kind = _built_kind(path)
        if kind is not None:
            raise SchemaError(f"a dataset built by `stepcritic data build` (kind {kind!r}), not chains; pass the "
                              "chains it was built from", path)
        if not os.path.isfile(os.path.join(path, "state.json")):
            raise SchemaError(f"not a chains dataset (expected {CHAINS_HINT})", path)
        ds = load_from_disk(path)
        missing = [c for c in REQUIRED_COLUMNS if c not in ds.column_names]
        if missing:
            raise SchemaError(f"not a chains dataset: no {', '.join(repr(c) for c in missing)} column "
                              f"(columns: {', '.join(ds.column_names)})", path, missing[0])
        if len(ds) == 0:
            raise SchemaError("holds no chains", path)
    if not decode_images:
        ds = undecoded(ds)
    return ds


def undecoded(ds):
    """`ds` with its image columns left as encoded bytes (what building rows and most judges need)."""
    from datasets import Image, List

    ds = ds.cast_column("image", Image(decode=False))
    if "extra_images" in ds.column_names:
        ds = ds.cast_column("extra_images", List(Image(decode=False)))
    return ds


def chain_meta(chain: dict) -> dict:
    meta = chain.get("meta")
    return json.loads(meta) if isinstance(meta, str) and meta else (meta or {})
