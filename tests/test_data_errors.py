"""Every bad input to the data stage (and `eval --chains`) is one line `stepcritic <command>: error: ...` naming the
file, record or option, and exit code 2; never a traceback. The CLI runs in-process (`stepcritic.cli.main`)."""

import json

import pytest
from helpers import built_dataset, chain, chains, write_jsonl

from stepcritic import cli


def one_line_error(capsys, argv: list[str], *fragments: str, command: str = "data") -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"stepcritic {command}: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> str:
    return built_dataset(tmp_path_factory, "prm-sft")


@pytest.mark.parametrize("n", ["0", "-3"])
def test_synth_needs_a_positive_number_of_chains(tmp_path, capsys, n):
    one_line_error(capsys, ["data", "synth", "--n", n, "--out", str(tmp_path / "s")], "--n", f"got {n}")
    assert not (tmp_path / "s").exists()


def test_synth_image_size_too_small_to_render(tmp_path, capsys):
    one_line_error(capsys, ["data", "synth", "--n", "3", "--image-size", "8", "--out", str(tmp_path / "s")],
                   "--image-size must be at least 24 px", "got 8")


def test_build_pointed_at_a_built_dataset(built, tmp_path, capsys):
    one_line_error(capsys, ["data", "build", "--chains", built, "--kind", "critique-sft", "--out", str(tmp_path / "o")],
                   built, "built by `stepcritic data build` (kind 'prm-sft')", "not chains")


def test_eval_pointed_at_a_built_dataset(built, tmp_path, capsys):
    one_line_error(capsys, ["eval", "--chains", built, "--judge", "always-correct", "--out", str(tmp_path / "e")],
                   built, "kind 'prm-sft'", command="eval")


