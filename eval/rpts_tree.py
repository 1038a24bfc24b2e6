"""RPTS's reasoning trees (Wang & Zhang, 2025, Sec. 3): what each step of a chain rests on.

In a tree every step is a conclusion; its premises are earlier steps (their conclusions) and clues, the leaves:
visual clues read off the image and textual clues taken from the question. A tree, as a plain dict stored on each
gold chain under "rpts", holds
- `premises`: per step, the (0-based) earlier steps it builds on, the links `metrics.step_heights` reads;
- `reads`: per step, the kinds of clue it reads directly ("visual", "textual"; [] when unknown), for RPTS's split
  of conclusions drawn from visual and from textual clues;
- `source`: "data", "builder" or None (no tree), and for a builder's malformed answer `error` (its kind) and `detail`;
- `clue_scores`: per step, its agreement with the data's reference clues where it is scored that way, else None.

Where a tree comes from:
- the data, when every step carries `premises` ([] = it rests on clues alone). Which clues a step reads follows its
  type: description and "both" steps read the image, reasoning steps the text (the question and the earlier
  conclusions they are given). Reference clues, the facts an answer should start from, are the data's
  `meta["clues"]` (`[{"kind": "visual" | "textual", "text": ...}]`, as the synthetic generator writes them).
- otherwise a tree builder, any generative judge spec (`--tree-builder`): the paper has a strong language model
  restate each chain as "premise + premise -> conclusion"; here the builder maps every step of the chain to its
  premises (`data_prep/templates/rpts_tree.j2`). Its answer is parsed and validated (`parse_tree`): every premise
  must be a listed clue or an earlier step. A cycle, a dangling reference, a step out of order, a step missing or
  an unreadable answer is a malformed tree: counted by kind and reported, that chain left without an RPTS; never a
  crash. Answers are cached per chain (digest of its text) under `OUT/cache/rpts-trees/`, like judgments.
- otherwise none: the chain has no RPTS (counted), never a made-up linear tree.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections import Counter

from stepcritic.data_prep.prompts import rpts_tree_messages, template_hash
from stepcritic.data_prep.schema import chain_meta
from stepcritic.eval.cache import JsonlLog, judge_cache_dir
from stepcritic.eval.errors import EvalError
from stepcritic.eval.judges.prompting import Prompt
from stepcritic.eval.matchers import EmbeddingMatcher, token_f1

VISUAL, TEXTUAL = "visual", "textual"
ERROR_KINDS = ("unreadable", "steps", "dangling", "cycle", "order")
CLUE_MATCHERS = ("off", "lexical", "embedding")


class TreeError(ValueError):
    """A builder's answer that is no valid tree; `kind` is one of `ERROR_KINDS`."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


# ----------------------------------------------------------------------------- trees from the data

def reads_of(step_type: str | None) -> list[str]:
    """The clue kinds a step of this MiCEval type reads directly (description steps report what the image shows)."""
    return {"description": [VISUAL], "both": [VISUAL], "reasoning": [TEXTUAL]}.get(step_type, [])


def data_tree(steps: list[dict]) -> dict | None:
    """The tree a chain's own `premises` give, or None when any step's premises are not annotated."""
    if any(s["premises"] is None for s in steps):
        return None
    return {"source": "data", "premises": [list(s["premises"]) for s in steps],
            "reads": [reads_of(s["type"]) for s in steps], "error": None, "detail": None}


def reference_clues(meta: dict) -> list[dict]:
    """The data's reference clues (`meta["clues"]`), entries of another shape ignored."""
    clues = meta.get("clues") if isinstance(meta, dict) else None
    return [c for c in clues or [] if isinstance(c, dict) and c.get("kind") in (VISUAL, TEXTUAL)
            and isinstance(c.get("text"), str) and c["text"].strip()]


# ----------------------------------------------------------------------------- trees from a builder's answer

def _json_objects(text: str):
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            yield decoder.raw_decode(text, match.start())[0]
        except ValueError:
            continue


