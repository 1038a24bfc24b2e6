"""`data build` says how big its output is next to the chains, and why when the rows repeat the chains' images
(verifier-sft's rows: one per task and step, each with its chain's image): the numbers in the line are the files'."""

import glob
import json
import os
import re

import pytest
from datasets import Image, List, load_from_disk
from helpers import chains, png

from stepcritic import cli
from stepcritic.data_prep import schema, sizes

LINE = re.compile(r"size: ([\d,.]+ [kMG]?B) on disk, ([\d.]+)x the chains' ([\d,.]+ [kMG]?B)(.*)")


@pytest.fixture(scope="module")
def chains_dir(tmp_path_factory) -> str:
    folder = str(tmp_path_factory.mktemp("in") / "chains")
    schema.save_chains([schema.validate_chain(c, c["chain_id"]) for c in chains(8)], folder)
    return folder


def build(capsys, chains_path: str, out, *extra: str) -> tuple[re.Match, dict]:
    assert cli.main(["data", "build", "--chains", chains_path, "--out", str(out), "--quiet", *extra]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("built "), lines
    match = LINE.fullmatch(lines[1])
    assert match, lines[1]
    return match, json.loads((out / "build_stats.json").read_text())


def in_bytes(text: str) -> float:
    number, unit = text.split()
    return float(number.replace(",", "")) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[unit]


def test_verifier_rows_say_they_repeat_the_images(chains_dir, tmp_path, capsys):
    out = tmp_path / "rows"
    match, stats = build(capsys, chains_dir, out, "--kind", "verifier-sft")
    chain_bytes = sum(os.path.getsize(p) for p in glob.glob(os.path.join(chains_dir, "data-*.arrow")))
    assert in_bytes(match.group(1)) == pytest.approx(sizes.disk_bytes(str(out)), rel=0.01)
    assert in_bytes(match.group(3)) == pytest.approx(chain_bytes, rel=0.01)
    assert float(match.group(2)) == pytest.approx(sizes.disk_bytes(str(out)) / chain_bytes, abs=0.051)
    rows = sum(stats["rows"].values())
    assert rows > 2 * stats["chains_used"]  # the case the line is there for
    why = match.group(4)
    assert f"each of the {rows:,} rows ({rows / stats['chains_used']:.1f} a chain) carries its chain's images " \
           "again (--verifier-layout chain writes them once a chain)" in why
    # the image bytes it names are the rows' own, each row's image counted once per row
    built = load_from_disk(str(out))
    written = sum(len(image["bytes"]) for split in built.values()
                  for row in split.cast_column("images", List(Image(decode=False))) for image in row["images"])
    assert f"images are {sizes.human(written)} of it" in why


def test_a_layout_with_each_image_once_says_no_more(chains_dir, tmp_path, capsys):
    match, _ = build(capsys, chains_dir, tmp_path / "chain", "--kind", "verifier-sft", "--verifier-layout", "chain")
    assert match.group(4) == ""


def test_a_kind_of_one_row_a_chain_says_no_more(chains_dir, tmp_path, capsys):
    match, _ = build(capsys, chains_dir, tmp_path / "prm", "--kind", "prm-sft")
    assert match.group(4) == "" and float(match.group(2)) < 2


def test_chains_from_a_jsonl_file_are_measured_as_read(tmp_path, capsys):
    (tmp_path / "a.png").write_bytes(png())
    path = tmp_path / "chains.jsonl"
    rows = [dict(c, image="a.png") for c in chains(6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    match, _ = build(capsys, str(path), tmp_path / "v", "--kind", "verifier-sft")
    # the images count although the .jsonl only names them: the chains are measured with their images read in
    assert in_bytes(match.group(3)) > 6 * len(png()) and "carries its chain's images again" in match.group(4)


def test_image_bytes_reads_nested_image_columns(chains_dir):
    files = glob.glob(os.path.join(chains_dir, "data-*.arrow"))
    loaded = schema.load_chains(chains_dir, decode_images=False)
    expected = sum(len(c["image"]["bytes"]) + sum(len(e["bytes"]) for e in c["extra_images"]) for c in loaded)
    assert sizes.image_bytes(files, ("image", "extra_images")) == expected > 0
    assert sizes.image_bytes(files, ("no_such_column",)) == 0
