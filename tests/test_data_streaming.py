"""Streamed data stage: ingest, synth and build write Arrow as they go and give the rows and
counts a whole-split, in-memory computation gives; the accounting stays exact; verifier-sft's conversation layouts
ask the same questions with the image stored once per conversation."""

import json
import os
import random
import subprocess
import sys
from collections import Counter

import pytest
from datasets import Dataset, Image, List, load_from_disk
from helpers import chain, label_stats, png, step

from stepcritic.data_prep import arrow_io, build, build_rows, ingest, labels, schema, synth
from stepcritic.data_prep.splits import split_by_group


def many_chains(n_groups=40, seed=0):
    """Groups of 1-4 chains with mixed labels, a neutral step now and then and a chain without labels."""
    rng = random.Random(seed)
    out = []
    for g in range(n_groups):
        image = {"bytes": png((rng.randrange(256), rng.randrange(256), 0), size=32), "path": None}
        for k in range(rng.randint(1, 4)):
            steps = []
            for j in range(rng.randint(1, 5)):
                s = step(f"Step {j} of {g}-{k}.", correct=rng.random() > 0.3, type=rng.choice(schema.STEP_TYPES))
                if rng.random() < 0.05:
                    s.update(rating=0, correct=None)  # neutral
                steps.append(s)
            out.append(chain(f"c{g}-{k}", group_id=f"g{g}", steps=steps, image=image,
                             answer_correct=rng.choice([True, False, None])))
    return [schema.validate_chain(c, c["chain_id"]) for c in out]


def expected(records, kind, test_fraction, seed, neutral="skip", **options):
    """The rows and skips of a whole-split, in-memory build: every split's chains handed to the builder at once."""
    resolved = [labels.resolve_neutral(c, neutral) for c in records]
    split = split_by_group(resolved, test_fraction, seed)
    produced = {}
    for name, chains in split.items():
        out = build_rows._SplitRows()
        mix = build.pairs.parse_pref_mix(None) if kind == "critique-pref" else None
        build.BUILDERS[kind](chains, build.prompts.load_template(build.prompts.DEFAULT_TEMPLATES[
            build.TEMPLATE_ROLE[kind]]), out, seed=seed, pref_mix=mix, neutral=neutral, step_targets="hard",
            **options)
        produced[name] = out
    return produced


@pytest.fixture
def small_batches(monkeypatch):
    # many batches from few chains: groups straddle chain batches, rows straddle written batches
    monkeypatch.setattr(build, "CHAIN_BATCH", 5)
    monkeypatch.setattr(arrow_io, "MAX_BATCH_ROWS", 7)


@pytest.mark.parametrize("kind,scattered", [(kind, False) for kind in build.KINDS] + [("outcome-rm", True)])
def test_streamed_build_gives_the_whole_split_rows_and_counts(kind, scattered, tmp_path, small_batches):
    records = many_chains()
    if scattered:  # a group's chains far apart: outcome-rm holds groups until complete, rows in the same order
        random.Random(1).shuffle(records)
    schema.save_chains(records, str(tmp_path / "chains"))
    stats = build.build_dataset(schema.load_chains(str(tmp_path / "chains")), kind, str(tmp_path / "out"),
                                test_fraction=0.3, seed=5)
    want = expected(records, kind, 0.3, 5)
    got = load_from_disk(str(tmp_path / "out"))
    for split in ("train", "test"):
        # through the same features, so absent struct fields read back as None on both sides
        want_rows = Dataset.from_list(want[split].rows, features=build.features(kind)).remove_columns("images")
        assert got[split].remove_columns("images").to_list() == want_rows.to_list(), (kind, split)
        assert stats["rows"][split] == len(want[split].rows) > 0
        assert stats["label_balance"][split] == dict(sorted(want[split].labels.items()))
    skipped = sum((want[s].skipped for s in want), Counter())
    assert stats["chains_skipped"] == dict(sorted(skipped.items()))
    assert stats["chains_in"] == len(records) == stats["chains_used"] + sum(stats["chains_skipped"].values())
    assert sum(stats["chains"].values()) == len(records)
    # each row's image is its chain's (outcome-rm: the chosen chain's)
    by_id = {c["chain_id"]: c for c in records}
    raw = got["train"].cast_column("images", List(Image(decode=False)))
    for row in raw:
        owner = row.get("chain_id") or row["chosen_chain_id"]
        assert [image["bytes"] for image in row["images"]] == [by_id[owner]["image"]["bytes"]]