_STEP_REF = re.compile(r"(?i)^\s*(?:step|s)?\s*#?\s*(\d+)\s*$")


def _step_number(ref) -> int | None:
    if isinstance(ref, int) and not isinstance(ref, bool):
        return ref
    match = _STEP_REF.match(ref) if isinstance(ref, str) else None
    return int(match.group(1)) if match else None


def _cyclic(links: list[list[int]]) -> bool:
    state = [0] * len(links)  # 0 unseen, 1 on the current path, 2 done

    def visit(i: int) -> bool:
        state[i] = 1
        for j in links[i]:
            if state[j] == 1 or (state[j] == 0 and visit(j)):
                return True
        state[i] = 2
        return False
    return any(state[i] == 0 and visit(i) for i in range(len(links)))


def parse_tree(text: str | None, n_steps: int) -> dict:
    """A builder's answer (the JSON `rpts_tree.j2` asks for) as a tree; raises `TreeError` naming what is wrong.

    Premises are clue ids listed under "clues" (any case) or step numbers (1-based: 2, "2", "step 2"). A step's
    `reads` are the kinds of the clues it names; a step that names only earlier steps reasons over text, as a
    reasoning step of the data does.
    """
    found = next((o for o in _json_objects(text or "") if isinstance(o, dict) and isinstance(o.get("steps"), list)),
                 None)
    if found is None:
        raise TreeError("unreadable", "no JSON object with a \"steps\" list")
    clues = {}
    for clue in found.get("clues") or []:
        if not (isinstance(clue, dict) and isinstance(clue.get("id"), str) and clue.get("kind") in (VISUAL, TEXTUAL)):
            raise TreeError("unreadable", f"clue {clue!r} needs an id and a kind, visual or textual")
        clues[clue["id"].strip().upper()] = {"id": clue["id"].strip(), "kind": clue["kind"],
                                             "text": str(clue.get("text") or "")}
    premises: list = [None] * n_steps
    reads: list = [None] * n_steps
    clue_refs: list = [None] * n_steps
    for item in found["steps"]:
        number = _step_number(item.get("step")) if isinstance(item, dict) else None
        if number is None or not 1 <= number <= n_steps:
            raise TreeError("steps", f"entry {item!r} names no step 1-{n_steps}")
        if premises[number - 1] is not None:
            raise TreeError("steps", f"step {number} is given twice")
        refs = item.get("premises")
        if not isinstance(refs, list):
            raise TreeError("unreadable", f"step {number}: premises must be a list")
        links, kinds, named = set(), set(), []
        for ref in refs:
            if isinstance(ref, str) and ref.strip().upper() in clues:
                kinds.add(clues[ref.strip().upper()]["kind"])
                named.append(clues[ref.strip().upper()]["id"])
                continue
            k = _step_number(ref)
            if k is None or not 1 <= k <= n_steps:
                raise TreeError("dangling", f"step {number}: premise {ref!r} is neither a listed clue nor a step")
            links.add(k - 1)
        premises[number - 1] = sorted(links)
        reads[number - 1] = sorted(kinds) or ([TEXTUAL] if links else [])
        clue_refs[number - 1] = named
    missing = [i + 1 for i, p in enumerate(premises) if p is None]
    if missing:
        raise TreeError("steps", f"no entry for step(s) {missing}")
    if _cyclic(premises):
        raise TreeError("cycle", "a step rests, through its premises, on itself")
    late = [(i + 1, p + 1) for i, links in enumerate(premises) for p in links if p > i]
    if late:
        raise TreeError("order", f"step {late[0][0]} builds on the later step {late[0][1]}")
    return {"source": "builder", "premises": premises, "reads": reads, "clue_refs": clue_refs,
            "clues": list(clues.values()), "error": None, "detail": None}


def malformed(error: TreeError) -> dict:
    return {"source": "builder", "premises": None, "reads": None, "error": error.kind, "detail": error.detail}


# ----------------------------------------------------------------------------- building and caching

