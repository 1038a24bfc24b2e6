"""What `data ingest`, `synth` and `build` write, and what they must never destroy: an --out that is, is inside or
contains an input is refused (below an image root, only one that would replace a file or a folder of the user's); a
non-empty --out (or an existing file) is refused without --overwrite; the output appears only once complete, so a
failed or killed command (SIGKILL mid-build) leaves the earlier output loading as before and nothing half-written
under --out; a build that gives no row and an ingest that keeps no chain are
one-line errors saying why; the progress bar is on stderr, for a terminal only, and --quiet turns it off."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from datasets import load_from_disk
from helpers import chain, chains, step

from stepcritic import cli
from stepcritic.data_prep import build, outputs, progress, schema, synth

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
VPB = os.path.join(FIXTURES, "visualprocessbench", "test.jsonl")


def one_line_error(capsys, argv: list[str], *fragments: str) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("stepcritic data: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def listing(folder) -> dict:
    """Every file under `folder` with its size and modification time: what must not change."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            st = os.stat(os.path.join(root, name))
            out[os.path.relpath(os.path.join(root, name), folder)] = (st.st_size, st.st_mtime_ns)
    return out


def partials(folder, name: str = "") -> list[str]:
    """The staging folders beside outputs in `folder` (of the output `name` only, when given)."""
    return sorted(entry for entry in os.listdir(folder) if outputs.PARTIAL in entry
                  and entry.startswith(f".{name}{outputs.PARTIAL}" if name else "."))


@pytest.fixture(scope="module")
def chains_dir(tmp_path_factory) -> str:
    folder = str(tmp_path_factory.mktemp("in") / "chains")
    schema.save_chains([schema.validate_chain(c, c["chain_id"]) for c in chains(8)], folder)
    return folder


# ----------------------------------------------------------------------------- outputs that overlap an input

@pytest.mark.parametrize("where", ["same", "inside", "containing"])
def test_build_refuses_an_out_that_overlaps_its_chains(chains_dir, capsys, where):
    out = {"same": chains_dir, "inside": os.path.join(chains_dir, "built"),
           "containing": os.path.dirname(chains_dir)}[where]
    before = listing(chains_dir)
    for extra in ([], ["--overwrite"]):  # --overwrite never makes an input fair game
        line = one_line_error(capsys, ["data", "build", "--chains", chains_dir, "--kind", "prm-sft", "--out", out]
                              + extra, f"--out {out}", f"--chains {chains_dir}")
        assert {"same": "is --chains", "inside": "is inside --chains", "containing": "contains --chains"}[where] in line
    assert listing(chains_dir) == before
    assert len(schema.load_chains(chains_dir)) == 8


def test_build_refuses_an_out_over_its_template(chains_dir, tmp_path, capsys):
    template = tmp_path / "mine.j2"
    template.write_text("{{ question }}")
    one_line_error(capsys, ["data", "build", "--chains", chains_dir, "--kind", "prm-sft", "--out", str(template),
                            "--template", str(template), "--overwrite"], f"--out {template} is --template {template}")
    assert template.read_text() == "{{ question }}"


def test_ingest_refuses_an_out_that_overlaps_its_input_or_image_root(tmp_path, capsys):
    source, images = tmp_path / "raw", tmp_path / "images"
    source.mkdir()
    images.mkdir()
    (images / "own").mkdir()
    (images / "own" / "a.png").write_bytes(b"not really a png")
    data = source / "chains.jsonl"
    data.write_text('{"chain_id": "c0"}\n')
    base = ["data", "ingest", "--format", "jsonl", "--input", str(data), "--overwrite"]
    one_line_error(capsys, base + ["--out", str(data)], f"--out {data} is --input {data}")
    one_line_error(capsys, base + ["--out", str(source)], f"--out {source} contains --input {data}")
    rooted = base + ["--image-root", str(images), "--out"]
    one_line_error(capsys, rooted + [str(images)], f"--out {images} is --image-root {images}")
    one_line_error(capsys, rooted + [str(tmp_path)], f"--out {tmp_path} contains --input {data}")
    # below the image root, --overwrite still never replaces what may be an input: a file or a folder of images
    one_line_error(capsys, rooted + [str(images / "own")], f"--out {images / 'own'} is a folder inside --image-root "
                   f"{images} that holds 1 entries (a.png), not a StepCritic output")
    one_line_error(capsys, rooted + [str(images / "own" / "a.png")],
                   f"--out {images / 'own' / 'a.png'} is an existing file inside --image-root {images}")
    # the format's default image root (the input's folder) is guarded the same way
    (source / "pics").mkdir()
    (source / "pics" / "b.png").write_bytes(b"x")
    one_line_error(capsys, base + ["--out", str(source / "pics")],
                   f"--out {source / 'pics'} is a folder inside the image root {source}")
    assert data.read_text() == '{"chain_id": "c0"}\n' and os.listdir(images) == ["own"]
    assert os.listdir(images / "own") == ["a.png"] and os.listdir(source / "pics") == ["b.png"]