def test_a_list_and_a_saved_dataset_build_the_same(tmp_path, small_batches):
    records = many_chains(12, seed=3)
    schema.save_chains(records, str(tmp_path / "chains"))
    from_list = build.build_dataset(records, "outcome-rm", str(tmp_path / "a"), seed=1)
    from_disk = build.build_dataset(schema.load_chains(str(tmp_path / "chains")), "outcome-rm", str(tmp_path / "b"),
                                    seed=1)
    assert from_list == from_disk
    a, b = load_from_disk(str(tmp_path / "a")), load_from_disk(str(tmp_path / "b"))
    assert all(a[s].to_list() == b[s].to_list() for s in ("train", "test"))


def test_iter_rows_reads_the_files_or_a_selection_as_stored(tmp_path):
    records = many_chains(6, seed=1)
    saved = schema.save_chains(records, str(tmp_path / "chains")).cast_column("image", Image(decode=False))
    stored = saved.to_list()
    assert [r for batch in arrow_io.iter_rows(saved, 4) for r in batch] == stored  # plain reads of the file
    picked = saved.select([3, 1, 2])  # a selection: through the memory map, in its order
    assert [r for batch in arrow_io.iter_rows(picked, 2) for r in batch] == [stored[3], stored[1], stored[2]]
    assert [r for batch in arrow_io.iter_rows(saved, 100, ["chain_id"]) for r in batch] == [
        {"chain_id": r["chain_id"]} for r in stored]


def test_row_writer_flushes_by_bytes(tmp_path):
    features = build_rows.features("critique-sft")
    writer = arrow_io.RowWriter(str(tmp_path / "rows.arrow"), features, max_rows=1000, max_bytes=300_000)
    image = {"bytes": os.urandom(100_000), "path": None}
    for i in range(10):
        writer.add({"messages": [], "images": [image], "chain_id": f"c{i}", "group_id": "g"})
        assert len(writer._rows) <= 3  # never more than max_bytes of rows held, whatever max_rows says
    written = writer.close()
    assert len(written) == 10 and written.cast_column("images", List(Image(decode=False)))[9]["images"][0] == image


def test_row_writer_writes_encoded_rows_in_the_batches_of_the_same_rows_as_dicts(tmp_path):
    import filecmp

    features = build_rows.features("critique-sft")
    small, medium, large = ([{"bytes": os.urandom(size), "path": None}] for size in (300, 600, 3000))
    images = [large if i % 9 == 8 else (small, medium)[i % 2] for i in range(23)]  # batches cut by rows and by bytes
    rows = [{"messages": [], "images": images[i], "chain_id": f"c{i}", "group_id": f"g{i % 4}"} for i in range(23)]
    as_dicts = arrow_io.RowWriter(str(tmp_path / "dicts.arrow"), features, max_rows=5, max_bytes=3000)
    as_dicts.extend(rows)
    encoded = arrow_io.RowWriter(str(tmp_path / "encoded.arrow"), features, max_rows=5, max_bytes=3000)
    for piece in (rows[:2], rows[2:11], rows[11:12], rows[12:]):  # pieces cut across the written batches
        encoded.add_encoded(arrow_io.EncodedRows.of(piece, features))
    assert as_dicts.n_rows == encoded.n_rows == 23
    assert as_dicts.close().to_list() == encoded.close().to_list()
    assert filecmp.cmp(tmp_path / "dicts.arrow", tmp_path / "encoded.arrow", shallow=False)
    mixed = arrow_io.RowWriter(str(tmp_path / "mixed.arrow"), features)
    mixed.add_encoded(arrow_io.EncodedRows.of(rows[:2], features))
    with pytest.raises(ValueError, match="one writer takes one way"):
        mixed.add(rows[2])


# ----------------------------------------------------------------------------- ingest and synth

def canonical_file(path, records):
    with open(path, "w") as f:
        for r in records:
            f.write(r if isinstance(r, str) else json.dumps(r) + "\n")
    return str(path)


def jsonl_record(i, **kw):
    rec = chain(f"j{i}", group_id=f"g{i // 2}")
    rec["image"] = "a.png"
    rec.update(kw)
    return rec


def test_ingest_lists_every_rejection_in_a_file_past_the_inline_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest, "REJECTED_INLINE", 3)
    (tmp_path / "a.png").write_bytes(png())
    good = [jsonl_record(i) for i in range(6)]
    bad = [jsonl_record(100 + i, steps=[]) for i in range(5)] + ["{not json\n"]
    mixed = [r for pair in zip(good, bad) for r in pair]
    path = canonical_file(tmp_path / "in.jsonl", mixed)
    stats = ingest.ingest("jsonl", path, str(tmp_path / "out"), on_error="skip", log=lambda m: None)
    assert stats["n_records"] == 12 == stats["n_chains"] + stats["n_rejected"] and stats["n_rejected"] == 6
    listed = [json.loads(line) for line in (tmp_path / "out" / "rejected.jsonl").read_text().splitlines()]
    assert [r["where"] for r in listed] == [f"in.jsonl:{i}" for i in range(2, 13, 2)]
    assert {r["field"] for r in listed} == {"steps", None}
    saved = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert saved["rejected"] == listed[:3] and saved["rejected_file"] == "rejected.jsonl"
    assert "rejected.jsonl" in (tmp_path / "out" / "README.md").read_text()
    # without an output folder the caller gets every rejection
    assert ingest.ingest("jsonl", path, None, on_error="skip", log=lambda m: None)["rejected"] == listed