def test_build_from_an_empty_jsonl(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    one_line_error(capsys, ["data", "build", "--chains", str(empty), "--kind", "prm-sft", "--out", str(tmp_path / "o")],
                   f"{empty}: holds no chains")


def test_ingest_an_empty_jsonl(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    one_line_error(capsys, ["data", "ingest", "--format", "jsonl", "--input", str(empty), "--out", str(tmp_path / "o")],
                   f"{empty}: holds no records")


def test_ingest_a_directory_as_input(tmp_path, capsys):
    one_line_error(capsys, ["data", "ingest", "--format", "miceval", "--input", str(tmp_path), "--out",
                            str(tmp_path / "o")], f"{tmp_path} is a folder", "--input takes one file")


def test_ingest_unreadable_parquet(tmp_path, capsys):
    bad = tmp_path / "rows.parquet"
    bad.write_bytes(b"this is not parquet at all")
    one_line_error(capsys, ["data", "ingest", "--format", "stepwise", "--input", str(bad), "--out",
                            str(tmp_path / "o")], f"{bad}: unreadable parquet file")


def test_ingest_a_binary_file_as_jsonl(tmp_path, capsys):
    bad = tmp_path / "rows.jsonl"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    one_line_error(capsys, ["data", "ingest", "--format", "jsonl", "--input", str(bad), "--out",
                            str(tmp_path / "o")], f"{bad}:1: not UTF-8 text")


@pytest.mark.parametrize("command", ["data", "eval"])
def test_a_chains_set_without_a_steps_column(tmp_path, capsys, command):
    from datasets import Dataset

    rows = [{k: v for k, v in c.items() if k not in ("steps", "meta")} for c in chains(4)]
    folder = str(tmp_path / "no-steps")
    Dataset.from_list(rows).save_to_disk(folder)
    if command == "data":
        argv = ["data", "build", "--chains", folder, "--kind", "prm-sft", "--out", str(tmp_path / "o")]
    else:
        argv = ["eval", "--chains", folder, "--judge", "always-correct", "--out", str(tmp_path / "e")]
    one_line_error(capsys, argv, folder, "field 'steps'", "no 'steps' column", command=command)


def test_a_folder_that_is_no_dataset(tmp_path, capsys):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello")
    one_line_error(capsys, ["data", "build", "--chains", str(folder), "--kind", "prm-sft", "--out",
                            str(tmp_path / "o")], f"{folder}: not a chains dataset")


def test_a_malformed_jsonl_line_names_the_line(tmp_path, capsys):
    path = tmp_path / "chains.jsonl"
    path.write_text("{not json\n")
    one_line_error(capsys, ["data", "build", "--chains", str(path), "--kind", "prm-sft", "--out",
                            str(tmp_path / "o")], f"{path}:1: malformed JSON line")


def cut_line() -> str:
    """A chain's JSON line cut short after 50 characters, between two fields, as a copy stopped mid-write leaves it."""
    line = json.dumps(dict(chain("c1", question="Is it red, too?"), image="x.png"))
    assert line[:50].endswith('too?", ')
    return line[:50]


@pytest.mark.parametrize("command", ["ingest", "build"])
def test_a_line_cut_short_is_reported_on_its_line_where_it_ends(tmp_path, capsys, command):
    path = tmp_path / "chains.jsonl"
    path.write_text(json.dumps(dict(chain("c0"), image=None)) + "\n" + cut_line() + "\n")
    argv = {"ingest": ["data", "ingest", "--format", "jsonl", "--input", str(path)],
            "build": ["data", "build", "--chains", str(path), "--kind", "prm-sft"]}[command]
    line = one_line_error(capsys, argv + ["--out", str(tmp_path / "o")], "chains.jsonl:2: malformed JSON line",
                          "at column 51; the line ends after column 50: is it cut short?")
    assert "column 1;" not in line and "line 3" not in line


def test_a_cut_string_names_where_it_starts_and_where_the_line_ends(tmp_path, capsys):
    path = tmp_path / "chains.jsonl"
    line = json.dumps(dict(chain("c0"), image=None))
    start = line.index('"What colour')
    path.write_text(line[:start + 5] + "\r\n")  # Windows line ends are left out too
    one_line_error(capsys, ["data", "ingest", "--format", "jsonl", "--input", str(path), "--out",
                            str(tmp_path / "o")],
                   f"chains.jsonl:1: malformed JSON line (Unterminated string starting at column {start + 1}; the "
                   f"line ends after column {start + 5}: is it cut short?)")


def test_a_bad_character_mid_line_is_reported_at_its_column(tmp_path, capsys):
    path = tmp_path / "chains.jsonl"
    path.write_text('{"chain_id": "c0",, "question": "q"}\n')
    line = one_line_error(capsys, ["data", "ingest", "--format", "jsonl", "--input", str(path), "--out",
                                   str(tmp_path / "o")], "chains.jsonl:1: malformed JSON line", "at column 19)")
    assert "cut short" not in line


def test_a_json_document_cut_short_is_reported_on_its_last_line(tmp_path, capsys):
    path = tmp_path / "chains.json"
    path.write_text("[\n" + json.dumps(dict(chain("c0"), image=None)) + ",\n" + cut_line() + "\n\n")
    one_line_error(capsys, ["data", "ingest", "--format", "jsonl", "--input", str(path), "--out",
                            str(tmp_path / "o")], "chains.json:3: malformed JSON",
                   "at column 51; the line ends after column 50")


@pytest.mark.parametrize("command", ["ingest", "build"])
def test_a_file_that_is_no_image_names_the_record_and_the_path(tmp_path, capsys, command):
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "notes.png").write_text("a text file with an image's name")
    path = write_jsonl(tmp_path / "chains.jsonl", [dict(chain("c0"), image=None),
                                                   dict(chain("c1"), image="images/notes.png")])
    argv = {"ingest": ["data", "ingest", "--format", "jsonl", "--input", path],
            "build": ["data", "build", "--chains", path, "--kind", "prm-sft"]}[command]
    line = one_line_error(capsys, argv + ["--out", str(tmp_path / "o")], "chains.jsonl:2, field 'image': image "
                          f"cannot be decoded (file {tmp_path / 'images' / 'notes.png'}: no image format recognised)")
    assert "BytesIO" not in line and " at 0x" not in line


def test_image_bytes_that_are_no_image_say_so_without_a_buffer(tmp_path, capsys):
    import base64

    path = write_jsonl(tmp_path / "chains.jsonl", [dict(chain("c0"), image=base64.b64encode(b"no image").decode())])
    line = one_line_error(capsys, ["data", "ingest", "--format", "jsonl", "--input", path, "--out",
                                   str(tmp_path / "o")],
                          "chains.jsonl:1, field 'image': image cannot be decoded (the base64 text: no image format")
    assert "BytesIO" not in line


@pytest.mark.parametrize("fraction", ["0", "1", "1.5", "-0.1", "nan"])
def test_test_fraction_outside_zero_one(tmp_path, capsys, fraction):
    data = write_jsonl(tmp_path / "chains.jsonl", [])  # never read: the option is checked first
    one_line_error(capsys, ["data", "build", "--chains", data, "--kind", "prm-sft", "--out", str(tmp_path / "o"),
                            "--test-fraction", fraction], "--test-fraction must be between 0 and 1", f"got {fraction}")


def test_build_options_are_checked_before_the_chains_are_read(tmp_path, capsys):
    data = write_jsonl(tmp_path / "chains.jsonl", [])
    base = ["data", "build", "--chains", data, "--out", str(tmp_path / "o")]
    one_line_error(capsys, base + ["--kind", "prm-sft", "--pref-mix", '{"answer_flip": 1}'],
                   "pref_mix only applies to kind 'critique-pref'")
    one_line_error(capsys, base + ["--kind", "critique-pref", "--pref-mix", "{oops"], "pref_mix is not valid JSON")
    one_line_error(capsys, base + ["--kind", "prm-sft", "--template", str(tmp_path / "missing.j2")],
                   "missing.j2", "neither a file nor a packaged template")


def test_a_bad_record_names_file_line_and_field(tmp_path, capsys):
    bad = chain("c1", steps=[])
    bad["image"] = None
    path = write_jsonl(tmp_path / "chains.jsonl", [{**bad, "steps": "not a list"}])
    one_line_error(capsys, ["data", "build", "--chains", path, "--kind", "prm-sft", "--out", str(tmp_path / "o")],
                   f"{path}:1, field 'steps'")