def builder_fingerprint(builder) -> str:
    blob = json.dumps({"builder": builder.fingerprint(), "template": template_hash("rpts_tree")}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_trees(builder, chains: list[dict], digests: list[str], out_dir: str, progress: bool = True) -> dict:
    """chain_id -> tree for `chains` (rows with question, steps, final_answer), asking `builder` only for those its
    cache lacks and saving each batch's answers as they arrive. A failed request is not cached (a rerun asks again)
    and leaves that chain malformed ("unreadable") for this run."""
    from tqdm.auto import tqdm  # loaded when a judge is asked, not for `--help`

    # beside the judges' folders, not among them: a folder of OUT/cache/ is read back as a judge's
    name = os.path.basename(judge_cache_dir(out_dir, builder.cache_name, builder_fingerprint(builder)))
    folder = os.path.join(out_dir, "cache", "rpts-trees", name)
    log = JsonlLog(os.path.join(folder, "trees.jsonl"), "chain_id")
    done = log.load()
    todo = [(c, d) for c, d in zip(chains, digests) if done.get(c["chain_id"], {}).get("digest") != d]
    failed = {}
    bar = tqdm(total=len(todo), desc=f"{builder.name} rpts trees", unit="chain", disable=not progress,
               file=sys.stderr)
    try:
        size = max(1, getattr(builder, "batch_size", 8))
        for start in range(0, len(todo), size):
            batch = todo[start:start + size]
            try:
                replies = builder.generate([Prompt(rpts_tree_messages(c), []) for c, _ in batch])
            except Exception as e:
                raise EvalError(f"tree builder {builder.name!r} failed: {type(e).__name__}: {e}") from e
            records = []
            for (chain, digest), reply in zip(batch, replies):
                if reply.error:
                    failed[chain["chain_id"]] = malformed(TreeError("unreadable", f"request failed: {reply.error}"))
                    continue
                records.append({"chain_id": chain["chain_id"], "digest": digest, "raw": reply.text})
            log.append(records)
            bar.update(len(batch))
    finally:
        bar.close()
        log.close()
    done = log.load()
    trees = dict(failed)
    for chain in chains:
        record = done.get(chain["chain_id"])
        if record is None or chain["chain_id"] in failed:
            continue
        try:
            trees[chain["chain_id"]] = parse_tree(record["raw"], len(chain["steps"]))
        except TreeError as e:
            trees[chain["chain_id"]] = malformed(e)
    return {"trees": trees, "asked": len(todo), "cached": len(chains) - len(todo), "failed": len(failed)}


# ----------------------------------------------------------------------------- agreement with reference clues

def clue_similarity(name: str):
    """(text, clue) -> similarity in [0, 1] for scoring conclusions read off the image (RPTS Sec. 3 scores them by
    semantic agreement with the ground truth): token-overlap F1, or the cosine of MiniLM embeddings. Continuous,
    not thresholded: a step close to a clue but not the same scores in between."""
    if name == "lexical":
        return token_f1
    if name == "embedding":
        matcher = EmbeddingMatcher()
        try:
            matcher.similarity("a", "a")  # loads the model now: a missing extra is an error before any work
        except ImportError as e:
            raise EvalError(f"--rpts-clues embedding: {e}") from None
        return lambda text, clue: max(0.0, min(1.0, matcher.similarity(text, clue)))
    raise ValueError(f"unknown clue matcher {name!r}; expected one of {list(CLUE_MATCHERS)}")


def clue_scores(tree: dict, texts: list[str], clues: list[dict], similarity) -> list[float | None]:
    """Per step: for a conclusion drawn from visual clues alone (no earlier step among its premises), its best
    agreement with the data's visual reference clues; None elsewhere, and everywhere when the data has none."""
    visual = [c["text"] for c in clues if c["kind"] == VISUAL]
    if similarity is None or not visual or tree.get("premises") is None:
        return [None] * len(texts)
    return [max(similarity(text, clue) for clue in visual) if reads == [VISUAL] and not links else None
            for text, links, reads in zip(texts, tree["premises"], tree["reads"])]


# ----------------------------------------------------------------------------- the runner's entry

def step_texts_only(dataset):
    """The chains as RPTS's trees read them (`rpts_tree.attach`: id, question, final answer and meta, and of each step
    its text, all that the clue scores and the tree builder's prompt show), the steps holding nothing else. attach
    reads these rows whole, and with the sixteen fields of every step they were the most memory the job ever held
    (600 MB at 100,000 chains). Built from the same Arrow buffers, without copying them."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from datasets import Dataset

    table = dataset.select_columns(["chain_id", "question", "final_answer", "steps", "meta"]).with_format("arrow")[:]
    chunks = [type(chunk).from_arrays(pc.subtract(chunk.offsets, chunk.offsets[0]),
                                      pa.StructArray.from_arrays([pc.struct_field(chunk.flatten(), "text")], ["text"]))
              for chunk in table.column("steps").chunks]
    steps = pa.chunked_array(chunks) if chunks else pa.chunked_array([], pa.list_(pa.struct([("text", pa.string())])))
    return Dataset(table.set_column(table.schema.get_field_index("steps"), "steps", steps))


def attach(gold: list[dict], dataset, out_dir: str, judges=(), builder=None, clues: str = "off",
           progress: bool = True) -> dict:
    """Give every gold chain its tree (`gold[i]["rpts"]`) and the judges that score by the trees (RPTS's scorer,
    `bind_trees`) theirs; returns what `metrics.json` says about the trees."""
    if builder is not None and not callable(getattr(builder, "generate", None)):
        raise EvalError(f"--tree-builder {builder.name!r} is not a generative judge (hf:, openai:, vllm: or a "
                        "py: GenerativeJudge): it cannot be asked to restate chains")
    rows = dataset.select_columns(["chain_id", "question", "final_answer", "steps", "meta"]).to_list()
    metas = [chain_meta(r) for r in rows]
    trees = [data_tree(g["steps"]) for g in gold]
    built = {"asked": 0, "cached": 0, "failed": 0}
    need = [i for i, t in enumerate(trees) if t is None]
    if builder is not None and need:
        result = build_trees(builder, [rows[i] for i in need], [gold[i]["digest"] for i in need], out_dir, progress)
        built = {k: result[k] for k in built}
        for i in need:
            trees[i] = result["trees"].get(gold[i]["chain_id"])
    similarity = None if clues == "off" else clue_similarity(clues)
    n_clue_scored = 0
    for g, tree, row, meta in zip(gold, trees, rows, metas):
        tree = tree or {"source": None, "premises": None, "reads": None, "error": None, "detail": None}
        refs = reference_clues(meta)
        tree["clue_scores"] = clue_scores(tree, [s["text"] for s in row["steps"]], refs, similarity)
        n_clue_scored += sum(s is not None for s in tree["clue_scores"])
        g["rpts"] = tree
    for judge in judges:
        if hasattr(judge, "bind_trees"):
            judge.bind_trees(gold, "data" if builder is None else builder_fingerprint(builder))
    errors = Counter(g["rpts"]["error"] for g in gold if g["rpts"]["error"])
    examples = [f"{g['chain_id']}: {g['rpts']['error']}: {g['rpts']['detail']}" for g in gold if g["rpts"]["error"]]
    return {
        "builder": None if builder is None else builder.name,
        "trees": {"data": sum(g["rpts"]["source"] == "data" for g in gold),
                  "builder": sum(g["rpts"]["source"] == "builder" and not g["rpts"]["error"] for g in gold),
                  "malformed": sum(errors.values()), "none": sum(g["rpts"]["source"] is None for g in gold)},
        "malformed": {kind: errors.get(kind, 0) for kind in ERROR_KINDS}, "malformed_examples": examples[:5],
        "builder_requests": built,
        "clues": clues, "chains_with_reference_clues": sum(bool(reference_clues(m)) for m in metas),
        "clue_scored_steps": n_clue_scored,
    }