def test_ingest_reads_parquet_a_batch_at_a_time_with_row_numbers(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "a.png").write_bytes(png())
    records = [dict(jsonl_record(i), meta="{}") for i in range(300)]  # more rows than one read batch
    records[280]["steps"] = []
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "in.parquet", row_group_size=100)
    stats = ingest.ingest("jsonl", str(tmp_path / "in.parquet"), str(tmp_path / "out"), on_error="skip",
                          log=lambda m: None)
    assert (stats["n_records"], stats["n_chains"], stats["n_rejected"]) == (300, 299, 1)
    assert stats["rejected"][0]["where"] == "in.parquet:row281"
    assert load_from_disk(str(tmp_path / "out"))["chain_id"][-1] == "j299"


def test_ingest_in_worker_processes_writes_the_same_chains(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest, "NUM_PROC_WINDOW", 4)  # several windows
    (tmp_path / "a.png").write_bytes(png())
    records = [jsonl_record(i) for i in range(11)] + [jsonl_record(3)]  # a duplicate id, found across windows
    path = canonical_file(tmp_path / "in.jsonl", records)
    one = ingest.ingest("jsonl", path, str(tmp_path / "one"), on_error="skip", log=lambda m: None)
    two = ingest.ingest("jsonl", path, str(tmp_path / "two"), on_error="skip", log=lambda m: None, num_proc=2)
    assert one == two and two["n_rejected"] == 1 and two["rejected"][0]["field"] == "chain_id"
    assert load_from_disk(str(tmp_path / "one")).to_list() == load_from_disk(str(tmp_path / "two")).to_list()
    with pytest.raises(ingest.IngestError, match="--num-proc"):
        ingest.ingest("jsonl", path, None, num_proc=0)


def test_synth_to_disk_streams_the_chains_and_counts_of_synthesize(tmp_path):
    stats = synth.synthesize_to_disk(40, seed=3, out_dir=str(tmp_path / "s"), image_size=32)
    chains = synth.synthesize(40, seed=3, image_size=32)
    saved = load_from_disk(str(tmp_path / "s")).cast_column("image", Image(decode=False))
    assert saved.to_list() == Dataset.from_list(chains, features=schema.features()).cast_column(
        "image", Image(decode=False)).to_list()
    assert {k: stats[k] for k in label_stats(chains)} == json.loads(json.dumps(label_stats(chains)))
    assert stats["groups_with_several_chains"] == 13  # ceil(40 / 3) = 14 groups, the last of one chain


def test_synth_counts_groups_whose_chains_are_apart():
    # the same scene and question drawn twice share a group id, far apart in the stream (seen at 200,000 chains)
    chains = synth.synthesize(24, seed=5, image_size=32)
    apart = chains[::2] + chains[1::2]
    assert label_stats(apart) == label_stats(chains)
    groups = {}
    for c in chains:
        groups.setdefault(c["group_id"], []).append(c)
    multi = [g for g in groups.values() if len(g) > 1]
    assert len(multi) == label_stats(apart)["groups_with_several_chains"] == 8
    assert label_stats(apart)["groups_identical_chains"] == sum(
        len({(tuple(s["text"] for s in c["steps"]), c["final_answer"]) for c in g}) == 1 for g in multi)
    assert label_stats(apart)["groups_without_faulty_chain"] == sum(all(c["chain_correct"] for c in g) for g in multi)


def test_a_canonical_jsonl_loads_through_the_generator_and_sees_edits(tmp_path):
    (tmp_path / "a.png").write_bytes(png())
    path = canonical_file(tmp_path / "c.jsonl", [jsonl_record(i) for i in range(3)])
    assert schema.load_chains(path)["chain_id"] == ["j0", "j1", "j2"]
    canonical_file(path, [jsonl_record(i) for i in range(5)])  # same path, new content: not the cached table
    assert len(schema.load_chains(path)) == 5
    canonical_file(path, [jsonl_record(0), jsonl_record(1, steps=[])])
    with pytest.raises(schema.SchemaError, match=r"c.jsonl:2, field 'steps'"):
        schema.load_chains(path)


