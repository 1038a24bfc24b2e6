"""`data ingest` ends with the same summary line for every format: records in = kept + rejected, then the chains
and steps kept, the counts stats.json and the card hold; one function writes it (`ingest.summary_lines`)."""

import json
import os
import re

import pytest
from helpers import chain, miceval_record, png, visco_record, write_jsonl

from stepcritic import cli
from stepcritic.data_prep import ingest

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
PUBLISHED = {  # the hand-written fixtures in each benchmark's layout, bad records included
    "visualprocessbench": "visualprocessbench/test.jsonl",
    "visualprm": "visualprm/annotations.jsonl",
    "vl-rewardbench": "vl-rewardbench/test.jsonl",
    "multimodal-rewardbench": "multimodal-rewardbench/all_data.json",
    "mm-rlhf-rewardbench": "mm-rlhf-rewardbench/mm_reward_bench.jsonl",
    "processbench": "processbench/gsm8k.json",
    "prmbench": "prmbench/prmtest.jsonl",
}
LINE = re.compile(r"ingested n_records=(\d+), n_kept=(\d+), n_rejected=(\d+), n_chains=(\d+), n_steps=(\d+) -> (.+)")


def made_input(fmt: str, folder) -> str:
    """A small input of `fmt` with two good records and one bad one, for the formats without a fixture file."""
    folder.mkdir()
    if fmt == "miceval":
        images = folder / "dataset" / "image" / "vqav2" / "images"
        images.mkdir(parents=True)
        (images / "a.png").write_bytes(png())
        return write_jsonl(folder / "dataset" / "MiCEval_Normal.jsonl",
                           [miceval_record(0), miceval_record(1, question="Another?"), "{cut short"])
    if fmt == "visco":
        return write_jsonl(folder / "test.jsonl", [visco_record(0), visco_record(1, labels=(True, True)),
                                                   visco_record(2, labels=(True, "nope", True))])
    (folder / "img.png").write_bytes(png())
    if fmt == "stepwise":
        return write_jsonl(folder / "prm.jsonl", [
            {"id": "a", "prompt": "Q?", "completions": ["s1", "s2"], "labels": [True, False], "image": "img.png"},
            {"id": "b", "prompt": "Q?", "completions": ["s1"], "labels": [1], "image": "img.png"},
            {"id": "c", "prompt": "Q?", "completions": ["s1"], "labels": [True], "image": "nope.png"}])
    assert fmt == "jsonl"
    return write_jsonl(folder / "mine.jsonl", [dict(chain("a"), image="img.png"), dict(chain("b"), image="img.png"),
                                               dict(chain("c"), image="img.png", colour="red")])


def test_every_format_has_a_case():
    assert set(PUBLISHED) | {"miceval", "visco", "stepwise", "jsonl"} == set(ingest.FORMATS)


@pytest.mark.parametrize("fmt", sorted(ingest.FORMATS))
def test_one_summary_line_for_every_format(fmt, tmp_path, capsys):
    source = os.path.join(FIXTURES, PUBLISHED[fmt]) if fmt in PUBLISHED else made_input(fmt, tmp_path / "in")
    out = tmp_path / "out"
    assert cli.main(["data", "ingest", "--format", fmt, "--input", source, "--on-error", "skip", "--out",
                     str(out)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    match = LINE.fullmatch(first)
    assert match, first
    n_records, n_kept, n_rejected, n_chains, n_steps = map(int, match.groups()[:5])
    assert match.group(6) == str(out)
    assert n_records == n_kept + n_rejected and n_rejected >= 1 and n_chains >= n_kept >= 1
    stats = json.loads((out / "stats.json").read_text())
    assert [stats[k] for k in ingest.SUMMARY_KEYS] == [n_records, n_kept, n_rejected, n_chains, n_steps]
    card = (out / "README.md").read_text()
    for what, count in [("records in", n_records), ("records kept", n_kept), ("records rejected", n_rejected),
                        ("chains kept", n_chains), ("steps", n_steps)]:
        assert f"| {what} | {count} |" in card, (what, card)


def test_the_summary_refuses_counts_that_do_not_add_up():
    stats = {"n_records": 5, "n_kept": 3, "n_rejected": 1, "n_chains": 3, "n_steps": 6}
    with pytest.raises(AssertionError):
        ingest.summary_lines(stats, "o")