def write_layout(folder) -> None:
    """The usual layout of a user's own chains: chains.jsonl beside images/ holding the images it names."""
    from helpers import png

    (folder / "images").mkdir(parents=True)
    (folder / "images" / "a.png").write_bytes(png())
    rows = [dict(chain(f"c{i}"), image="images/a.png") for i in range(2)]
    (folder / "chains.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_ingest_writes_below_the_image_root_in_the_usual_layout(tmp_path, capsys, monkeypatch):
    write_layout(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = ["data", "ingest", "--format", "jsonl", "--input", "chains.jsonl", "--out", "data/chains2"]
    assert cli.main(argv + ["--image-root", "."]) == 0
    assert len(schema.load_chains("data/chains2")) == 2
    # an earlier output there is replaced with --overwrite, as anywhere else; an empty folder is taken
    assert cli.main(argv + ["--image-root", ".", "--overwrite"]) == 0
    (tmp_path / "images" / "empty").mkdir()
    assert cli.main(argv[:-1] + ["images/empty"]) == 0 and len(schema.load_chains("images/empty")) == 2
    capsys.readouterr()
    one_line_error(capsys, argv + ["--image-root", "."], "--out data/chains2 already holds a dataset", "--overwrite")
    assert sorted(os.listdir(tmp_path / "images")) == ["a.png", "empty"]
    assert partials(tmp_path / "data") == [] and partials(tmp_path / "images") == []


@pytest.mark.parametrize("fmt", ["visualprocessbench", "vl-rewardbench"])
def test_a_benchmark_ingest_writes_below_its_image_root(tmp_path, fmt):
    import shutil

    root = tmp_path / fmt
    shutil.copytree(os.path.join(FIXTURES, fmt), root)
    before = listing(root)
    out = root / "sub"
    argv = ["data", "ingest", "--format", fmt, "--input", str(root / "test.jsonl"), "--on-error", "skip",
            "--image-root", str(root), "--out", str(out)]
    assert cli.main(argv) == 0 and len(schema.load_chains(str(out))) > 0
    assert cli.main(argv + ["--overwrite"]) == 0
    assert {k: v for k, v in listing(root).items() if not k.startswith("sub" + os.sep)} == before


def test_the_library_refuses_to_build_into_the_chains_it_reads(chains_dir):
    loaded = schema.load_chains(chains_dir)
    with pytest.raises(outputs.OutputError, match="would destroy the input"):
        build.build_dataset(loaded, "prm-sft", chains_dir)
    assert len(schema.load_chains(chains_dir)) == 8


# ----------------------------------------------------------------------------- earlier outputs

def test_synth_refuses_a_non_empty_out_without_overwrite(tmp_path, capsys):
    out = tmp_path / "synth"
    assert cli.main(["data", "synth", "--n", "6", "--seed", "1", "--image-size", "32", "--out", str(out)]) == 0
    before = listing(out)
    one_line_error(capsys, ["data", "synth", "--n", "6", "--seed", "2", "--image-size", "32", "--out", str(out)],
                   f"--out {out} already holds a dataset", "--overwrite")
    assert listing(out) == before
    assert cli.main(["data", "synth", "--n", "9", "--seed", "2", "--image-size", "32", "--out", str(out),
                     "--overwrite"]) == 0
    assert json.loads((out / "stats.json").read_text())["seed"] == 2 and len(schema.load_chains(str(out))) == 9
    assert partials(tmp_path) == []


def test_build_refuses_a_non_empty_out_and_replaces_it_with_overwrite(chains_dir, tmp_path, capsys):
    out = tmp_path / "built"
    argv = ["data", "build", "--chains", chains_dir, "--out", str(out), "--test-fraction", "0.25"]
    assert cli.main(argv + ["--kind", "prm-sft"]) == 0
    before = listing(out)
    one_line_error(capsys, argv + ["--kind", "critique-sft"], f"--out {out} already holds a prm-sft dataset",
                   "pass --overwrite")
    assert listing(out) == before
    (out / "notes.txt").write_text("mine")  # replaced, not merged: nothing of the old output stays
    assert cli.main(argv + ["--kind", "critique-sft", "--overwrite"]) == 0
    assert json.loads((out / "build_stats.json").read_text())["kind"] == "critique-sft"
    assert not (out / "notes.txt").exists() and set(load_from_disk(str(out))) == {"train", "test"}
    assert partials(tmp_path) == []


@pytest.mark.parametrize("command", ["synth", "build", "ingest"])
def test_an_out_that_is_a_file_is_one_line_and_overwrite_replaces_it(chains_dir, tmp_path, capsys, command):
    out = tmp_path / "taken"
    out.write_text("not a dataset")
    argv = {"synth": ["data", "synth", "--n", "3", "--image-size", "32"],
            "build": ["data", "build", "--chains", chains_dir, "--kind", "prm-sft"],
            "ingest": ["data", "ingest", "--format", "visualprocessbench", "--input", VPB, "--on-error", "skip"]
            }[command] + ["--out", str(out)]
    one_line_error(capsys, argv, f"--out {out} is an existing file", "--overwrite")
    assert out.read_text() == "not a dataset"
    assert cli.main(argv + ["--overwrite"]) == 0
    assert out.is_dir() and partials(tmp_path) == []


def test_ingest_refuses_a_non_empty_folder_and_takes_an_empty_one(tmp_path, capsys):
    out = tmp_path / "vpb"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    argv = ["data", "ingest", "--format", "visualprocessbench", "--input", VPB, "--on-error", "skip", "--out",
            str(out)]
    one_line_error(capsys, argv, f"--out {out} already holds 1 entries (keep.txt)")
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    assert cli.main(argv) == 0
    assert len(schema.load_chains(str(out))) == 5


def test_library_calls_replace_an_existing_folder_unless_told_not_to(tmp_path):
    out = str(tmp_path / "s")
    synth.synthesize_to_disk(4, 0, out, image_size=32)
    synth.synthesize_to_disk(5, 1, out, image_size=32)
    assert len(schema.load_chains(out)) == 5
    with pytest.raises(outputs.OutputError, match="already holds a dataset"):
        synth.synthesize_to_disk(6, 2, out, image_size=32, overwrite=False)
    with pytest.raises(outputs.OutputError, match="already holds"):
        build.build_dataset(chains(4), "prm-sft", out, overwrite=False)
    assert len(schema.load_chains(out)) == 5


# ----------------------------------------------------------------------------- failed and killed commands

def test_a_failed_build_leaves_the_earlier_output(chains_dir, tmp_path, capsys, monkeypatch):
    from datasets import Dataset

    out = tmp_path / "built"
    assert cli.main(["data", "build", "--chains", chains_dir, "--kind", "prm-sft", "--out", str(out)]) == 0
    before = listing(out)
    records = [schema.validate_chain(c, c["chain_id"]) for c in chains(8)]
    records[6] = dict(records[6], steps=[])  # found once rows of the earlier batches are written
    bad = str(tmp_path / "bad")
    Dataset.from_list(records, features=schema.features()).save_to_disk(bad)
    monkeypatch.setattr(build, "CHAIN_BATCH", 2)
    one_line_error(capsys, ["data", "build", "--chains", bad, "--kind", "prm-sft", "--out", str(out),
                            "--overwrite"], f"{records[6]['chain_id']}, field 'steps'")
    assert listing(out) == before and partials(tmp_path) == []


def run_killed(argv: list[str], timeout: float = 120) -> None:
    """Start `stepcritic` with `argv` (a build whose --out comes last), SIGKILL it once it is writing rows (its first
    batch is on disk)."""
    parent, name = os.path.split(argv[argv.index("--out") + 1])
    env = dict(os.environ, HF_DATASETS_DISABLE_PROGRESS_BARS="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "stepcritic", *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"finished before it could be killed: {proc.stderr.read().decode()}"
            rows = [os.path.join(parent, p, work, "train.arrow") for p in partials(parent, name)
                    for work in os.listdir(os.path.join(parent, p)) if work.startswith(".build-")]
            if any(os.path.isfile(r) and os.path.getsize(r) > 0 for r in rows):
                break
            time.sleep(0.005)
        else:
            raise AssertionError("the build never started writing")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()  # reaped: a dead process's staging folder may then be cleared
    assert proc.returncode == -signal.SIGKILL


@pytest.fixture(scope="module")
def many_chains(tmp_path_factory) -> str:
    """Enough chains that a verifier-sft build writes for a while (several Arrow batches)."""
    folder = str(tmp_path_factory.mktemp("many") / "chains")
    synth.synthesize_to_disk(1500, 0, folder, image_size=32)
    return folder


def test_a_killed_build_leaves_the_earlier_output_or_none(many_chains, tmp_path, capsys):
    parent = tmp_path / "data"
    out = parent / "built"
    assert cli.main(["data", "build", "--chains", many_chains, "--kind", "prm-sft", "--out", str(out)]) == 0
    old = load_from_disk(str(out))
    before, old_rows = listing(out), {s: old[s]["chain_id"] for s in old}

    run_killed(["data", "build", "--chains", many_chains, "--kind", "verifier-sft", "--overwrite", "--out",
                str(out)])
    assert listing(out) == before
    reloaded = load_from_disk(str(out))
    assert {s: reloaded[s]["chain_id"] for s in reloaded} == old_rows
    assert json.loads((out / "build_stats.json").read_text())["kind"] == "prm-sft"
    # all the killed build left is its staging folder beside --out, hidden, named after it
    (left,) = partials(parent)
    assert left.startswith(".built.partial-") and sorted(os.listdir(parent)) == sorted([left, "built"])

    fresh = parent / "fresh"
    run_killed(["data", "build", "--chains", many_chains, "--kind", "verifier-sft", "--out", str(fresh)])
    assert not fresh.exists() and len(partials(parent, "fresh")) == 1

    # the next command writing there clears what the killed ones left
    one_line_error(capsys, ["data", "build", "--chains", many_chains, "--kind", "verifier-sft", "--out", str(out)],
                   "already holds a prm-sft dataset")
    assert partials(parent, "built") == [] and len(partials(parent, "fresh")) == 1
    assert cli.main(["data", "build", "--chains", many_chains, "--kind", "outcome-rm", "--out", str(fresh)]) == 0
    assert partials(parent) == [] and sorted(os.listdir(parent)) == ["built", "fresh"]


def test_an_output_moved_aside_by_a_killed_command_is_put_back(tmp_path):
    out = tmp_path / "built"
    synth.synthesize_to_disk(3, 0, str(out), image_size=32)
    before = listing(out)
    gone = subprocess.Popen(["true"])  # a process that is no longer running
    gone.wait()
    # a command killed between its two renames: the old output inside its staging folder, none at --out
    folder = tmp_path / f".built{outputs.PARTIAL}{outputs._HOST}-{gone.pid}-abcd1234"
    folder.mkdir()
    os.rename(out, folder / outputs.PREVIOUS)
    (folder / "built").mkdir()  # the new output, complete or not
    outputs.check_out(str(out), overwrite=True)
    assert listing(out) == before and partials(tmp_path) == []


def test_a_live_commands_staging_folder_is_left_alone(tmp_path):
    folder = tmp_path / f".built{outputs.PARTIAL}{outputs._HOST}-{os.getpid()}-abcd1234"
    folder.mkdir()
    outputs.check_out(str(tmp_path / "built"))
    assert folder.exists()


# ----------------------------------------------------------------------------- empty results

def test_a_critique_build_from_chains_without_critiques_says_so(tmp_path, capsys):
    chains_out = tmp_path / "vpb"
    assert cli.main(["data", "ingest", "--format", "visualprocessbench", "--input", VPB, "--on-error", "skip",
                     "--out", str(chains_out)]) == 0
    capsys.readouterr()
    for kind in ("critique-sft", "critique-pref"):
        one_line_error(capsys, ["data", "build", "--chains", str(chains_out), "--kind", kind, "--out",
                                str(tmp_path / kind)],
                       f"no {kind} row to write: none of the 5 chains gives one",
                       "3 have no verdict on the final answer", "2 have a neutral step",
                       "no chain has a critique to train on", "--kind prm-sft", "nothing written")
        assert not (tmp_path / kind).exists()
    assert partials(tmp_path) == []
    assert cli.main(["data", "build", "--chains", str(chains_out), "--kind", "prm-sft", "--out",
                     str(tmp_path / "prm")]) == 0


def test_an_outcome_build_without_contrast_says_so(tmp_path, capsys):
    folder = str(tmp_path / "chains")
    schema.save_chains([schema.validate_chain(chain(f"c{i}", group_id=f"g{i}"), f"c{i}") for i in range(3)], folder)
    one_line_error(capsys, ["data", "build", "--chains", folder, "--kind", "outcome-rm", "--out",
                            str(tmp_path / "o")],
                   "no outcome-rm row to write: none of the 3 chains gives one (3 have no chain of the other verdict",
                   "--kind prm-sft")
    assert not (tmp_path / "o").exists()


def test_a_neutral_only_critique_build_points_at_neutral(tmp_path, capsys):
    neutral = chain("n0", steps=[step("A red circle.", correct=None, rating=0)])
    path = tmp_path / "chains.jsonl"
    path.write_text(json.dumps(dict(neutral, image="x.png")) + "\n")
    from PIL import Image

    Image.new("RGB", (8, 8)).save(tmp_path / "x.png")
    one_line_error(capsys, ["data", "build", "--chains", str(path), "--kind", "critique-sft", "--out",
                            str(tmp_path / "o")], "1 have a neutral step", "--neutral correct or incorrect")


def test_an_ingest_that_keeps_no_chain_says_why(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"chain_id": "a"}\n{"chain_id": "b"}\n')
    code = cli.main(["data", "ingest", "--format", "jsonl", "--input", str(path), "--on-error", "skip", "--out",
                     str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    skipped, (last,) = err[:-1], err[-1:]
    assert len(skipped) == 2 and all(s.startswith("skipped bad.jsonl:") for s in skipped)  # the rejections, as ever
    assert last.startswith(f"stepcritic data: error: no valid chains in {path}: 2 records read, 0 kept, 2 rejected "
                           "(the first: bad.jsonl:1"), last
    assert last.endswith("nothing written") and not (tmp_path / "o").exists() and partials(tmp_path) == []


# ----------------------------------------------------------------------------- progress

@pytest.mark.parametrize("terminal,quiet", [(True, False), (True, True), (False, False)])
def test_progress_bar_on_a_terminal_only(chains_dir, tmp_path, capsys, monkeypatch, terminal, quiet):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    made = progress.bar

    def eager(*args, **kwargs):  # every update drawn, so the counts at the end are on the captured stream
        shown = made(*args, **kwargs)
        shown.mininterval, shown.miniters, shown.dynamic_miniters = 0, 0, False
        return shown

    monkeypatch.setattr(progress, "bar", eager)
    extra = ["--quiet"] if quiet else []
    runs = {"synth": ["data", "synth", "--n", "6", "--image-size", "32", "--out", str(tmp_path / "s")],
            "build": ["data", "build", "--chains", chains_dir, "--kind", "prm-sft", "--out", str(tmp_path / "b")],
            "ingest": ["data", "ingest", "--format", "visualprocessbench", "--input", VPB, "--on-error", "skip",
                       "--out", str(tmp_path / "i")]}
    summaries = {"synth": "synthesised chains=6", "build": "built prm-sft:", "ingest": "ingested n_records=9"}
    for command, argv in runs.items():
        assert cli.main(argv + extra) == 0
        captured = capsys.readouterr()
        assert captured.out.startswith(summaries[command]), captured.out  # the summary, on stdout as before
        shown = terminal and not quiet
        bar = {"synth": "synth: ", "build": "build prm-sft: ", "ingest": "ingest: "}[command]
        assert (bar in captured.err) == shown, (command, captured.err)
        if shown:
            counts = {"synth": "6/6 [", "build": "8/8 [", "ingest": "9 records ["}[command]
            assert counts in captured.err, captured.err
            if command == "build":
                built = load_from_disk(argv[-1])
                assert f"{len(built['train']) + len(built['test'])} rows written" in captured.err, captured.err
            if command == "ingest":  # the rejections still show, one line each, around the bar
                assert "5 kept, 4 rejected" in captured.err
                assert captured.err.count("skipped test.jsonl:") == 4