# ----------------------------------------------------------------------------- verifier-sft layouts

def rows_by_chain(dataset):
    out = {}
    for split in ("train", "test"):
        for row in dataset[split]:
            out.setdefault(row["chain_id"], []).append(row)
    return out


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    root = tmp_path_factory.mktemp("layouts")
    records = many_chains(15, seed=7)
    schema.save_chains(records, str(root / "chains"))
    out = {}
    for layout in build_rows.VERIFIER_LAYOUTS:
        stats = build.build_dataset(schema.load_chains(str(root / "chains")), "verifier-sft", str(root / layout),
                                    test_fraction=0.3, seed=2, verifier_layout=layout)
        out[layout] = (stats, load_from_disk(str(root / layout)), root / layout)
    return out


@pytest.mark.parametrize("layout", ["task", "chain"])
def test_verifier_conversations_ask_the_rows_questions_with_the_image_once(layouts, layout):
    rows_stats, rows, _ = layouts["rows"]
    stats, conversations, folder = layouts[layout]
    assert stats["label_balance"] == rows_stats["label_balance"] and stats["verifier_layout"] == layout
    assert stats["chains_skipped"] == rows_stats["chains_skipped"]
    singles, grouped = rows_by_chain(rows), rows_by_chain(conversations)
    assert set(singles) == set(grouped)
    for chain_id, conversation_rows in grouped.items():
        asked = []
        for row in conversation_rows:
            messages = row["messages"]
            assert len(row["images"]) == 1 and len(messages) == 2 * len(row["tasks"])
            assert [m["role"] for m in messages] == ["user", "assistant"] * len(row["tasks"])
            images = [p for m in messages for p in m["content"] if p["type"] == "image"]
            assert len(images) == 1 and messages[0]["content"][0]["type"] == "image"
            for k, (task, label, index) in enumerate(zip(row["tasks"], row["labels"], row["step_indices"])):
                question = "".join(p["text"] for p in messages[2 * k]["content"] if p["type"] == "text")
                assert messages[2 * k + 1]["content"][0]["text"] == label
                asked.append((task, index, label, question))
        single = [(r["task"], r["step_index"], r["label"], r["messages"][0]["content"][1]["text"])
                  for r in singles[chain_id]]
        assert sorted(asked, key=str) == sorted(single, key=str)
        if layout == "chain":
            (row,) = conversation_rows
            assert row["tasks"][0] == "chain_correctness" or "chain_correctness" not in row["tasks"]
            steps = [i for i in row["step_indices"] if i is not None]
            assert steps == sorted(steps)
        else:
            assert sorted(r["tasks"][0] for r in conversation_rows) == sorted({t for t, *_ in asked})
    card = (folder / "README.md").read_text()
    assert f"--verifier-layout {layout}" in card


def test_verifier_layout_applies_to_verifier_sft_only(tmp_path):
    with pytest.raises(build.BuildError, match="only applies to kind 'verifier-sft'"):
        build.build_dataset(many_chains(2), "prm-sft", str(tmp_path / "x"), verifier_layout="chain")
    with pytest.raises(build.BuildError, match="verifier_layout must be one of"):
        build.build_dataset(many_chains(2), "verifier-sft", str(tmp_path / "x"), verifier_layout="steps")


def run_measured(argv):
    """A `stepcritic` command in a child process: (exit code, its peak RSS in MiB)."""
    proc = subprocess.Popen([sys.executable, "-m", "stepcritic", *argv], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024


def folder_bytes(path):
    return sum(os.path.getsize(os.path.join(r, n)) for r, _, names in os.walk(path) for n in names)


def test_miceval_verifier_chain_layout_meets_the_size_and_memory_targets(miceval_jsonl, tmp_path):
    chains = str(tmp_path / "chains")
    assert run_measured(["data", "ingest", "--format", "miceval", "--input", miceval_jsonl, "--out", chains])[0] == 0
    out = str(tmp_path / "verifier")
    code, peak_mib = run_measured(["data", "build", "--chains", chains, "--kind", "verifier-sft",
                                   "--verifier-layout", "chain", "--out", out])
    assert code == 0
    assert folder_bytes(out) <= 3 * folder_bytes(chains)  # 96 MB from 93 MB measured (rows: 967 MB)
    assert peak_mib < 1.5e9 / 2**20  # 0.4 GB measured (rows before streaming: 5.7 GB)
    stats = json.loads(open(os.path.join(out, "build_stats.json")).read())
    assert sum(stats["rows"].values()) + sum(stats["chains_skipped"].values()) == stats["chains_in"] == 446
